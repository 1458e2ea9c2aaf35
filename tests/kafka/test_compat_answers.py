"""Kafka's answers where sparklog's differed (issue 24 item 8), through real clients.

MAX_TIMESTAMP ListOffsets (KIP-734), INVALID_PARTITIONS for shrinking,
INVALID_TOPIC_EXCEPTION for an illegal name, auto-created topics (Kafka's
``auto.create.topics.enable``) and OffsetForLeaderEpoch.
"""

from __future__ import annotations

import uuid

from confluent_kafka import KafkaError, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic, OffsetSpec
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.offset_for_leader_epoch.v4.request import (
    OffsetForLeaderEpochRequest,
    OffsetForLeaderPartition,
    OffsetForLeaderTopic,
)

from tests.kafka.wire import Connection
from tests.support.brokers import Cluster


def produce(bootstrap: str, topic: str, stamps: list[int]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i, stamp in enumerate(stamps):
        producer.produce(topic, value=f"v{i}".encode(), partition=0, timestamp=stamp)
        producer.flush(30)  # one batch each: the max is not simply a batch's last record
    assert producer.flush(30) == 0


def test_max_timestamp_shrinking_and_illegal_names(brokers: Cluster) -> None:
    bootstrap = brokers.kafka_bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("stamps", 2, 1)])["stamps"].result(timeout=30)
    produce(bootstrap, "stamps", [1_000, 5_000, 3_000, 5_000, 2_000])

    found = admin.list_offsets(
        {
            KafkaTopicPartition("stamps", 0): OffsetSpec.max_timestamp(),
            KafkaTopicPartition("stamps", 1): OffsetSpec.max_timestamp(),
        }
    )
    top = found[KafkaTopicPartition("stamps", 0)].result(timeout=30)
    assert (top.offset, top.timestamp) == (1, 5_000)  # was the log start
    empty = found[KafkaTopicPartition("stamps", 1)].result(timeout=30)
    assert (empty.offset, empty.timestamp) == (-1, -1)

    shrink = admin.create_partitions([NewPartitions("stamps", 1)])["stamps"]
    error = shrink.exception(timeout=30)
    assert error is not None and error.args[0].code() == KafkaError.INVALID_PARTITIONS

    bad = admin.create_topics([NewTopic("no spaces!", 1, 1)])["no spaces!"]
    error = bad.exception(timeout=30)
    assert error is not None and error.args[0].code() == KafkaError.TOPIC_EXCEPTION  # 17


def metadata(conn: Connection, name: str, allow: bool) -> tuple[int, int]:
    """(error code, partition count) of ``name`` in a Metadata v12 answer."""
    answer = conn.call(
        MetadataRequest(
            topics=(MetadataRequestTopic(topic_id=uuid.UUID(int=0), name=name),),
            allow_auto_topic_creation=allow,
            include_topic_authorized_operations=False,
        )
    )
    (topic,) = answer.topics
    return topic.error_code.value, len(topic.partitions)


def test_topics_are_auto_created_on_produce_and_metadata(kafka_cluster: Cluster) -> None:
    kafka_cluster.start(0, num_partitions=3)
    bootstrap = kafka_cluster.kafka_bootstrap
    # a producer to a missing topic: created with num_partitions, delivered (was: the
    # whole delivery timeout, then a failure)
    producer = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 30_000})
    delivered: list[KafkaError | None] = []
    producer.produce("made-by-producer", value=b"x", on_delivery=lambda e, m: delivered.append(e))
    assert producer.flush(40) == 0 and delivered == [None]
    listed = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=30).topics
    assert len(listed["made-by-producer"].partitions) == 3

    conn = Connection(bootstrap)
    try:
        assert metadata(conn, "not-asked", allow=False) == (3, 0)  # UNKNOWN_TOPIC_OR_PARTITION
        assert metadata(conn, "asked-for", allow=True) == (0, 3)
        assert metadata(conn, "bad name", allow=True) == (17, 0)
        # internal: never auto-created; the read-only view of the group logs
        assert metadata(conn, "__consumer_offsets", allow=True) == (0, 50)
    finally:
        conn.close()


def test_auto_creation_can_be_turned_off(kafka_cluster: Cluster) -> None:
    kafka_cluster.start(0, auto_create_topics_enable=False)
    conn = Connection(kafka_cluster.kafka_bootstrap)
    try:
        assert metadata(conn, "asked-for", allow=True) == (3, 0)
    finally:
        conn.close()


def epoch_end(conn: Connection, current: int, asked: int) -> tuple[int, int, int]:
    answer = conn.call(
        OffsetForLeaderEpochRequest(
            replica_id=-1,
            topics=(
                OffsetForLeaderTopic(
                    topic="epochs",
                    partitions=(
                        OffsetForLeaderPartition(
                            partition=0, current_leader_epoch=current, leader_epoch=asked
                        ),
                    ),
                ),
            ),
        )
    )
    (part,) = answer.topics[0].partitions
    return part.error_code.value, part.leader_epoch, part.end_offset


def test_offset_for_leader_epoch(brokers: Cluster) -> None:
    bootstrap = brokers.kafka_bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("epochs", 1, 1)])["epochs"].result(timeout=30)
    produce(bootstrap, "epochs", [1_000, 2_000, 3_000])
    conn = Connection(bootstrap)
    try:
        # the newest epoch the partition answers for is its leader's
        epoch = max(e for e in range(50) if epoch_end(conn, -1, e)[1] == e)
        assert epoch_end(conn, epoch, epoch) == (0, epoch, 3)  # end = high watermark
        assert epoch_end(conn, -1, epoch + 1) == (0, -1, -1)  # an epoch not yet reached
        if epoch > 0:
            assert epoch_end(conn, epoch - 1, epoch)[0] == 74  # FENCED_LEADER_EPOCH
        assert epoch_end(conn, epoch + 1, epoch)[0] == 76  # UNKNOWN_LEADER_EPOCH
    finally:
        conn.close()
