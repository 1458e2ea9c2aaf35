"""``__consumer_offsets`` (issue 24 item 7): a read-only view of the group logs in Kafka's
format, through confluent-kafka and raw Metadata.

The records are decoded here with Kafka's layout written out independently
(OffsetCommitKey v1: int16 version, group, topic, int32 partition;
OffsetCommitValue v1: int16 version, int64 offset, metadata, int64 commit and
expire timestamps), not with the broker's own encoder.
"""

from __future__ import annotations

import pathlib
import struct
import uuid
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
)
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic

from sparklog.broker_lite.kafka.consumer_offsets import partition_for
from sparklog.security import acls, users
from sparklog.storage.catalog import open_root
from tests.kafka.wire import Connection
from tests.support.brokers import Cluster
from tests.support.waiting import wait_for

TOPIC = "__consumer_offsets"
SETTLE = {"consumer_offsets_settle_ms": 300}


def test_groups_are_placed_by_kafkas_hash() -> None:
    """Java's String.hashCode values: "hello" 99162322, "abc" 96354,
    "polygenelubricants" Integer.MIN_VALUE (Kafka's Utils.abs makes it 0), an emoji
    two UTF-16 units (0xD83D * 31 + 0xDE00)."""
    assert partition_for("hello") == 99162322 % 50
    assert partition_for("abc") == 96354 % 50
    assert partition_for("polygenelubricants") == 0
    assert partition_for("\U0001f600") == (0xD83D * 31 + 0xDE00) % 50


def read_string(data: bytes, at: int) -> tuple[str, int]:
    (size,) = struct.unpack_from(">h", data, at)
    return data[at + 2 : at + 2 + size].decode(), at + 2 + size


def decode(key: bytes, value: bytes) -> tuple[str, str, int, int, str]:
    (key_version,) = struct.unpack_from(">h", key, 0)
    assert key_version == 1
    group, at = read_string(key, 2)
    topic, at = read_string(key, at)
    (partition,) = struct.unpack_from(">i", key, at)
    value_version, offset = struct.unpack_from(">hq", value, 0)
    assert value_version == 1
    metadata, at = read_string(value, 10)
    commit_ms, expire_ms = struct.unpack_from(">qq", value, at)
    assert commit_ms > 0 and expire_ms == -1
    return group, topic, partition, offset, metadata


class Reader:
    """A consumer of one derived partition from the beginning (Kafka's earliest)."""

    def __init__(self, bootstrap: str, partition: int) -> None:
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"reader-{uuid.uuid4()}",
                "enable.auto.commit": False,
            }
        )
        self.consumer.assign([KafkaTopicPartition(TOPIC, partition, -2)])
        self.read: list[tuple[int, Any]] = []

    def until(self, count: int) -> list[tuple[int, Any]]:
        """(offset, decoded record) of everything read, once ``count`` records are."""

        def enough() -> bool:
            message = self.consumer.poll(0.5)
            if message is not None and message.error() is None:
                self.read.append((message.offset(), decode(message.key(), message.value())))
            return len(self.read) >= count

        wait_for(enough, timeout_s=60, what=f"{count} records of {TOPIC}")
        return list(self.read)

    def close(self) -> None:
        self.consumer.close()


def read_all(bootstrap: str, partition: int, count: int) -> list[tuple[int, Any]]:
    reader = Reader(bootstrap, partition)
    try:
        return reader.until(count)
    finally:
        reader.close()


def commit(bootstrap: str, group: str, offsets: dict[int, int]) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        consumer.commit(
            offsets=[KafkaTopicPartition("orders", p, o) for p, o in offsets.items()],
            asynchronous=False,
        )
    finally:
        consumer.close()


def test_groups_commits_are_served_as_a_read_only_internal_topic(kafka_cluster: Cluster) -> None:
    kafka_cluster.start(0, **SETTLE)
    bootstrap = kafka_cluster.kafka_bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("orders", 2, 1)])["orders"].result(timeout=30)
    group = "billing"
    commit(bootstrap, group, {0: 3, 1: 1})

    # Metadata: an internal topic of Kafka's 50 partitions (was: UNKNOWN_TOPIC_OR_PARTITION)
    conn = Connection(bootstrap)
    try:
        answer = conn.call(
            MetadataRequest(
                topics=(MetadataRequestTopic(topic_id=uuid.UUID(int=0), name=TOPIC),),
                allow_auto_topic_creation=True,
                include_topic_authorized_operations=False,
            )
        )
    finally:
        conn.close()
    (described,) = answer.topics
    assert described.error_code.value == 0 and described.is_internal is True
    assert len(described.partitions) == 50
    assert TOPIC in admin.list_topics(timeout=30).topics

    partition = partition_for(group)
    first = read_all(bootstrap, partition, 2)
    assert sorted(record for _, record in first) == [
        (group, "orders", 0, 3, ""),
        (group, "orders", 1, 1, ""),
    ]

    # the same offsets from another broker, and after a restart (derived, not counted)
    kafka_cluster.start(1, **SETTLE)
    kafka_cluster.wait_live(2)
    other = kafka_cluster.brokers[1].kafka_address
    assert read_all(other, partition, 2) == first
    kafka_cluster.brokers[0].terminate()
    kafka_cluster.restart(0)
    assert read_all(kafka_cluster.brokers[0].kafka_address, partition, 2) == first

    # a reader at the head gets a newer commit once, after every record served before;
    # a new reader finds it replacing its key's record (as compaction leaves Kafka's topic)
    reader = Reader(other, partition)
    try:
        assert reader.until(2) == first
        commit(other, group, {0: 5})
        (newest_offset, newest) = reader.until(3)[2]
    finally:
        reader.close()
    assert newest == (group, "orders", 0, 5, "") and newest_offset > first[-1][0]
    kept = next(item for item in first if item[1][2] == 1)  # partition 1's: not replaced
    assert read_all(other, partition, 2) == [kept, (newest_offset, newest)]

    # writes are refused with Kafka's answer for an internal topic
    producer = Producer({"bootstrap.servers": other, "message.timeout.ms": 10_000})
    errors: list[KafkaError | None] = []
    producer.produce(TOPIC, value=b"x", partition=0, on_delivery=lambda e, m: errors.append(e))
    producer.flush(30)
    assert errors and errors[0] is not None and errors[0].code() == KafkaError.TOPIC_EXCEPTION
    for future in (
        admin.delete_topics([TOPIC])[TOPIC],
        admin.create_partitions([NewPartitions(TOPIC, 60)])[TOPIC],
        admin.delete_records([KafkaTopicPartition(TOPIC, 0, 1)])[KafkaTopicPartition(TOPIC, 0)],
        *admin.incremental_alter_configs(
            [
                ConfigResource(
                    "topic",
                    TOPIC,
                    incremental_configs=[
                        ConfigEntry(
                            "retention.ms", "1", incremental_operation=AlterConfigOpType.SET
                        )
                    ],
                )
            ]
        ).values(),
    ):
        error = future.exception(timeout=30)
        assert error is not None and error.args[0].code() == KafkaError.TOPIC_EXCEPTION, error
    described = admin.describe_configs([ConfigResource("topic", TOPIC)])
    (entries,) = [f.result(timeout=30) for f in described.values()]
    assert entries["cleanup.policy"].value == "compact" and entries["cleanup.policy"].is_read_only
    assert (
        admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].exception(timeout=30).args[0].code()
        == KafkaError.TOPIC_ALREADY_EXISTS
    )


def test_acls_apply_to_the_derived_topic(tmp_path: pathlib.Path) -> None:
    """With ``authorizer = "acl"`` the view is a topic like any other: Describe to see it
    and list its offsets (Read to fetch it), as Kafka asks for its ``__consumer_offsets``."""
    root = f"file://{tmp_path}/root"
    metadata = open_root(root, create=True).metadata
    passwords = {"monitor": "monitor-pw", "mallory": "mallory-pw"}
    for user, password in passwords.items():
        users.create(metadata, user, "SCRAM-SHA-256", password)
    acls.create(
        metadata, [acls.binding("TOPIC", TOPIC, "User:monitor", op) for op in ("DESCRIBE", "READ")]
    )
    cluster = Cluster(tmp_path, root)
    try:
        cluster.start(0, kafka_security_protocol="SASL_PLAINTEXT", authorizer="acl", **SETTLE)

        def config(user: str) -> dict[str, Any]:
            return {
                "bootstrap.servers": cluster.kafka_bootstrap,
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "SCRAM-SHA-256",
                "sasl.username": user,
                "sasl.password": passwords[user],
            }

        monitor, mallory = AdminClient(config("monitor")), AdminClient(config("mallory"))
        earliest = {KafkaTopicPartition(TOPIC, 0): OffsetSpec.earliest()}
        found = monitor.list_offsets(earliest)[KafkaTopicPartition(TOPIC, 0)]
        assert found.result(timeout=30).offset == 0
        assert TOPIC in monitor.list_topics(timeout=30).topics
        assert TOPIC not in mallory.list_topics(timeout=30).topics
        named = mallory.list_topics(TOPIC, timeout=30).topics[TOPIC]
        assert named.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
        refused = mallory.list_offsets(earliest)[KafkaTopicPartition(TOPIC, 0)]
        assert refused.exception(timeout=30) is not None
    finally:
        cluster.stop_all()
