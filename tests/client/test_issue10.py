"""Regression tests for the client defects of issue 10, each in embedded and broker mode."""

from __future__ import annotations

import time

import pyarrow as pa
import pytest

from sparklog import Admin, Consumer, Producer, TopicPartition
from sparklog.errors import KafkaTimeoutError


@pytest.fixture(params=["file", "s3", "broker"])
def mode(request, tmp_path) -> tuple[str, dict]:
    """(address, storage options) of a fresh root, or of a real broker."""
    if request.param == "broker":
        return request.getfixturevalue("broker").address, {}
    if request.param == "file":
        return f"file://{tmp_path}/root", {}
    s3 = request.getfixturevalue("moto_s3")
    return s3.fresh_root(), s3.storage_options


def _drain(consumer: Consumer, expected: int, timeout_s: float = 30) -> list:
    got: list = []
    deadline = time.monotonic() + timeout_s
    while len(got) < expected and time.monotonic() < deadline:
        got.extend(consumer.poll_records(timeout_ms=200))
    return got


def test_send_batch_without_timestamps_stores_the_send_time(mode):
    """Item 7: rows without a timestamp get the send time, so time lookups find them."""
    url, options = mode
    with Admin(url, storage_options=options) as admin:
        admin.create_topic("nots", partitions=1)
    before_ms = int(time.time() * 1000)
    with Producer(url, storage_options=options) as producer:
        producer.send_batch("nots", pa.table({"value": [b"a", b"b", b"c"]})).get(timeout=30)
        stamps = pa.array([None, 5_000], pa.int64())
        producer.send_batch("nots", pa.table({"value": [b"d", b"e"], "timestamp": stamps}))
        producer.flush()
    after_ms = int(time.time() * 1000)
    consumer = Consumer(url, storage_options=options, auto_offset_reset="earliest")
    consumer.assign([TopicPartition("nots", 0)])
    records = _drain(consumer, 5)
    assert [r.value for r in records] == [b"a", b"b", b"c", b"d", b"e"]
    assert all(before_ms <= r.timestamp <= after_ms for r in records[:4]), records
    assert records[4].timestamp == 5_000, "a given timestamp is kept"
    found = consumer.offsets_for_times({TopicPartition("nots", 0): before_ms})
    assert found[TopicPartition("nots", 0)].offset == 0
    consumer.close()


def test_future_exception_while_in_flight_raises_timeout(tmp_path):
    """Item 5: exception(timeout) raises the timeout to the caller; it is not the record's error."""
    url = f"file://{tmp_path}/root"
    with Admin(url) as admin:
        admin.create_topic("inflight", partitions=1)
    producer = Producer(url, linger_ms=60_000)
    future = producer.send("inflight", b"x")
    with pytest.raises(KafkaTimeoutError):
        future.exception(timeout=0.05)
    assert not future.done()
    producer.flush()
    assert future.exception(timeout=5) is None
    assert future.get(timeout=5).offset == 0
    producer.close()
