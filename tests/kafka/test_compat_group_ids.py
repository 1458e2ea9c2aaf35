"""Kafka accepts any non-empty group id; so does the listener (issue 24 item 4)."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from sparklog.storage.groups import group_key_name
from tests.support.brokers import Cluster
from tests.support.waiting import wait_for

TOPIC = "events"
GROUP_IDS = ["my group", "team:app", "app/v1", "grupo-ñ", "a@b", "g" * 250, "ü" * 200]


def consume_and_commit(bootstrap: str, group: str, count: int) -> list[bytes]:
    """Join ``group``, read ``count`` records from the start, commit them, leave."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 300,
        }
    )
    values: list[bytes] = []
    try:
        consumer.subscribe([TOPIC])

        def read_all() -> bool:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                values.append(msg.value())
            return len(values) >= count

        wait_for(read_all, timeout_s=60, what=f"group {group[:20]!r} reads")
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return values


@pytest.mark.slow
def test_any_non_empty_group_id_joins_commits_and_is_listed(brokers: Cluster) -> None:
    bootstrap = brokers.kafka_bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(timeout=30)
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(3):
        producer.produce(TOPIC, value=f"v{i}".encode())
    assert producer.flush(30) == 0

    for group in GROUP_IDS:
        assert consume_and_commit(bootstrap, group, 3) == [b"v0", b"v1", b"v2"]

    for group in GROUP_IDS:  # the commits are stored under the id and read back
        reader = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
        try:
            committed = reader.committed([TopicPartition(TOPIC, 0)], timeout=30)
        finally:
            reader.close()
        assert committed[0].offset == 3, group
    listed = admin.list_consumer_groups().result(timeout=30)
    assert set(GROUP_IDS) <= {g.group_id for g in listed.valid}
    # each group's objects are under one safe folder name of the id
    names = {group_key_name(g) for g in GROUP_IDS}
    assert len(names) == len(GROUP_IDS)
    assert all("/" not in n and " " not in n and len(n) <= 249 for n in names)
