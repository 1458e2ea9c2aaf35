"""Fuzzing the Kafka listener: random frames, random bodies for real APIs, mutated batches.

Whatever arrives, the broker answers or closes that one connection; a bystander
connection keeps getting answers and the broker's memory stays bounded.
"""

from __future__ import annotations

import struct
from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData

from sparklog.broker_lite.kafka.versions import API_TABLE
from tests.kafka.wire import Connection, record_batch_bytes
from tests.support.brokers import Cluster

PING = ApiVersionsRequest(client_software_name="fuzz", client_software_version="1")


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def send_and_forget(address: str, frame: bytes) -> None:
    """Send one raw frame; read whatever comes back (or the close) within a short time.

    A frame whose size prefix promises more bytes than follow is rightly waited on
    by the broker, so no answer comes: the short read timeout bounds what each such
    frame costs the test (the bystander's answer after it is what is asserted)."""
    conn = Connection(address, timeout_s=0.5)
    try:
        conn.sock.sendall(frame)
        conn.read_frame()
    except (TimeoutError, ConnectionError, OSError):
        pass
    finally:
        conn.close()


def framed(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


api_versions = st.sampled_from(
    [(a.key, v) for a in API_TABLE.values() for v in range(a.min_version, a.max_version + 1)]
)


@st.composite
def frames(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["random", "api", "produce", "size"]))
    if kind == "random":
        return framed(draw(st.binary(min_size=0, max_size=200)))
    if kind == "size":  # a size prefix that lies
        return struct.pack(">i", draw(st.integers(-(2**31), 2**31 - 1))) + draw(
            st.binary(max_size=20)
        )
    if kind == "api":
        key, version = draw(api_versions)
        head = struct.pack(">hhi", key, version, 1) + draw(
            st.sampled_from([b"\xff\xff", b"\x00\x01x", b""])
        )
        return framed(head + draw(st.binary(max_size=300)))
    good = record_batch_bytes([b"k" * 10, b"v" * 20])
    position = draw(st.integers(0, len(good) - 1))
    flipped = (
        good[:position] + bytes([good[position] ^ draw(st.integers(1, 255))]) + good[position + 1 :]
    )
    request = ProduceRequest(
        transactional_id=None,
        acks=draw(st.sampled_from([-1, 0, 1, 5])),
        timeout=timedelta(seconds=5),
        topic_data=(
            TopicProduceData(
                name="fuzz", partition_data=(PartitionProduceData(index=0, records=flipped),)
            ),
        ),
    )
    return framed(Connection.encode(_Encoder(), request))


class _Encoder:
    correlation = 0


@pytest.mark.slow
def test_listener_survives_fuzzing(kafka_cluster: Cluster) -> None:
    broker = kafka_cluster.start(0, fetch_max_wait_ms=300, kafka_max_request_bytes=1_048_576)
    address = broker.kafka_address
    assert address is not None and broker.proc is not None
    from tests.kafka.test_roundtrip import create_topic

    create_topic(address, "fuzz", 1)
    bystander = Connection(address)
    assert bystander.call(PING)
    before = rss_bytes(broker.proc.pid)

    @settings(
        max_examples=200,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    @given(frame=frames())
    def one(frame: bytes) -> None:
        send_and_forget(address, frame)
        assert bystander.call(PING).error_code == 0

    one()
    assert broker.alive
    grown = rss_bytes(broker.proc.pid) - before
    assert grown < 200 * 2**20, f"broker memory grew by {grown} bytes"
    bystander.close()
