"""Waiting JoinGroups hold no thread (issue 36 item 4: Kafka's purgatory).

A join waits for its rebalance, up to the rebalance timeout.  At a broker it is
parked (``sparklog.groups.purgatory``) and the Kafka listener's request thread
returns to the pool; the answer is sent when the group's state completes it, in
the connection's request order.  These tests run an in-process broker on
127.0.0.1 and speak raw Kafka frames (``tests/kafka/wire.py``).  Time is moved by
the group coordinator's clock, not by sleeping: ``now_ms`` of the coordinator and
of its deadline thread is shifted, and the deadline thread, which looks at the
clock at least once a second, answers what the shifted time completes.
"""

from __future__ import annotations

import contextlib
import datetime
import select
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from kio.index import load_response_schema
from kio.schema.join_group.v5.request import JoinGroupRequest, JoinGroupRequestProtocol
from kio.schema.sync_group.v3.request import SyncGroupRequest, SyncGroupRequestAssignment
from kio.serial import entity_reader

from sparklog.broker_lite.config import load_config
from sparklog.broker_lite.kafka.groups import encode_assignment, encode_subscription
from sparklog.broker_lite.server import start_broker, stop_broker
from sparklog.clock import now_ms
from sparklog.topic_partition import TopicPartition
from tests.kafka.wire import Connection
from tests.support.waiting import wait_for

#: coordinator calls that wait for a group on the calling thread
BLOCKING_CALLS = {"join_group", "sync_group", "sync_group_opaque"}


class ShiftedClock:
    """The group coordinator's clock, moved forward by the test (``skip``)."""

    def __init__(self) -> None:
        self.offset_ms = 0

    def __call__(self) -> int:
        return now_ms() + self.offset_ms

    def skip(self, ms: int) -> None:
        self.offset_ms += ms


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> ShiftedClock:
    shifted = ShiftedClock()
    monkeypatch.setattr("sparklog.groups.coordinator.now_ms", shifted)
    monkeypatch.setattr("sparklog.groups.purgatory.now_ms", shifted)
    return shifted


@contextlib.contextmanager
def _broker(tmp_path: Any, **config: Any) -> Iterator[tuple[Any, Any]]:
    """An in-process broker with a Kafka listener on 127.0.0.1: (server, broker)."""
    base = {
        "root": f"file://{tmp_path}/root",
        "listen": "127.0.0.1:0",
        "metrics_listen": "",
        "kafka_listen": "127.0.0.1:0",
        "cleaner_interval_ms": 0,
        **config,
    }
    server, broker = start_broker(load_config(None, base, env={}))[:2]
    try:
        yield server, broker
    finally:
        stop_broker(server, broker)


def _join(group: str, member_id: str = "", rebalance_ms: int = 300_000) -> JoinGroupRequest:
    return JoinGroupRequest(
        group_id=group,  # type: ignore[arg-type]
        session_timeout=datetime.timedelta(milliseconds=300_000),  # type: ignore[arg-type]
        rebalance_timeout=datetime.timedelta(milliseconds=rebalance_ms),  # type: ignore[arg-type]
        member_id=member_id,
        group_instance_id=None,
        protocol_type="consumer",
        protocols=(JoinGroupRequestProtocol(name="range", metadata=encode_subscription(["t"])),),
    )


def _sync(group: str, generation: int, member_id: str) -> SyncGroupRequest:
    assignment = encode_assignment([TopicPartition("t", 0)])
    return SyncGroupRequest(
        group_id=group,  # type: ignore[arg-type]
        generation_id=generation,  # type: ignore[arg-type]
        member_id=member_id,
        group_instance_id=None,
        assignments=(SyncGroupRequestAssignment(member_id=member_id, assignment=assignment),),
    )


def _read(conn: Connection, request: Any) -> tuple[int, Any]:
    """The next answer on ``conn``, decoded as ``request``'s response: (correlation, body)."""
    frame = conn.read_frame()
    assert frame is not None, "the broker closed the connection"
    cls = load_response_schema(request.__api_key__, request.__version__)
    header, offset = entity_reader(cls.__header_schema__)(frame, 0)
    body, _ = entity_reader(cls)(frame, offset)
    return int(header.correlation_id), body


def _threads_in(names: set[str], path: str) -> list[str]:
    """Threads whose stack is inside a function of ``names`` defined in ``path``."""
    found = []
    for ident, frame in sys._current_frames().items():
        walked: Any = frame
        while walked is not None:
            if walked.f_code.co_name in names and path in walked.f_code.co_filename:
                found.append(str(ident))
                break
            walked = walked.f_back
    return found


def _threads_waiting_in_coordinator() -> list[str]:
    """Threads whose stack is inside a blocking coordinator wait (a join or sync)."""
    return _threads_in(BLOCKING_CALLS, "groups/coordinator")


def _busy_request_threads() -> list[str]:
    """The Kafka listener's request threads handling a request now."""
    return _threads_in({"_handle_in_order"}, "kafka/server")


def _state(broker: Any, group: str) -> dict[str, Any]:
    """The group's state as the coordinator holds it in memory (no maintenance)."""
    return dict(broker.coordinator.state_doc(group).read()[1])


GROUPS = 1_000
CONNECTIONS = 20


def test_a_thousand_one_member_groups_join_at_once_without_a_thread_each(
    tmp_path: Any, clock: ShiftedClock
) -> None:
    # a long initial rebalance delay (Kafka's group.initial.rebalance.delay.ms): every
    # join waits until the coordinator's clock is moved past it
    with _broker(tmp_path, group_initial_rebalance_delay_ms=60_000) as (server, broker):
        baseline = threading.active_count()
        names = [f"g{i:04d}" for i in range(GROUPS)]
        conns = [Connection(broker.cluster.kafka_address or "") for _ in range(CONNECTIONS)]
        per_conn = GROUPS // CONNECTIONS
        sent: list[list[tuple[int, str]]] = [[] for _ in conns]
        try:
            for c, conn in enumerate(conns):  # pipelined: 50 joins in flight per connection
                for group in names[c * per_conn : (c + 1) * per_conn]:
                    frame = conn.encode(_join(group))
                    conn.send_frame(frame)
                    sent[c].append((conn.correlation, group))

            def all_parked() -> bool:
                known = set(broker.coordinator.known_groups())
                if not known.issuperset(names):
                    return False
                return all(
                    _state(broker, g)["state"] == "PreparingRebalance"
                    and len(_state(broker, g)["members"]) == 1
                    for g in names
                )

            # every join has reached its group and waits (or, before parking, threads
            # sit in the coordinator's wait loop)
            wait_for(
                lambda: all_parked() or _threads_waiting_in_coordinator(),
                timeout_s=300,
                what="1,000 joins waiting for their rebalance",
            )
            assert _threads_waiting_in_coordinator() == []
            assert all_parked()
            assert broker.coordinator.parked() == GROUPS
            # no request thread is held by a waiting join: the pool is idle
            wait_for(lambda: not _busy_request_threads(), what="request threads back in the pool")
            # threads: 2 per connection and the listener's pools, not one per waiting join
            pool = server.kafka.requests._max_workers
            assert threading.active_count() - baseline <= 2 * CONNECTIONS + pool + 10
            clock.skip(61_000)  # the initial delay ends: every group completes its rebalance
            members: dict[str, str] = {}
            for c, conn in enumerate(conns):
                for correlation, group in sent[c]:
                    got, body = _read(conn, _join(group))
                    assert got == correlation  # answered in the connection's order
                    assert int(body.error_code) == 0, (group, body.error_code)
                    assert int(body.generation_id) == 1 and body.leader == body.member_id
                    members[group] = body.member_id
            for c, conn in enumerate(conns):  # each leader syncs: the group is Stable
                for _, group in sent[c]:
                    conn.send_frame(conn.encode(_sync(group, 1, members[group])))
            for c, conn in enumerate(conns):
                for _, group in sent[c]:
                    _, body = _read(conn, _sync(group, 1, members[group]))
                    assert int(body.error_code) == 0
            assert {_state(broker, g)["state"] for g in names} == {"Stable"}
            assert broker.coordinator.parked() == 0
        finally:
            for conn in conns:
                conn.close()


def test_a_join_waiting_for_a_slow_member_is_answered_at_the_rebalance_timeout(
    tmp_path: Any, clock: ShiftedClock
) -> None:
    with _broker(tmp_path) as (_server, broker):
        address = broker.cluster.kafka_address or ""
        slow, fresh = Connection(address), Connection(address)
        try:
            # the slow member: joins, leads, syncs, then never joins again
            body = slow.call(_join("slow", rebalance_ms=10_000))
            assert int(body.error_code) == 0 and int(body.generation_id) == 1
            synced = slow.call(_sync("slow", 1, body.member_id))
            assert int(synced.error_code) == 0
            # a new member joins: a rebalance starts, and waits for the slow member
            request = _join("slow", rebalance_ms=10_000)
            fresh.send_frame(fresh.encode(request))
            wait_for(
                lambda: (
                    (
                        _state(broker, "slow")["state"] == "PreparingRebalance"
                        and len(_state(broker, "slow")["members"]) == 2
                    )
                    or _threads_waiting_in_coordinator()
                ),
                what="the new member's join waiting for the slow member",
            )
            assert _threads_waiting_in_coordinator() == []
            assert broker.coordinator.parked() == 1
            # the slow member has not rejoined and the rebalance timeout has not passed:
            # no answer can be on its way
            assert select.select([fresh.sock], [], [], 0)[0] == []
            clock.skip(11_000)  # past the rebalance timeout (10 s from the new join)
            _, answer = _read(fresh, request)
            assert int(answer.error_code) == 0
            assert int(answer.generation_id) == 2
            # the slow member was left out: the new one leads a group of itself
            assert answer.leader == answer.member_id
            assert [m.member_id for m in answer.members] == [answer.member_id]
            assert broker.coordinator.parked() == 0
        finally:
            slow.close()
            fresh.close()
