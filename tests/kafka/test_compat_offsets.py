"""Sentinel offsets in OffsetCommit are stored as given, as Kafka does (issue 24 item 5).

kafkajs' ``admin.resetOffsets({earliest: true})`` commits -2 for every partition
(its consumer then starts from the earliest offset); Kafka's coordinator stores
any committed offset as given and OffsetFetch returns it.  Raw frames send the
OffsetCommit kafkajs sends; tests/kafka/test_compat_kafkajs.py runs kafkajs itself.
"""

from __future__ import annotations

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.offset_commit.v8.request import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from kio.schema.offset_fetch.v7.request import OffsetFetchRequest, OffsetFetchRequestTopic

from sparklog.client.consumer import Consumer as SparklogConsumer
from tests.kafka.wire import Connection
from tests.support.brokers import Cluster
from tests.support.waiting import wait_for

TOPIC = "resets"


def commit(conn: Connection, group: str, offsets: dict[int, int]) -> list[int]:
    """OffsetCommit v8 as kafkajs sends it for a group without members; the error codes."""
    answer = conn.call(
        OffsetCommitRequest(
            group_id=group,
            generation_id_or_member_epoch=-1,
            member_id="",
            group_instance_id=None,
            topics=(
                OffsetCommitRequestTopic(
                    name=TOPIC,
                    partitions=tuple(
                        OffsetCommitRequestPartition(
                            partition_index=p,
                            committed_offset=o,
                            committed_leader_epoch=-1,
                            committed_metadata=None,
                        )
                        for p, o in offsets.items()
                    ),
                ),
            ),
        )
    )
    return [p.error_code.value for t in answer.topics for p in t.partitions]


def fetch(conn: Connection, group: str, partitions: list[int]) -> dict[int, int]:
    answer = conn.call(
        OffsetFetchRequest(
            group_id=group,
            topics=(OffsetFetchRequestTopic(name=TOPIC, partition_indexes=tuple(partitions)),),
            require_stable=False,
        )
    )
    return {p.partition_index: p.committed_offset for t in answer.topics for p in t.partitions}


def test_sentinel_offsets_are_stored_as_given_and_readers_reset(brokers: Cluster) -> None:
    bootstrap = brokers.kafka_bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, 2, 1)])[TOPIC].result(timeout=30)
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(4):
        producer.produce(TOPIC, value=f"v{i}".encode(), partition=i % 2)
    assert producer.flush(30) == 0

    conn = Connection(bootstrap)
    try:
        assert commit(conn, "reset-me", {0: 2, 1: 2}) == [0, 0]
        assert commit(conn, "reset-me", {0: -2, 1: -1}) == [0, 0]  # was INVALID_REQUEST
        assert fetch(conn, "reset-me", [0, 1]) == {0: -2, 1: -1}
    finally:
        conn.close()

    # librdkafka reads a committed -2 as "the beginning" (as kafkajs does), even with
    # auto.offset.reset=latest; -1 is "the end"
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "reset-me",
            "auto.offset.reset": "latest",
            "enable.auto.commit": False,
        }
    )
    seen: list[tuple[int, bytes]] = []
    try:
        consumer.subscribe([TOPIC])

        def read() -> bool:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                seen.append((msg.partition(), msg.value()))
            return len(seen) >= 2

        wait_for(read, timeout_s=60, what="partition 0 from its beginning")
    finally:
        consumer.close()
    assert sorted(seen) == [(0, b"v0"), (0, b"v2")]

    # sparklog's consumer takes a negative commit as none (as Kafka's Java consumer
    # does) and resets by its auto_offset_reset
    with SparklogConsumer(
        brokers.address,
        TOPIC,
        group_id="reset-me",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    ) as ours:
        values: list[bytes] = []

        def read_ours() -> bool:
            for records in ours.poll(500).values():
                values.extend(r.value for r in records)
            return len(values) >= 4

        wait_for(
            read_ours,
            timeout_s=60,
            what="sparklog consumer resets",
        )
    assert sorted(values) == [b"v0", b"v1", b"v2", b"v3"]
