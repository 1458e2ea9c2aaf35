"""Producer, Consumer and Admin in embedded mode against file, memory and s3 (moto) roots."""

from __future__ import annotations

import uuid

import pyarrow as pa
import pytest

import sparklog
from sparklog import Admin, Consumer, Producer, TopicPartition
from sparklog.client.partitioner import partition_for_key
from sparklog.client.types import LOG_APPEND_TIME, OffsetAndTimestamp


@pytest.fixture(params=["file", "memory", "s3", "broker"])
def address(request, tmp_path):
    """(address, storage options): every storage backend, and a real broker."""
    if request.param == "broker":
        return request.getfixturevalue("broker").address, {}
    if request.param == "file":
        return f"file://{tmp_path}/root", {}
    if request.param == "memory":
        return f"memory://sparklog-{uuid.uuid4().hex}", {}
    s3 = request.getfixturevalue("moto_s3")
    return s3.fresh_root(), s3.storage_options


def _admin(address) -> Admin:
    url, options = address
    return Admin(url, storage_options=options)


def _drain(consumer: Consumer, expected: int, timeout_ms: int = 20_000) -> list:
    got: list = []
    import time

    deadline = time.monotonic() + timeout_ms / 1000
    while len(got) < expected and time.monotonic() < deadline:
        got.extend(consumer.poll_records(timeout_ms=200))
    return got


def test_round_trip_keys_headers_order(address):
    url, options = address
    with _admin(address) as admin:
        admin.create_topic("events", partitions=3)
    with Producer(url, storage_options=options, linger_ms=20) as producer:
        futures = [
            producer.send(
                "events", f"v{i}".encode(), key=f"k{i % 5}".encode(), headers=[("h", b"x")]
            )
            for i in range(60)
        ]
        producer.flush()
        metas = [f.get(timeout=10) for f in futures]
    for i, meta in enumerate(metas):
        assert meta.partition == partition_for_key(f"k{i % 5}".encode(), 3)
    consumer = Consumer(url, storage_options=options, auto_offset_reset="earliest")
    consumer.subscribe(["events"])
    records = _drain(consumer, 60)
    consumer.close()
    assert len(records) == 60
    by_offset = {(r.partition, r.offset): r for r in records}
    for i, meta in enumerate(metas):
        rec = by_offset[(meta.partition, meta.offset)]
        assert rec.value == f"v{i}".encode() and rec.key == f"k{i % 5}".encode()
        assert rec.headers == [("h", b"x")]
    for p in range(3):
        values = [int(r.value[1:]) for r in records if r.partition == p]
        assert values == sorted(values), "order per partition is the send order"


def test_null_keys_stick_and_send_batch_partitions_by_key(address):
    url, options = address
    with _admin(address) as admin:
        admin.create_topic("t", partitions=4)
    with Producer(url, storage_options=options, linger_ms=1000) as producer:
        futures = [producer.send("t", b"x") for _ in range(50)]
        producer.flush()
        assert len({f.get().partition for f in futures}) == 1, "one flush, one sticky partition"
        keys = [f"key-{i}".encode() for i in range(200)]
        table = pa.table({"key": keys, "value": [b"v" * 100] * 200})
        meta = producer.send_batch("t", table).get(timeout=10)
    assert meta.record_count == 200
    with _admin(address) as admin:
        described = admin.describe_topic("t")
    expected = [0] * 4
    for k in keys:
        expected[partition_for_key(k, 4)] += 1
    assert sorted((p, count) for p, _, count in meta.ranges) == [
        (p, n) for p, n in enumerate(expected) if n
    ]
    assert sum(p.high_watermark for p in described.partitions) == 250


def test_poll_batches_columns_and_limits(address):
    url, options = address
    with _admin(address) as admin:
        admin.create_topic("b", partitions=2)
    with Producer(url, storage_options=options) as producer:
        producer.send_batch("b", pa.table({"value": [b"a"] * 30}), partition=1).get(timeout=10)
    consumer = Consumer(url, storage_options=options, auto_offset_reset="earliest")
    consumer.assign([TopicPartition("b", 1)])
    batches = consumer.poll_batches(timeout_ms=5000, max_records=20)
    assert sum(b.num_rows for b in batches) == 20
    assert batches[0].schema.names[:3] == ["topic", "partition", "offset"]
    assert consumer.position(TopicPartition("b", 1)) == 20
    rest = consumer.poll_records(timeout_ms=2000)
    assert [r.offset for r in rest] == list(range(20, 30))
    consumer.seek(TopicPartition("b", 1), 5)
    assert consumer.poll_records(timeout_ms=2000, max_records=1)[0].offset == 5
    consumer.seek_to_end()
    assert consumer.poll_records(timeout_ms=100) == []
    consumer.close()


def test_commit_committed_and_resume(address):
    url, options = address
    with _admin(address) as admin:
        admin.create_topic("c", partitions=1)
    with Producer(url, storage_options=options) as producer:
        for i in range(10):
            producer.send("c", str(i))
    tp = TopicPartition("c", 0)
    first = Consumer(url, group_id="g1", storage_options=options, auto_offset_reset="earliest")
    first.assign([tp])
    assert len(first.poll_records(timeout_ms=3000, max_records=4)) == 4
    first.commit()
    assert first.committed([tp])[tp].offset == 4
    first.close()
    second = Consumer(url, group_id="g1", storage_options=options, enable_auto_commit=False)
    second.assign([tp])
    assert [r.value for r in second.poll_records(timeout_ms=3000)] == [
        str(i).encode() for i in range(4, 10)
    ]
    second.close()
    with _admin(address) as admin:
        desc = admin.describe_group("g1")
        assert [(lag.committed, lag.high_watermark, lag.lag) for lag in desc.lag] == [(4, 10, 6)]
        plan = admin.reset_group_offsets("g1", "c", to_earliest=True)
        assert [(r.current, r.new) for r in plan] == [(4, 0)]
        assert admin.describe_group("g1").lag[0].committed == 4, "a plan changes nothing"
        admin.reset_group_offsets("g1", "c", shift_by=3, execute=True)
        assert admin.describe_group("g1").lag[0].committed == 7
        admin.delete_group("g1")
        assert "g1" not in admin.list_groups()


def test_offsets_for_times_and_pause(address):
    url, options = address
    with _admin(address) as admin:
        admin.create_topic("ts", partitions=1)
    with Producer(url, storage_options=options) as producer:
        for i in range(5):
            producer.send("ts", b"x", timestamp_ms=1_000_000 + i * 1000)
    tp = TopicPartition("ts", 0)
    consumer = Consumer(url, storage_options=options, auto_offset_reset="earliest")
    consumer.assign([tp])
    assert consumer.offsets_for_times({tp: 1_002_500}) == {tp: OffsetAndTimestamp(3, 1_003_000)}
    assert consumer.offsets_for_times({tp: 9_000_000}) == {tp: None}
    consumer.pause(tp)
    assert consumer.poll_records(timeout_ms=100) == []
    consumer.resume(tp)
    assert len(consumer.poll_records(timeout_ms=3000)) == 5
    consumer.close()


def test_admin_topics(address):
    with _admin(address) as admin:
        admin.create_topic("a1", partitions=2, config={"retention.ms": "1000"})
        assert "a1" in admin.list_topics()
        with pytest.raises(sparklog.TopicExistsError):
            admin.create_topic("a1")
        assert admin.alter_topic_config("a1", {"retention.ms": 5000}).config["retention.ms"] == 5000
        assert len(admin.add_partitions("a1", 5).partitions) == 5
        with pytest.raises(sparklog.ConfigError, match="retention.ms"):
            admin.alter_topic_config("a1", {"retention.ms": "soon"})
        admin.delete_topic("a1")
        with pytest.raises(sparklog.UnknownTopicError):
            admin.describe_topic("a1")


def test_bad_input_is_refused_clearly(address):
    url, options = address
    with pytest.raises(sparklog.ConfigError, match="linger_ms"):
        Producer(url, storage_options=options, linger_ms=-1)
    with pytest.raises(sparklog.ConfigError, match="accepted"):
        Producer(url, storage_options=options, lingr_ms=1)
    with _admin(address) as admin:
        admin.create_topic("small", partitions=1, config={"max.message.bytes": 10})
    with Producer(url, storage_options=options) as producer:
        with pytest.raises(sparklog.InvalidRecordError, match="max.message.bytes"):
            producer.send("small", b"x" * 100)
        with pytest.raises(sparklog.UnknownTopicError):
            producer.send("nope", b"x")
        with pytest.raises(sparklog.UnknownTopicError, match="accepted: 0-0"):
            producer.send("small", b"x", partition=3)


def test_retried_flush_does_not_duplicate(address):
    """A flush whose commit is retried (same producer sequences) lands once."""
    url, options = address
    with _admin(address) as admin:
        admin.create_topic("idem", partitions=2)
    producer = Producer(url, storage_options=options)
    backend = producer._backend
    real = backend.produce
    calls = {"n": 0}

    def flaky(topic, parts, **kw):
        result = real(topic, parts, **kw)  # commits, then the "ack" is lost
        calls["n"] += 1
        if calls["n"] == 1:
            raise sparklog.UnavailableError("ack lost (injected after a real commit)")
        return result

    backend.produce = flaky  # the only stand-in: a lost acknowledgement cannot be caused here
    futures = [producer.send("idem", f"{i}", partition=i % 2) for i in range(10)]
    producer.flush()
    offsets = [f.get(timeout=5).offset for f in futures]
    producer.close()
    assert calls["n"] == 2
    assert offsets == [i // 2 for i in range(10)]
    with _admin(address) as admin:
        assert [p.high_watermark for p in admin.describe_topic("idem").partitions] == [5, 5]


def test_pattern_subscription_and_rebalance_callbacks(tmp_path):
    """Pattern picks up new topics; a second member triggers revoke/assign on the first."""
    import threading
    import time

    url = f"file://{tmp_path}/root"
    with Admin(url) as admin:
        admin.create_topic("logs-a", partitions=2)
    events: list[tuple[str, list]] = []
    first = Consumer(url, group_id="pg", metadata_max_age_ms=200, session_timeout_ms=3000)
    first.subscribe(
        "^logs-.*",
        on_assign=lambda tps: events.append(("assign", sorted(tps))),
        on_revoke=lambda tps: events.append(("revoke", sorted(tps))),
    )
    first.poll_records(timeout_ms=100)
    assert events[-1] == ("assign", [("logs-a", 0), ("logs-a", 1)])
    with Admin(url) as admin:
        admin.create_topic("logs-b", partitions=2)
        admin.create_topic("other", partitions=1)
    deadline = time.monotonic() + 20
    while len(first.assignment()) < 4 and time.monotonic() < deadline:
        first.poll_records(timeout_ms=100)
    assert first.subscription() == ["logs-a", "logs-b"]
    assert len(first.assignment()) == 4
    second = Consumer(url, group_id="pg", metadata_max_age_ms=200, session_timeout_ms=3000)
    second.subscribe("^logs-.*")
    joined = threading.Thread(target=lambda: second.poll_records(timeout_ms=100))
    joined.start()
    deadline = time.monotonic() + 20
    while (joined.is_alive() or len(first.assignment()) != 2) and time.monotonic() < deadline:
        first.poll_records(timeout_ms=100)
    joined.join(timeout=5)
    assert ("revoke", sorted(first.assignment() | second.assignment())) in events
    assert len(first.assignment()) == 2 and len(second.assignment()) == 2
    assert not first.assignment() & second.assignment()
    second.close()
    first.close()


def test_rejected_records_fail_their_futures_not_the_producer(address):
    url, options = address
    with _admin(address) as admin:
        admin.create_topic("mixed", partitions=1)
    with Producer(url, storage_options=options) as producer:
        bad = producer.send("mixed", {"a": 1})  # a struct value on a bytes topic
        producer.flush()
        with pytest.raises(sparklog.InvalidRecordError):
            bad.get(timeout=10)
        good = producer.send("mixed", b"fine")
        assert good.get(timeout=10).offset == 0, "the producer keeps working"


def test_linger_sends_without_flush(address):
    url, options = address
    with _admin(address) as admin:
        admin.create_topic("lazy", partitions=1)
    with Producer(url, storage_options=options, linger_ms=50) as producer:
        first = producer.send("lazy", b"a")
        assert first.get(timeout=10).offset == 0  # no flush(): linger_ms alone sends it
        second = producer.send("lazy", b"b")
        assert second.get(timeout=10).offset == 1


def test_log_append_time_topics_say_so(address):
    url, options = address
    with _admin(address) as admin:
        admin.create_topic(
            "stamped", partitions=1, config={"message.timestamp.type": "LogAppendTime"}
        )
        admin.create_topic("created", partitions=1)
    with Producer(url, storage_options=options) as producer:
        producer.send("stamped", b"x", timestamp_ms=1000)
        producer.send("created", b"x", timestamp_ms=1000)
    consumer = Consumer(url, storage_options=options, auto_offset_reset="earliest")
    consumer.assign([TopicPartition("stamped", 0), TopicPartition("created", 0)])
    got = {r.topic: r for r in _drain(consumer, 2)}
    consumer.close()
    assert got["stamped"].timestamp_type == LOG_APPEND_TIME
    assert got["stamped"].timestamp_ms > 1000, "the append time replaced the producer's"
    assert (got["created"].timestamp_type, got["created"].timestamp_ms) == (0, 1000)
