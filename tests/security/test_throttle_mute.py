"""A throttled answer holds no request thread: it leaves at once and mutes its connection (#38.5).

Kafka answers a throttled request at once with ``throttle_time_ms`` and stops
reading from that connection for the throttle time (KIP-219's muted channel).
Here bob has a tiny ``producer_byte_rate``; more of his connections than the
broker has request threads (``num_io_threads``) each send one Produce over the
quota.  Every answer comes back with its throttle time while the connections are
muted, and alice's requests are answered while all of bob's connections are still
muted and their next requests unread (an ordering assertion, no wall clock).
Before, each throttled answer slept in a request thread: bob's answers did not
come within the throttle time and alice waited behind them.  In-process broker on
127.0.0.1, raw frames (``tests/kafka/wire.py``).
"""

from __future__ import annotations

import pathlib
import select
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest

from sparklog.broker_lite.config import load_config
from sparklog.broker_lite.server import start_broker, stop_broker
from sparklog.security import quotas
from sparklog.storage.catalog import open_root
from tests.kafka.test_security import _plain_login
from tests.kafka.test_wire import produce_request
from tests.kafka.wire import metadata_of, record_batch_bytes
from tests.security.tenants import tenants_root

#: request threads of the broker, and bob's throttled connections (more of them)
REQUEST_THREADS = 2
THROTTLED = 5


@pytest.fixture
def tenants(tmp_path: pathlib.Path) -> Iterator[tuple[Any, Any]]:
    root = tenants_root(tmp_path)
    # one byte a second for bob: any produce of his is throttled for the longest time
    quotas.alter(open_root(root).metadata, [("user", "bob")], {"producer_byte_rate": 1.0})
    config = {
        "root": root, "listen": "127.0.0.1:0", "metrics_listen": "",
        "kafka_listen": "127.0.0.1:0", "kafka_security_protocol": "SASL_PLAINTEXT",
        "authorizer": "acl", "super_users": "User:admin", "cleaner_interval_ms": 0,
        "num_io_threads": REQUEST_THREADS,
    }  # fmt: skip
    server, broker, _ = start_broker(load_config(None, config, env={}))
    broker.create_topic("bob.metered", 1)
    broker.create_topic("alice.data", 1)
    yield server, broker
    stop_broker(server, broker)


def _throttle_ms(response: Any) -> int:
    return int(response.throttle_time / timedelta(milliseconds=1))


def test_throttled_connections_are_muted_and_a_bystander_is_answered(
    tenants: tuple[Any, Any],
) -> None:
    server, _broker = tenants
    address = server.kafka.advertised
    alice = _plain_login(address, "alice", "alice-pw")
    bobs = [_plain_login(address, "bob", "bob-pw") for _ in range(THROTTLED)]
    try:
        batch = record_batch_bytes([b"b" * 1_000])
        for bob in bobs:  # all at once: more throttled requests than request threads
            bob.send_frame(bob.encode(produce_request("bob.metered", batch)))
        for bob in bobs:
            answer = bob.answer(produce_request("bob.metered", batch))
            assert answer.responses[0].partition_responses[0].error_code == 0
            assert _throttle_ms(answer) > 0  # reported, and answered before it has passed
        # each connection is muted now: its next request is not read until the mute ends
        versions = ApiVersionsRequest(client_software_name="t", client_software_version="1")
        for bob in bobs:
            bob.send_frame(bob.encode(versions))
        # alice is answered at once: no request thread waits for bob's throttle
        metadata = alice.call(metadata_of("alice.data"))
        assert [t.error_code for t in metadata.topics] == [0]
        produced = alice.call(produce_request("alice.data", record_batch_bytes([b"a"])))
        assert produced.responses[0].partition_responses[0].error_code == 0
        assert _throttle_ms(produced) == 0
        # ... while every one of bob's connections is still muted, its request unread
        assert server.kafka.muted_connections() == THROTTLED
        readable, _, _ = select.select([b.sock for b in bobs], [], [], 0)
        assert readable == []
    finally:
        alice.close()
        for bob in bobs:
            bob.close()
