"""The broker's produce path over shard logs: one object and one commit per shard per flush."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sparklog.broker_lite.config import BrokerConfig
from sparklog.broker_lite.service import Broker
from sparklog.storage import make_batch, open_root


@pytest.fixture
def broker(root_spec) -> Iterator[Broker]:
    """An in-process broker (no Flight server) on each storage backend."""
    url, options = root_spec
    config = BrokerConfig(
        root=url, storage_options=options, linger_ms=20, cleaner_interval_ms=0, broker_id=3
    )
    made = Broker(config)
    made.start("127.0.0.1:1")
    try:
        yield made
    finally:
        made.close()


def commits(root, topic: str, shard: int) -> list[str]:
    info = root.describe_topic(topic)
    names = root.store.list_names(f"topics/{topic}/{info.topic_id}/shards/{shard:05d}/log")
    return [n for n in names if n.endswith(".json") and n[0].isdigit()]


def objects(root, topic: str) -> int:
    info = root.describe_topic(topic)
    return len(root.store.list_objects(f"topics/{topic}/{info.topic_id}/objects"))


def test_a_flush_of_many_partitions_is_one_object_and_one_commit_per_shard(broker):
    broker.create_topic("t", 16, {"commit.shards": 2})
    root = open_root(broker.config.root, broker.config.storage_options)
    outcomes = broker.produce("t", [(p, make_batch([b"warm"])) for p in range(16)])
    assert [o.base_offset for o in outcomes] == [0] * 16
    before = [len(commits(root, "t", s)) for s in range(2)], objects(root, "t")
    outcomes = broker.produce("t", [(p, make_batch([b"a", b"b"])) for p in range(16)])
    assert [o.base_offset for o in outcomes] == [1] * 16
    after = [len(commits(root, "t", s)) for s in range(2)], objects(root, "t")
    # one commit per shard; journalled (format 3), none: the flush is one journal commit
    per_shard = 0 if broker.config.journal_records else 1
    assert [a - b for a, b in zip(after[0], before[0], strict=True)] == [per_shard] * 2
    assert after[1] - before[1] == 1
    reader = root.topic("t")
    for p in range(16):
        assert reader.partition(p).read(0).column("value").to_pylist() == [b"warm", b"a", b"b"]
        batches, hwm, _, _ = broker.fetch("t", p, 0, 1 << 20, 0)
        assert hwm == 3 and sum(b.num_rows for b in batches) == 3


def test_leaders_lead_shards(broker):
    broker.create_topic("default", 8)
    broker.create_topic("four", 8, {"commit.shards": 4})
    cluster = broker.cluster
    assert cluster is not None
    # by default 4 shards per broker when journalled (a shard costs no commit per flush)
    shards = 4 if broker.config.journal_records else 1
    assert [cluster.shard_of("default", p) for p in range(8)] == [p % shards for p in range(8)]
    assert [cluster.shard_of("four", p) for p in range(8)] == [0, 1, 2, 3, 0, 1, 2, 3]
    leader = cluster.leader("four", 5)
    assert leader is not None and leader.broker_id == 3
    shard_leader = cluster.shard_leader("four", 1)  # (its lease may renew between the calls)
    assert shard_leader is not None and shard_leader.broker_id == leader.broker_id


def test_idempotent_retry_through_the_broker_is_answered_from_the_shard_log(broker):
    broker.create_topic("t", 4)

    def send(partition: int, sequence: int):
        return broker.produce(
            "t",
            [(partition, make_batch([b"a", b"b"]))],
            producer_id=11,
            producer_epoch=0,
            base_sequence=sequence,
        )[0]

    first = [send(0, 0), send(1, 0), send(0, 2)]
    retry = [send(0, 0), send(1, 0), send(0, 2)]
    assert [o.base_offset for o in first] == [o.base_offset for o in retry] == [0, 0, 2]
    assert all(o.duplicate for o in retry) and not any(o.duplicate for o in first)


def test_cleaner_keeps_the_shard_and_group_log_file_counts_bounded(root_spec):
    from sparklog.broker_lite.cleaner import Cleaner
    from sparklog.clock import now_ms
    from sparklog.storage.maintenance import DEFAULT_LOG_RETENTION_MS

    url, options = root_spec
    config = BrokerConfig(
        root=url,
        storage_options=options,
        linger_ms=0,
        cleaner_interval_ms=0,
        snapshot_interval=4,
        gc_grace_ms=0,
    )
    broker = Broker(config)
    broker.start("127.0.0.1:1")
    try:
        broker.create_topic("t", 2)
        root = open_root(url, options)
        cleaner = Cleaner(broker.upkeep, broker.config.cleaner_interval_ms)
        cleaner.clock_ms = lambda: now_ms() + 2 * DEFAULT_LOG_RETENTION_MS
        counts = []
        for round_ in range(3):
            for i in range(30):
                broker.produce("t", [(i % 2, make_batch([b"x"]))])
                broker.groups.commit_offsets("g", -1, "", {("t", 0): round_ * 30 + i})
            broker._update_leadership()
            cleaner.run_once()
            counts.append(len(commits(root, "t", 0)))
        group_files = root.store.list_names("groups/g/log")
        assert max(counts) <= 4 + 1, counts  # commits after the newest snapshot
        assert len(group_files) <= 4 + 3, group_files
        assert root.topic("t").partition(0).read(0).num_rows == 45
        assert root.groups.fetch("g")[("t", 0)].offset == 89
        batches, hwm, _, _ = broker.fetch("t", 1, 0, 1 << 20, 0)
        assert hwm == 45 and sum(b.num_rows for b in batches) == 45
    finally:
        broker.close()


def test_a_request_over_many_partitions_is_normalised_once_and_led_per_shard(broker, monkeypatch):
    """Issue #22 item 6: the fixed costs of a produce request are paid once per request
    (normalisation) and once per shard (leadership), not once per partition."""
    import threading
    from collections import Counter

    import pyarrow as pa

    from sparklog.storage import topics

    broker.create_topic("t", 64, {"commit.shards": 4})
    broker.produce("t", [(p, make_batch([b"warm"])) for p in range(64)])  # leadership taken
    calls: Counter[str] = Counter()
    normalize, is_leader = topics.normalize, broker.cluster.is_leader

    requester = threading.current_thread()  # the broker's tick checks leaders too

    def counted_normalize(*args, **kwargs):
        calls["normalize"] += threading.current_thread() is requester
        return normalize(*args, **kwargs)

    def counted_is_leader(*args, **kwargs):
        calls["is_leader"] += threading.current_thread() is requester
        return is_leader(*args, **kwargs)

    monkeypatch.setattr(topics, "normalize", counted_normalize)
    monkeypatch.setattr(broker.cluster, "is_leader", counted_is_leader)
    # strings and no timestamps: the general path (cast, conform, stamp, size check)
    items = [(p, pa.table({"value": [f"{p}-{i}" for i in range(p % 3 + 1)]})) for p in range(64)]
    outcomes = broker.produce("t", items)
    assert calls == {"normalize": 1, "is_leader": 4}  # was 64 and 64
    assert [(o.base_offset, o.record_count) for o in outcomes] == [
        (1, p % 3 + 1) for p in range(64)
    ]
    root = open_root(broker.config.root, broker.config.storage_options)
    for p in range(64):
        got = root.topic("t").partition(p).read(0).column("value").to_pylist()
        assert got == [b"warm", *[f"{p}-{i}".encode() for i in range(p % 3 + 1)]]


def test_produce_each_answers_per_partition_with_each_partitions_sequences(broker):
    """The Kafka listener's call: one item's error does not fail the others, and each
    partition's idempotent batch carries its own sequence (a retry is a duplicate)."""
    from sparklog.broker_lite.produce import ProduceItem
    from sparklog.errors import SparklogError

    broker.create_topic("t", 4, {"max.message.bytes": 1000})
    items = [
        ProduceItem(0, make_batch([b"a"]), (5, 0, 0)),
        ProduceItem(9, make_batch([b"b"])),  # no such partition
        ProduceItem(2, make_batch([b"x" * 2000])),  # larger than max.message.bytes
        ProduceItem(3, make_batch([b"c", b"d"]), (5, 0, 0)),
    ]
    first = broker.produce_each("t", items)
    assert isinstance(first[1], SparklogError) and "no partition 9" in str(first[1])
    assert isinstance(first[2], SparklogError)
    assert "record 0" in str(first[2]) and "max.message.bytes" in str(first[2])
    assert [(o.base_offset, o.duplicate) for o in (first[0], first[3])] == [(0, False), (0, False)]
    again = broker.produce_each("t", [items[0], items[3]])
    assert [(o.base_offset, o.duplicate) for o in again] == [(0, True), (0, True)]
    later = broker.produce_each(
        "t",
        [
            ProduceItem(0, make_batch([b"e"]), (5, 0, 1)),
            ProduceItem(3, make_batch([b"f"]), (5, 0, 2)),
        ],
    )
    assert [(o.base_offset, o.duplicate) for o in later] == [(1, False), (2, False)]


def test_produce_each_applies_max_request_bytes_per_item_and_produce_to_the_whole(root_spec):
    """Kafka's call refuses only the partition over ``max_request_bytes`` (as when each
    partition was its own call); the Flight call refuses the whole request."""
    from sparklog.broker_lite.produce import ProduceItem
    from sparklog.errors import InvalidRecordError

    url, options = root_spec
    config = BrokerConfig(
        root=url,
        storage_options=options,
        linger_ms=5,
        cleaner_interval_ms=0,
        max_request_bytes=6000,
    )
    made = Broker(config)
    made.start("127.0.0.1:1")
    try:
        made.create_topic("t", 2)
        small, big = make_batch([b"s" * 100] * 10), make_batch([b"b" * 100] * 80)
        first, second = made.produce_each("t", [ProduceItem(0, small), ProduceItem(1, big)])
        assert first.base_offset == 0 and isinstance(second, InvalidRecordError)
        assert "t-1" in str(second) and "max_request_bytes=6000" in str(second)
        with pytest.raises(InvalidRecordError, match="max_request_bytes=6000"):
            made.produce("t", [(0, small), (1, small), (0, small), (1, small), (0, small)])
        assert made.produce("t", [(0, small)])[0].base_offset == 10  # nothing of it landed
    finally:
        made.close()
