"""A partition leader that does not coordinate a transactional id verifies a
transactional batch (KIP-890) by asking the id's coordinator, once per transaction and
partition, and reads the id's log and journal tail itself when the coordinator cannot be
reached.

Two in-process brokers on one local root; the only stand-in is, in the last part, the
leader's view of who coordinates the id pointed at a port nothing listens on.
"""

from __future__ import annotations

import logging
import time

import pytest

from sparklog.broker_lite.cluster import BrokerInfo, rendezvous_weight
from sparklog.broker_lite.service import Broker
from tests.chaos.inproc import inproc_broker

NOWHERE = BrokerInfo(99, "127.0.0.1:1", 0)


def _until(condition, what: str, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _coordinated_by(broker_id: int) -> str:
    """A transactional id whose coordinator among brokers 0 and 1 is ``broker_id``."""
    return next(
        tid
        for tid in (f"tx-{i}" for i in range(100))
        if max((0, 1), key=lambda b: rendezvous_weight(tid, 0, b)) == broker_id
    )


def _next_transaction(coordinator: Broker, tid: str, pid: int, epoch: int, p: int) -> None:
    coordinator.transactions.add_partitions(tid, pid, epoch, [("t", p)])


def test_a_leader_asks_the_coordinator_once_per_transaction_and_reads_the_log_without_it(
    tmp_path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    root = f"file://{tmp_path}/root"
    with (
        inproc_broker(root, broker_id=0) as (first, _),
        inproc_broker(root, broker_id=1) as (second, _),
    ):
        a, b = first.broker, second.broker
        assert a.cluster is not None and b.cluster is not None
        _until(lambda: set(a.cluster.live()) == set(b.cluster.live()) == {0, 1}, "both live")
        a.create_topic("t", 4)
        led_by_b = [p for p in range(4) if b.cluster.is_leader("t", p)]
        _until(lambda: not any(a.cluster.is_leader("t", p) for p in led_by_b), "one view")
        assert led_by_b, "broker 1 leads none of t's partitions"
        p = led_by_b[0]
        tid = _coordinated_by(0)
        assert b.cluster.transaction_coordinator(tid).broker_id == 0  # type: ignore[union-attr]
        producer = a.transactions.init_producer(tid, 60_000)
        pid, epoch = producer.producer_id, producer.producer_epoch
        leader = b.transactions

        _next_transaction(a, tid, pid, epoch, p)
        assert leader.verify(pid, epoch, "t", p) == 1
        assert leader.verify(pid, epoch, "t", p) == 1  # the answer kept: not asked again
        assert leader.asked == 1
        a.transactions.end(tid, pid, epoch, commit=True)  # the marker lands on b's partition

        _next_transaction(a, tid, pid, epoch, p)
        assert leader.verify(pid, epoch, "t", p, ended=1) == 2  # past the marker: asked
        assert leader.asked == 2
        a.transactions.end(tid, pid, epoch, commit=False)

        _next_transaction(a, tid, pid, epoch, p)
        monkeypatch.setattr(b.cluster, "transaction_coordinator", lambda tid: NOWHERE)
        with caplog.at_level(logging.INFO, "sparklog.broker_lite.transactions"):
            assert leader.verify(pid, epoch, "t", p, ended=2) == 3  # the id's log, read here
        assert leader.asked == 2
        assert any("read from the id's log" in r.message for r in caplog.records)
