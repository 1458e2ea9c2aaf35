"""kafka-python's admin client against the Kafka listener."""

from __future__ import annotations

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka import TopicPartition as Tp
from kafka.admin import ConfigResource, ConfigResourceType, NewPartitions, NewTopic
from kafka.errors import TopicAlreadyExistsError, UnknownTopicOrPartitionError

from tests.support.brokers import Cluster
from tests.support.waiting import wait_for


@pytest.fixture
def admin(brokers: Cluster):
    client = KafkaAdminClient(bootstrap_servers=brokers.kafka_bootstrap)
    yield client
    client.close()


def configs_of(admin: KafkaAdminClient, topic: str) -> dict[str, str]:
    result = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
    return {name: entry["value"] for name, entry in result["topic"][topic].items()}


def _configs_become(admin: KafkaAdminClient, topic: str, wanted: dict[str, str | None]) -> None:
    """On a cluster the answering broker learns a change made through another one at its
    next look at the metadata log (``metadata_refresh_ms``), as Kafka's brokers do."""
    seen: list[dict[str, str]] = []

    def matches() -> bool:
        seen[:] = [configs_of(admin, topic)]
        return {k: seen[0].get(k) for k in wanted} == wanted

    try:
        wait_for(matches, what=f"{topic}'s configs {wanted}")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; last described: {seen[0] if seen else None}") from None


def test_topics_and_configs(brokers: Cluster, admin: KafkaAdminClient) -> None:
    admin.create_topics([NewTopic("audit", 2, 1, topic_configs={"retention.ms": "3600000"})])
    with pytest.raises(TopicAlreadyExistsError):
        admin.create_topics([NewTopic("audit", 2, 1)])
    brokers.wait_listed("audit")
    assert "audit" in admin.list_topics()
    described = admin.describe_topics(["audit"])[0]
    assert sorted(p["partition_index"] for p in described["partitions"]) == [0, 1]

    assert configs_of(admin, "audit")["retention.ms"] == "3600000"
    compact = {"cleanup.policy": "compact"}
    admin.alter_configs(
        [ConfigResource(ConfigResourceType.TOPIC, "audit", configs=compact)], incremental=True
    )
    _configs_become(admin, "audit", {"cleanup.policy": "compact", "retention.ms": "3600000"})
    # kafka-python's AlterConfigs (not incremental) reads the topic's configs from some
    # broker and sends them all back with the change, since AlterConfigs resets what it
    # omits: every broker must hold the compact first, or the one asked may send it back
    # without it (kafka-python's own "inherent race"; a broker learns another's change at
    # its next look at the metadata log)
    brokers.wait_config("audit", {"cleanup.policy": "compact"})
    admin.alter_configs(
        [ConfigResource(ConfigResourceType.TOPIC, "audit", configs={"retention.ms": "60000"})],
        incremental=False,
    )
    _configs_become(admin, "audit", {"cleanup.policy": "compact", "retention.ms": "60000"})

    admin.create_partitions({"audit": NewPartitions(total_count=5)})
    wait_for(
        lambda: len(admin.describe_topics(["audit"])[0]["partitions"]) == 5,
        what="five partitions",
    )
    admin.delete_topics(["audit"])
    wait_for(lambda: "audit" not in admin.list_topics(), what="topic deleted")
    with pytest.raises(UnknownTopicOrPartitionError):
        admin.delete_topics(["audit"])


def test_delete_records_and_groups(brokers: Cluster, admin: KafkaAdminClient) -> None:
    bootstrap = brokers.kafka_bootstrap
    admin.create_topics([NewTopic("trail", 1, 1)])
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    for i in range(20):
        producer.send("trail", value=f"v{i}".encode(), partition=0)
    producer.flush(30)
    producer.close()

    admin.delete_records({Tp("trail", 0): 8})
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id="auditors",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        consumer_timeout_ms=5000,
    )
    consumer.subscribe(["trail"])
    values = [m.value for m in consumer]
    assert values == [f"v{i}".encode() for i in range(8, 20)]
    consumer.commit()
    assert consumer.beginning_offsets([Tp("trail", 0)])[Tp("trail", 0)] == 8

    listed = {g["group_id"]: g for g in admin.list_groups()}
    assert listed["auditors"]["protocol_type"] == "consumer"
    group = admin.describe_groups(["auditors"])["auditors"]
    assert group["group_state"] == "Stable" and len(group["members"]) == 1
    assignment = group["members"][0]["member_assignment"]["assigned_partitions"]
    assert assignment == [{"topic": "trail", "partitions": [0]}]
    assert admin.list_group_offsets("auditors")["auditors"][Tp("trail", 0)].offset == 20
    consumer.close()
    wait_for(
        lambda: admin.describe_groups(["auditors"])["auditors"]["group_state"] == "Empty",
        what="group empty after close",
    )
    admin.delete_groups(["auditors"])
    assert "auditors" not in [g["group_id"] for g in admin.list_groups()]
