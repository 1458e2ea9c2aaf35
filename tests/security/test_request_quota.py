"""One tenant's requests cannot take the request threads or the CPU from the others (#38.5).

* ``queued_max_requests_per_principal``: at most that many of one principal's
  requests are handled at once; the others wait unread in its own connections.
  bob's Produce requests each hold a request thread until their commit (a 30 s
  ``linger_ms`` keeps them there); with two request threads and a cap of one,
  bob's three Produce requests leave one thread free and alice is answered.
  Before, bob's requests took both threads and alice's waited behind the third.
* ``request_percentage`` (KIP-124), set through AlterClientQuotas: the CPU time
  the handlers of a user's requests take, in percent of one thread over Kafka's
  quota window.  bob, at 0.0001 %, sends Metadata requests until an answer carries
  a throttle time of 10 s or more; his connection is then muted (his next request unread)
  while alice is answered unthrottled.  A Produce's wait for its commit is not
  charged (Kafka parks it in its purgatory): alice, at 20 %, produces with a
  300 ms ``linger_ms`` and is never throttled.  Before, the handler's wall time
  was charged and her second Produce was throttled.

In-process brokers on 127.0.0.1, SASL_PLAINTEXT, raw frames (``tests/kafka/wire.py``).
"""

from __future__ import annotations

import select
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from kio.schema.alter_client_quotas.v1.request import (
    AlterClientQuotasRequest,
    EntityData,
    EntryData,
    OpData,
)
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.metadata.v12.request import MetadataRequest

from sparklog.broker_lite.config import load_config
from sparklog.broker_lite.server import start_broker, stop_broker
from tests.kafka.test_security import _plain_login
from tests.kafka.test_wire import produce_request
from tests.kafka.wire import metadata_of, record_batch_bytes
from tests.security.tenants import tenants_root
from tests.support.waiting import wait_for

#: bob's connections, each sending one Produce that holds a request thread
BOB_PRODUCERS = 3


def _broker(root: str, **keys: Any) -> tuple[Any, Any]:
    config = {
        "root": root, "listen": "127.0.0.1:0", "metrics_listen": "",
        "kafka_listen": "127.0.0.1:0", "kafka_security_protocol": "SASL_PLAINTEXT",
        "authorizer": "acl", "super_users": "User:admin", "cleaner_interval_ms": 0, **keys,
    }  # fmt: skip
    server, broker, _ = start_broker(load_config(None, config, env={}))
    broker.create_topic("bob.metered", 1)
    broker.create_topic("alice.data", 1)
    return server, broker


@pytest.fixture(scope="module")
def capped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Any]]:
    """Two request threads, one request of a principal at once, commits 30 s apart."""
    root = tenants_root(tmp_path_factory.mktemp("capped"))
    server, broker = _broker(
        root, num_io_threads=2, queued_max_requests_per_principal=1, linger_ms=30_000
    )
    yield server, broker
    stop_broker(server, broker)


@pytest.fixture(scope="module")
def metered(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Any]]:
    """Commits 300 ms apart: a Produce waits that long on its request thread."""
    root = tenants_root(tmp_path_factory.mktemp("metered"))
    server, broker = _broker(root, linger_ms=300)
    yield server, broker
    stop_broker(server, broker)


def _throttle_ms(response: Any) -> int:
    return int(response.throttle_time / timedelta(milliseconds=1))


def _set_request_percentage(address: str, user: str, percent: float) -> None:
    """``request_percentage`` of ``user``, set by admin through AlterClientQuotas."""
    admin = _plain_login(address, "admin", "admin-pw")
    try:
        answer = admin.call(
            AlterClientQuotasRequest(
                entries=(
                    EntryData(
                        entity=(EntityData(entity_type="user", entity_name=user),),
                        ops=(OpData(key="request_percentage", value=percent, remove=False),),
                    ),
                ),
                validate_only=False,
            )
        )
        assert [e.error_code for e in answer.entries] == [0]
    finally:
        admin.close()


def test_one_principals_requests_leave_request_threads_to_the_others(
    capped: tuple[Any, Any],
) -> None:
    server, broker = capped
    address = server.kafka.advertised
    alice = _plain_login(address, "alice", "alice-pw")
    alice.sock.settimeout(10)  # before the cap: no answer until bob's commit, 30 s away
    bobs = [_plain_login(address, "bob", "bob-pw") for _ in range(BOB_PRODUCERS)]
    try:
        produce = produce_request("bob.metered", record_batch_bytes([b"b" * 100]))
        frames = [bob.encode(produce) for bob in bobs]
        for bob, frame in zip(bobs, frames, strict=True):
            bob.send_frame(frame)
        # every one of bob's frames read (each charged to the request memory until its
        # handler returns): before the cap all three were in the request pool by then
        wait_for(
            lambda: server.kafka.queued_bytes.used >= sum(len(f) for f in frames),
            timeout_s=20,
            what="the broker to read bob's three Produce requests",
        )
        registry = broker.metrics.registry
        wait_for(
            lambda: (registry.get_sample_value("sparklog_produce_waiting") or 0) >= 1,
            timeout_s=20,
            what="bob's first Produce to wait for its commit on a request thread",
        )
        # alice is answered: bob holds one request thread, his cap
        metadata = alice.call(metadata_of("alice.data"))
        assert [t.error_code for t in metadata.topics] == [0]
        versions = ApiVersionsRequest(client_software_name="t", client_software_version="1")
        assert alice.call(versions).error_code == 0
        # ... while bob's other two requests wait unhandled: one thread, one commit wait
        assert server.kafka.principal_requests.held("User:bob") == 1
        assert registry.get_sample_value("sparklog_produce_waiting") == 1
    finally:
        alice.close()
        for bob in bobs:
            bob.close()


def test_request_percentage_throttles_and_mutes_the_user_over_it(
    metered: tuple[Any, Any],
) -> None:
    server, _broker = metered
    address = server.kafka.advertised
    # a microsecond of handler CPU time a second: any request of his is throttled for long
    # (up to the longest throttle, 30 s), so his mute outlasts the test
    _set_request_percentage(address, "bob", 0.0001)
    alice = _plain_login(address, "alice", "alice-pw")
    bob = _plain_login(address, "bob", "bob-pw")
    try:
        # every topic bob may describe, as a client polls it
        everything = MetadataRequest(
            topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False
        )
        for _ in range(1_000):
            answer = bob.call(everything)
            if _throttle_ms(answer) >= 10_000:
                break
        else:
            raise AssertionError("1,000 Metadata requests of bob's were never throttled 10 s")
        # muted for the throttle time: his next request stays unread ...
        bob.send_frame(bob.encode(everything))
        # ... while alice, without a quota, is answered unthrottled
        metadata = alice.call(metadata_of("alice.data"))
        assert [t.error_code for t in metadata.topics] == [0]
        assert _throttle_ms(metadata) == 0
        assert server.kafka.muted_connections() >= 1
        readable, _, _ = select.select([bob.sock], [], [], 0)
        assert readable == []
    finally:
        alice.close()
        bob.close()


def test_request_percentage_does_not_charge_a_produces_wait_for_its_commit(
    metered: tuple[Any, Any],
) -> None:
    server, _broker = metered
    address = server.kafka.advertised
    alice = _plain_login(address, "alice", "alice-pw")
    try:
        batch = record_batch_bytes([b"a" * 100])
        first = alice.call(produce_request("alice.data", batch))  # the codec's first use
        assert first.responses[0].partition_responses[0].error_code == 0
        _set_request_percentage(address, "alice", 20.0)  # 200 ms of CPU time a second
        for _ in range(4):  # each waits up to linger_ms (300 ms) for its commit
            produced = alice.call(produce_request("alice.data", batch))
            assert produced.responses[0].partition_responses[0].error_code == 0
            assert _throttle_ms(produced) == 0
    finally:
        alice.close()
