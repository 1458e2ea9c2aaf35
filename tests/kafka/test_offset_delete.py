"""kafka-python's admin client against the Kafka listener: OffsetDelete (API key 47) and
IncrementalAlterConfigs' DELETE operation."""

from __future__ import annotations

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, OffsetAndMetadata
from kafka import TopicPartition as Tp
from kafka.admin import AlterConfigOp, ConfigResource, ConfigResourceType, NewTopic
from kafka.errors import GroupIdNotFoundError, GroupSubscribedToTopicError, NoError

from tests.support.brokers import Cluster
from tests.support.waiting import wait_for


@pytest.fixture
def admin(brokers: Cluster):
    client = KafkaAdminClient(bootstrap_servers=brokers.kafka_bootstrap)
    yield client
    client.close()


def test_offset_delete(brokers: Cluster, admin: KafkaAdminClient) -> None:
    bootstrap = brokers.kafka_bootstrap
    admin.create_topics([NewTopic("t", 2, 1), NewTopic("u", 1, 1)])
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    for i in range(4):
        producer.send("t", f"v{i}".encode(), partition=i % 2)
    producer.flush(30)
    producer.close()
    offsets = {Tp("t", 0): 2, Tp("t", 1): 1, Tp("u", 0): 0}
    admin.alter_group_offsets(
        "g", {tp: OffsetAndMetadata(o, "", None) for tp, o in offsets.items()}
    )

    def held() -> set[Tp]:
        return set(admin.list_group_offsets({"g": None})["g"])

    assert admin.delete_group_offsets("g", [Tp("t", 0)]) == {Tp("t", 0): NoError}
    assert held() == {Tp("t", 1), Tp("u", 0)}
    with pytest.raises(GroupIdNotFoundError):
        admin.delete_group_offsets("nobody", [Tp("t", 0)])

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, group_id="g", enable_auto_commit=False,
        auto_offset_reset="earliest",
    )  # fmt: skip
    consumer.subscribe(["t"])
    try:
        # a whole second per poll: with 200 ms polls the join did not finish within 60 s
        # once under load (two xdist workers and a benchmark); 1 s polls have not failed
        wait_for(lambda: consumer.poll(1000) is not None and consumer.assignment(), 60, "a join")
        answer = admin.delete_group_offsets("g", [Tp("t", 1), Tp("u", 0)])
        assert answer == {Tp("t", 1): GroupSubscribedToTopicError, Tp("u", 0): NoError}
        assert held() == {Tp("t", 1)}
    finally:
        consumer.close(autocommit=False)


def test_incremental_alter_configs_delete(admin: KafkaAdminClient) -> None:
    resource = ConfigResource(ConfigResourceType.TOPIC, "c")

    def set_here() -> dict[str, str]:
        """The topic's own settings (kafka-python leaves out the defaults)."""
        found = admin.describe_configs([resource])["topic"]["c"]
        return {name: entry["value"] for name, entry in found.items()}

    config = {"retention.ms": "1000", "cleanup.policy": "compact"}
    admin.create_topics([NewTopic("c", 1, 1, topic_configs=config)])
    assert set_here() == config
    delete = {"retention.ms": (AlterConfigOp.DELETE, None)}
    admin.alter_configs(
        [ConfigResource(ConfigResourceType.TOPIC, "c", configs=delete)], incremental=True
    )
    # on a cluster the broker answering may learn the change at its next look at the
    # metadata log (metadata_refresh_ms), as Kafka's brokers learn it from the controller
    wait_for(lambda: set_here() == {"cleanup.policy": "compact"}, what="retention.ms deleted")
