"""The Kafka listener's resource bounds against the attacks of issue 23, scaled to seconds.

Each test is one attack by an anonymous peer on loopback, and a bystander that
must still be served: silent connections (10,000, as the issue made them),
frames announced and never sent, a request of 100,000 record batches,
connections past the per-IP limit, idle ones.
"""

from __future__ import annotations

import socket
import struct
import time

import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.errors import ErrorCode

from tests.kafka.test_wire import produce_request
from tests.kafka.wire import Connection, record_batch_bytes
from tests.support.brokers import BrokerProcess, Cluster
from tests.support.waiting import wait_for

API_VERSIONS = ApiVersionsRequest(client_software_name="t", client_software_version="1")


def _connect(address: str) -> socket.socket:
    host, port = address.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=30)


def _rss_bytes(broker: BrokerProcess) -> int:
    assert broker.proc is not None
    with open(f"/proc/{broker.proc.pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def _closed_by_broker(sock: socket.socket, timeout_s: float = 20) -> bool:
    sock.settimeout(timeout_s)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def _produce_one(bootstrap: str, topic: str) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 20_000})
    errors: list[object] = []
    producer.produce(topic, b"bystander", on_delivery=lambda err, msg: errors.append(err))
    assert producer.flush(30) == 0
    assert errors == [None]


@pytest.mark.slow
def test_silent_connections_cannot_lock_a_bystander_out(kafka_cluster: Cluster) -> None:
    broker = kafka_cluster.start(0, max_unauthenticated_connections=64)
    address = broker.kafka_address
    assert address is not None
    started = time.monotonic()
    silent = [_connect(address) for _ in range(3_000)]  # 47x the cap, 3x max_connections
    try:
        bystander = Connection(address)
        assert bystander.call(API_VERSIONS).error_code == ErrorCode.none
        bystander.close()
        _produce_one(kafka_cluster.kafka_bootstrap, "bystander")
        # the oldest silent connections were closed to make room: at most the cap remain
        assert sum(_closed_by_broker(s, 0.5) for s in silent[:100]) == 100
    finally:
        for s in silent:
            s.close()
    elapsed_s = time.monotonic() - started
    lines = [
        line
        for line in broker.log_lines()
        if line.get("msg") == "kafka connections closed before authenticating"
    ]
    # rate-limited: a few lines a second, each counting the ones it skipped
    assert 0 < len(lines) <= 5 * (int(elapsed_s) + 2)


@pytest.mark.slow
def test_announced_frames_are_not_allocated_before_their_bytes(kafka_cluster: Cluster) -> None:
    broker = kafka_cluster.start(0)
    address = broker.kafka_address
    assert address is not None
    before = _rss_bytes(broker)
    liars = []
    for _ in range(12):
        s = _connect(address)
        s.sendall(struct.pack(">i", 100 * 1024 * 1024) + b"\x00\x12\x00\x03")
        liars.append(s)
    try:
        _produce_one(kafka_cluster.kafka_bootstrap, "bystander")
        # 12 x 100 MiB announced; the broker holds a first chunk of each, not the frames
        assert _rss_bytes(broker) - before < 100 * 1024 * 1024
    finally:
        for s in liars:
            s.close()


def test_a_request_of_100000_batches_is_refused_at_once(one_broker: Cluster) -> None:
    from tests.kafka.test_roundtrip import create_topic

    create_topic(one_broker.kafka_bootstrap, "many", 1)
    batch = record_batch_bytes([b"x"])
    conn = Connection(one_broker.brokers[0].kafka_address)
    response = conn.call(produce_request("many", batch * 100_000))
    part = response.responses[0].partition_responses[0]
    assert part.error_code == ErrorCode.invalid_request
    assert "max_request_batches=10000" in (part.error_message or "")
    # the connection still serves, and a request within the bound is written
    response = conn.call(produce_request("many", batch * 100))
    assert response.responses[0].partition_responses[0].error_code == ErrorCode.none
    conn.close()


def test_connections_past_the_per_ip_limit_are_refused(kafka_cluster: Cluster) -> None:
    broker = kafka_cluster.start(0, max_connections_per_ip=4)
    address = broker.kafka_address
    assert address is not None
    served = [Connection(address) for _ in range(4)]
    for c in served:
        assert c.call(API_VERSIONS).error_code == ErrorCode.none
    extra = _connect(address)
    assert _closed_by_broker(extra)
    served[0].close()

    def admitted() -> bool:
        c = Connection(address, timeout_s=2)
        try:
            c.send_frame(c.encode(API_VERSIONS))
            return c.read_frame() is not None
        finally:
            c.close()

    wait_for(admitted, timeout_s=20, what="a connection admitted once one closed")
    for c in served[1:]:
        c.close()
    assert any("max_connections_per_ip=4" in str(line.get("reason")) for line in broker.log_lines())


def test_idle_connections_are_closed(kafka_cluster: Cluster) -> None:
    broker = kafka_cluster.start(0, connections_max_idle_ms=300)
    address = broker.kafka_address
    assert address is not None
    conn = Connection(address)
    assert conn.call(API_VERSIONS).error_code == ErrorCode.none
    assert _closed_by_broker(conn.sock)
    conn.close()
