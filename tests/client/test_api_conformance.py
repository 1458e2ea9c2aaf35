"""One API, two modes: every public call of Producer, Consumer and Admin runs against a file
root, an S3 root (moto) and a broker, and the three transcripts must be equal.

The scenario records what each call returns, with only what differs by nature taken out
(topic ids, member ids, the leader's address, byte counts, a topic's shard count, which
are checked for presence),
and asserts the documented behaviours along the way, so a call that works in one mode
only, or answers differently, fails here.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

from sparklog import (
    Admin,
    ConfigResource,
    ConfigResourceType,
    Consumer,
    ConsumerRebalanceListener,
    NewPartitions,
    NewTopic,
    OffsetAndMetadata,
    OffsetAndTimestamp,
    Producer,
    TopicPartition,
)
from sparklog.client.types import EMBEDDED_LEADER, ConsumerRecord, RecordMetadata
from sparklog.errors import (
    ConfigError,
    IllegalStateError,
    KafkaTimeoutError,
    OffsetOutOfRangeError,
    TopicExistsError,
    UnknownTopicError,
)
from tests.support.brokers import Cluster


@pytest.fixture
def three_modes(tmp_path, moto_s3) -> Iterator[dict[str, tuple[str, dict]]]:
    """(address, storage options) of a file root, an S3 root and a broker (on a file root)."""
    cluster = Cluster(tmp_path, f"file://{tmp_path}/broker-root")
    cluster.start(1)
    try:
        cluster.wait_live(1)
        yield {
            "file": (f"file://{tmp_path}/root", {}),
            "s3": (moto_s3.fresh_root(), moto_s3.storage_options),
            "broker": (cluster.address, {}),
        }
    finally:
        cluster.stop()


def _record(r: ConsumerRecord) -> tuple:
    return (
        r.topic,
        r.partition,
        r.offset,
        r.timestamp,
        r.timestamp_type,
        r.key,
        r.value,
        r.headers,
        r.checksum,
        r.serialized_key_size,
        r.serialized_value_size,
        r.leader_epoch,
    )


def _drain_records(consumer: Consumer, expected: int) -> list[ConsumerRecord]:
    got: list[ConsumerRecord] = []
    for _ in range(100):
        if len(got) >= expected:
            break
        got.extend(consumer.poll_records(timeout_ms=300))
    return got


class _Listener(ConsumerRebalanceListener):
    def __init__(self) -> None:
        self.events: list[tuple[str, list[str]]] = []

    def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        self.events.append(("revoked", sorted(str(tp) for tp in revoked)))

    def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        self.events.append(("assigned", sorted(str(tp) for tp in assigned)))


def scenario(address: str, options: dict[str, Any], mode: str) -> dict[str, Any]:
    """Run every public call once; return what each answered (mode-free parts only)."""
    out: dict[str, Any] = {}
    admin = Admin(bootstrap_servers=address, storage_options=options)

    # -- Admin: topics ---------------------------------------------------------------------
    created = admin.create_topic("orders", 3, {"retention.ms": 3_600_000})
    out["create_topic"] = (created.name, len(created.partitions), created.config["retention.ms"])
    value_type = pa.struct([("user", pa.string()), ("clicks", pa.int64())])
    made = admin.create_topics(
        [
            NewTopic("audit", num_partitions=2, replication_factor=1),
            NewTopic("typed", 1, topic_configs={"cleanup.policy": "delete"}, value_type=value_type),
        ]
    )
    out["create_topics"] = sorted((n, len(d.partitions)) for n, d in made.items() if d)
    with pytest.raises(TopicExistsError):
        admin.create_topic("orders", 1)
    with pytest.raises(UnknownTopicError):
        admin.describe_topic("missing")
    out["list_topics"] = admin.list_topics()
    described = admin.describe_topic("orders")
    assert described.topic_id
    for part in described.partitions:
        assert (
            part.leader == EMBEDDED_LEADER if mode != "broker" else re.match(r"\d+@", part.leader)
        )
        assert part.size_bytes == 0
    out["describe_topic"] = [
        (p.partition, p.log_start_offset, p.high_watermark) for p in described.partitions
    ]
    # commit.shards differs by nature: four per registered broker when a journalling
    # broker creates the topic, one on a root no broker serves (checked for presence)
    config = dict(described.config)
    assert int(config.pop("commit.shards")) >= 1
    out["describe_topic.config"] = config
    out["describe_topics"] = [(d.name, d.value_type) for d in admin.describe_topics(["typed"])]
    altered = admin.alter_topic_config("orders", {"retention.ms": 7_200_000})
    out["alter_topic_config"] = altered.config["retention.ms"]
    admin.alter_configs(
        [ConfigResource(ConfigResourceType.TOPIC, "audit", {"max.message.bytes": 500_000})]
    )
    resources = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "audit")])
    out["describe_configs"] = [(r.name, (r.configs or {})["max.message.bytes"]) for r in resources]
    with pytest.raises(ConfigError):
        admin.describe_configs([ConfigResource(ConfigResourceType.BROKER, "1")])
    out["add_partitions"] = len(admin.add_partitions("audit", 3).partitions)
    out["create_partitions"] = admin.create_partitions({"audit": NewPartitions(4)})

    # -- Producer ------------------------------------------------------------------------------
    producer = Producer(
        bootstrap_servers=address,
        storage_options=options,
        linger_ms=5,
        compression="none",
        key_serializer=str.encode,
        value_serializer=lambda v: json.dumps(v).encode(),
    )
    out["partitions_for"] = sorted(producer.partitions_for("orders"))
    succeeded: list[RecordMetadata] = []
    futures = []
    for i in range(12):
        future = producer.send(
            "orders",
            {"n": i},
            key=f"user-{i % 4}",
            headers=[("source", b"test")],
            timestamp_ms=1_000_000 + i * 1000,
        )
        future.add_callback(succeeded.append).add_errback(lambda exc: succeeded.append(exc))
        futures.append(future)
    tombstone = producer.send("orders", None, key="user-0", timestamp_ms=2_000_000)
    explicit = producer.send("orders", {"n": 99}, partition=2, timestamp_ms=2_000_001)
    producer.flush(timeout=60)
    metas = [f.get(timeout=30) for f in futures]
    assert all(f.done() and f.succeeded() and f.exception(timeout=1) is None for f in futures)
    assert sorted(succeeded) == sorted(metas), "add_callback saw every RecordMetadata"
    out["send"] = [(m.partition, m.offset, m.timestamp, m.serialized_key_size) for m in metas]
    out["send.tombstone"] = tombstone.get(timeout=30)[:4]
    out["send.partition"] = explicit.get(timeout=30)[:4]
    batch = pa.table(
        {
            "key": [f"k{i}".encode() for i in range(30)],
            "value": [f"b{i}".encode() for i in range(30)],
            "timestamp": pa.array([3_000_000 + i for i in range(30)], pa.int64()),
        }
    )
    out["send_batch"] = sorted(producer.send_batch("audit", batch).get(timeout=30).ranges)
    out["send_batch.partition"] = producer.send_batch(
        "audit", pa.table({"value": [b"x", b"y"]}), partition=3
    ).get(timeout=30)[:]
    out["producer.metrics"] = producer.metrics()["producer-metrics"]["record-send-total"]
    producer.close()
    with Producer(address, storage_options=options) as structs:
        structs.send("typed", {"user": "ann", "clicks": 3}, timestamp_ms=4_000_000)
    with pytest.raises(IllegalStateError, match="closed"):
        producer.send("orders", b"late")

    # -- Consumer: assign, positions, times ---------------------------------------------------
    orders = [TopicPartition("orders", p) for p in range(3)]
    plain = Consumer(
        address=address,
        storage_options=options,
        auto_offset_reset="earliest",
        key_deserializer=bytes.decode,
        value_deserializer=json.loads,
    )
    out["consumer.topics"] = sorted(plain.topics())
    out["partitions_for_topic"] = sorted(plain.partitions_for_topic("orders"))
    plain.assign(orders)
    out["assignment"] = sorted(plain.assignment())
    polled = plain.poll(timeout_ms=5000, max_records=1000)
    assert all(isinstance(tp, TopicPartition) for tp in polled)
    records = [r for tp in sorted(polled) for r in polled[tp]]
    records += _drain_records(plain, 14 - len(records))
    assert len(records) == 14 and records[0].headers in ([("source", b"test")], [])
    assert [r.value for r in records if r.key == "user-1"] == [{"n": 1}, {"n": 5}, {"n": 9}]
    out["poll"] = sorted(_record(r) for r in records)
    out["highwater"] = [plain.highwater(tp) for tp in orders]
    out["position"] = [plain.position(tp) for tp in orders]
    out["beginning_offsets"] = plain.beginning_offsets(orders)
    out["end_offsets"] = plain.end_offsets(orders)
    found = plain.offsets_for_times({tp: 1_005_500 for tp in orders})
    assert all(v is None or isinstance(v, OffsetAndTimestamp) for v in found.values())
    out["offsets_for_times"] = found
    plain.seek(orders[0], 0)
    plain.pause(orders[1], orders[2])
    out["paused"] = sorted(plain.paused())
    out["seek+poll_records"] = [r.offset for r in plain.poll_records(3000, max_records=2)]
    plain.resume(orders[1], orders[2])
    plain.seek_to_end()
    assert plain.poll_records(timeout_ms=200) == []
    plain.seek_to_beginning(orders[2])
    batches = plain.poll_batches(timeout_ms=3000)
    # batch boundaries follow how the records were written; columns and rows must agree
    out["poll_batches"] = (
        sorted({tuple(b.schema.names) for b in batches}),
        sum(b.num_rows for b in batches),
    )
    out["consumer.metrics"] = sorted(plain.metrics()["consumer-metrics"])
    with pytest.raises(ConfigError):
        plain.commit()  # no group
    with pytest.raises(ConfigError):
        plain.seek(TopicPartition("audit", 0), 1)  # not assigned
    plain.close()

    typed = Consumer(address=address, storage_options=options, auto_offset_reset="earliest")
    typed.assign([TopicPartition("typed", 0)])
    out["typed"] = [r.value for r in _drain_records(typed, 1)]
    assert out["typed"] == [{"user": "ann", "clicks": 3}]
    typed.close()

    # -- Consumer: groups, commits, iteration ---------------------------------------------
    listener = _Listener()
    member = Consumer(
        address=address,
        group_id="billing",
        storage_options=options,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        consumer_timeout_ms=1500,
        heartbeat_interval_ms=200,
    )
    member.subscribe(pattern="^ord.*", listener=listener)
    out["subscription"] = member.subscription()
    iterated = [r.offset for r in member]  # stops after consumer_timeout_ms without records
    assert len(iterated) == 14
    out["iterate"] = sorted(iterated)
    member.commit()
    out["committed"] = [member.committed(tp) for tp in orders]
    assert out["committed"] == [0, 4, 10]
    done = threading.Event()
    answers: list[Any] = []

    def on_commit(offsets: dict, error: Any) -> None:
        answers.append((sorted(offsets.items()), error))
        done.set()

    member.commit_async({orders[0]: OffsetAndMetadata(2, "async")}, callback=on_commit)
    assert done.wait(30)
    out["commit_async"] = answers
    out["committed.metadata"] = member.committed(orders[0], metadata=True)
    out["committed.dict"] = member.committed([orders[0]])
    member.unsubscribe()
    member.close()
    out["listener"] = listener.events
    assert listener.events == [
        ("assigned", ["orders-0", "orders-1", "orders-2"]),
        ("revoked", ["orders-0", "orders-1", "orders-2"]),
    ]

    # -- Admin: groups, records, deletes -----------------------------------------------------
    out["list_groups"] = admin.list_groups()
    out["list_consumer_groups"] = admin.list_consumer_groups()
    group = admin.describe_group("billing")
    out["describe_group"] = (
        group.state,
        group.strategy,
        [(lag.topic, lag.partition, lag.committed, lag.lag) for lag in group.lag],
    )
    out["describe_consumer_groups"] = [g.group for g in admin.describe_consumer_groups(["billing"])]
    out["list_consumer_group_offsets"] = admin.list_consumer_group_offsets("billing")
    admin.alter_consumer_group_offsets("billing", {orders[1]: OffsetAndMetadata(1, "set")})
    out["after_alter"] = admin.list_consumer_group_offsets("billing", [orders[1]])
    plan = admin.reset_group_offsets("billing", "orders", to_earliest=True, execute=True)
    out["reset_group_offsets"] = [(r.partition, r.new) for r in plan]
    out["list_offsets"] = admin.list_offsets("orders", "latest")
    out["list_offsets.time"] = admin.list_offsets("orders", 1_005_500)
    out["delete_records"] = admin.delete_records({orders[1]: 2, orders[2]: -1})
    trimmed = Consumer(address=address, storage_options=options, auto_offset_reset="error")
    trimmed.assign([orders[1]])
    trimmed.seek(orders[1], 0)
    with pytest.raises(OffsetOutOfRangeError):
        trimmed.poll_records(timeout_ms=3000)
    trimmed.close()
    sizes = [p.size_bytes for p in admin.describe_topic("orders").partitions]
    assert all(isinstance(s, int) and s >= 0 for s in sizes) and sizes[1] > 0
    out["delete_consumer_groups"] = [(g, e) for g, e in admin.delete_consumer_groups(["billing"])]
    admin.delete_topics(["audit"])
    admin.delete_topic("typed")
    out["after_deletes"] = admin.list_topics()
    admin.close()
    return out


def test_every_call_answers_the_same_in_every_mode(three_modes):
    transcripts = {mode: scenario(url, opts, mode) for mode, (url, opts) in three_modes.items()}
    reference = transcripts["file"]
    for mode in ("s3", "broker"):
        differing = {
            key: (reference[key], transcripts[mode].get(key))
            for key in reference
            if transcripts[mode].get(key) != reference[key]
        }
        assert not differing, f"{mode} differs from file: {differing}"


def test_confluent_style_config_dicts_are_translated(tmp_path):
    root = f"file://{tmp_path}/root"
    with Admin({"bootstrap.servers": root}) as admin:
        admin.create_topic("c", 1)
    producer = Producer({"bootstrap.servers": root, "linger.ms": 1, "compression.type": "zstd"})
    assert producer.config["linger_ms"] == 1 and producer.config["compression"] == "zstd"
    producer.send("c", b"v").get(timeout=10)
    producer.close()
    consumer = Consumer(
        {"bootstrap.servers": root, "group.id": "cg", "auto.offset.reset": "earliest"}
    )
    assert consumer.group_id == "cg"
    consumer.subscribe(["c"])
    assert [r.value for r in _drain_records(consumer, 1)] == [b"v"]
    consumer.close()
    with pytest.raises(ConfigError, match="queue.buffering.max.ms"):
        Producer({"bootstrap.servers": root, "queue.buffering.max.ms": 5})


def test_bootstrap_servers_forms(tmp_path):
    """A broker list as kafka-python writes it (string or list), or a storage root."""
    from sparklog.client.address import parse_address

    assert parse_address("localhost:9092,other:9093").bootstrap == "localhost:9092,other:9093"
    assert parse_address("sparklog://h:1").bootstrap == "h:1"
    assert parse_address(str(tmp_path)).root == str(tmp_path)
    with pytest.raises(ConfigError, match="given twice"):
        Producer(f"file://{tmp_path}", bootstrap_servers="h:1")
    with pytest.raises(ConfigError, match="bootstrap_servers"):
        Producer(bootstrap_servers=[1, 2])


def test_future_timeout_is_not_the_records_failure(tmp_path):
    root = f"file://{tmp_path}/root"
    with Admin(root) as admin:
        admin.create_topic("f", 1)
    producer = Producer(root, linger_ms=60_000)
    future = producer.send("f", b"x")
    with pytest.raises(KafkaTimeoutError):
        future.get(timeout=0.05)
    assert not future.failed() and not future.succeeded()
    producer.flush()
    assert future.value is not None and future.value.offset == 0
    producer.close()
