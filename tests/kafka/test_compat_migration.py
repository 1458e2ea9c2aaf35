"""Online migration between classic and KIP-848 groups with real clients (issue 24).

confluent-kafka consumers against a broker process: two classic members
(``group.protocol=classic``, eager or cooperative assignors) read a topic; a
``group.protocol=consumer`` member joins and the group becomes a consumer group
that serves all three; when it leaves, the group is classic again and the two
classic members go on.  Every record is read exactly once across the members
(offsets are committed after each record and survive each conversion) and no
partition has two owners at any look.  With ``group_consumer_migration_policy =
"disabled"`` the two kinds of member are kept apart, with messages naming the key.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, ConsumerGroupType, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.brokers import Cluster, module_broker
from tests.support.waiting import wait_for

PARTITIONS = 4


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """One broker with Kafka's default policy (``bidirectional``)."""
    yield from module_broker(tmp_path_factory, "migration")


@pytest.fixture(scope="module")
def disabled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """One broker with ``group_consumer_migration_policy = "disabled"``."""
    yield from module_broker(
        tmp_path_factory, "migration-disabled", group_consumer_migration_policy="disabled"
    )


def _topic(cluster: Cluster, base: str) -> str:
    name = f"{base}-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": cluster.kafka_bootstrap})
    admin.create_topics([NewTopic(name, PARTITIONS, 1)])[name].result(timeout=30)
    return name


def _consumer(cluster: Cluster, group: str, protocol: str, **extra: Any) -> Consumer:
    settings: dict[str, Any] = {
        "bootstrap.servers": cluster.kafka_bootstrap,
        "group.id": group,
        "group.protocol": protocol,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        **extra,
    }
    if protocol == "classic":
        settings.setdefault("session.timeout.ms", 6_000)
        settings.setdefault("heartbeat.interval.ms", 200)
    return Consumer(settings)


def _assigned(consumer: Consumer) -> set[tuple[str, int]]:
    return {(tp.topic, tp.partition) for tp in consumer.assignment()}


class Reading:
    """Members of one group polled in turn: what each read, duplicates, and the check
    that no partition is in two members' assignments at any look."""

    def __init__(self, members: dict[str, Consumer]) -> None:
        self.members = members
        self.read: dict[tuple[int, int], str] = {}
        self.duplicates: list[tuple[int, int]] = []
        self.errors: list[Any] = []
        #: a commit a rebalance refused (ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS: what
        #: Kafka answers a commit that crosses a generation): committed again at the next
        #: poll unless a later one of its partition went through; a re-read of it is
        #: at-least-once delivery, not a duplicate
        self.refused: dict[int, Any] = {}
        self.committed_past: dict[int, int] = {}

    def poll(self) -> None:
        for consumer in list(self.members.values()):
            for partition, (owner, earlier) in list(self.refused.items()):
                if owner is consumer and self.committed_past.get(partition, 0) <= earlier.offset():
                    self.commit(consumer, earlier)
            msg = consumer.poll(0.05)
            if msg is not None and msg.error() is not None:
                self.errors.append(msg.error())
            elif msg is not None:
                key = (msg.partition(), msg.offset())
                refused = self.refused.get(msg.partition())
                if key in self.read and (refused is None or refused[1].offset() < msg.offset()):
                    self.duplicates.append(key)
                self.read[key] = msg.value().decode()
                self.commit(consumer, msg)
            self.check_owners()

    def commit(self, consumer: Consumer, msg: Any) -> None:
        from confluent_kafka import KafkaException

        try:
            consumer.commit(message=msg, asynchronous=False)
        except KafkaException as exc:
            code = exc.args[0].code()
            if code not in (KafkaError.ILLEGAL_GENERATION, KafkaError.REBALANCE_IN_PROGRESS):
                raise
            self.refused[msg.partition()] = (consumer, msg)
            return
        self.refused.pop(msg.partition(), None)
        past = self.committed_past.get(msg.partition(), 0)
        self.committed_past[msg.partition()] = max(past, msg.offset() + 1)

    def check_owners(self) -> None:
        owned: set[tuple[str, int]] = set()
        for name, consumer in self.members.items():
            mine = _assigned(consumer)
            assert not (mine & owned), f"{name} owns {mine & owned} that another member owns"
            owned |= mine

    def owners(self) -> dict[str, set[tuple[str, int]]]:
        return {name: _assigned(c) for name, c in self.members.items()}

    def read_all(self, values: list[str], what: str) -> None:
        wait_for(lambda: (self.poll(), set(values) <= set(self.read.values()))[1], 60, what)


def _produce(cluster: Cluster, topic: str, values: list[str]) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": cluster.kafka_bootstrap, "acks": "all"})
    for i, value in enumerate(values):
        producer.produce(topic, value=value.encode(), partition=i % PARTITIONS)
    assert producer.flush(30) == 0


def _group_type(cluster: Cluster, group: str) -> Any:
    admin = AdminClient({"bootstrap.servers": cluster.kafka_bootstrap})
    return admin.describe_consumer_groups([group])[group].result(timeout=30)


def _committed(cluster: Cluster, group: str, topic: str) -> dict[int, int]:
    admin = AdminClient({"bootstrap.servers": cluster.kafka_bootstrap})
    from confluent_kafka import ConsumerGroupTopicPartitions

    request = ConsumerGroupTopicPartitions(
        group, [TopicPartition(topic, p) for p in range(PARTITIONS)]
    )
    found = admin.list_consumer_group_offsets([request])[group].result(timeout=30)
    return {tp.partition: tp.offset for tp in found.topic_partitions}


@pytest.mark.parametrize("assignor", ["range", "cooperative-sticky"])
def test_a_classic_group_upgrades_and_downgrades_online(broker: Cluster, assignor: str) -> None:
    topic = _topic(broker, "migrate")
    group = f"migrate-{uuid.uuid4().hex[:8]}"
    classic = {
        name: _consumer(broker, group, "classic", **{"partition.assignment.strategy": assignor})
        for name in ("classic-1", "classic-2")
    }
    reading = Reading(dict(classic))
    modern: Consumer | None = None
    try:
        for consumer in classic.values():
            consumer.subscribe([topic])
        first = [f"a{i}" for i in range(40)]
        _produce(broker, topic, first)

        def split_between_classic() -> bool:
            reading.poll()
            return sorted(len(s) for s in reading.owners().values()) == [2, 2]

        wait_for(split_between_classic, 60, "two classic members with two partitions each")
        reading.read_all(first, "the first records read by the classic members")
        before = _committed(broker, group, topic)
        assert sum(before.values()) == len(first)
        assert _group_type(broker, group).type == ConsumerGroupType.CLASSIC

        # a consumer-protocol member joins: the group becomes a consumer group
        modern = _consumer(broker, group, "consumer")
        modern.subscribe([topic])
        reading.members["modern"] = modern

        def all_three_own_some() -> bool:
            reading.poll()
            owners = reading.owners()
            return all(owners.values()) and set().union(*owners.values()) == {
                (topic, p) for p in range(PARTITIONS)
            }

        wait_for(all_three_own_some, 60, "the three members sharing the partitions")
        described = _group_type(broker, group)
        assert described.type == ConsumerGroupType.CONSUMER
        assert len(described.members) == 3
        assert _committed(broker, group, topic) == before  # offsets survived the upgrade
        second = [f"b{i}" for i in range(40)]
        _produce(broker, topic, second)
        reading.read_all(second, "the second records read by the three members")
        assert reading.duplicates == []

        # the consumer-protocol member leaves: classic again, the classic members go on
        modern.close()
        del reading.members["modern"]
        modern = None
        wait_for(
            lambda: _group_type(broker, group).type == ConsumerGroupType.CLASSIC,
            30,
            "the group classic again",
        )
        wait_for(split_between_classic, 60, "the classic members sharing the partitions again")
        third = [f"c{i}" for i in range(40)]
        _produce(broker, topic, third)
        reading.read_all(third, "the third records read by the classic members")
        assert reading.duplicates == []
        assert sorted(reading.read.values()) == sorted(first + second + third)
        assert _committed(broker, group, topic) == {p: 30 for p in range(PARTITIONS)}
    finally:
        if modern is not None:
            modern.close()
        for consumer in classic.values():
            consumer.close()


def test_the_disabled_policy_keeps_classic_and_consumer_members_apart(disabled: Cluster) -> None:
    topic = _topic(disabled, "apart")
    group = f"apart-{uuid.uuid4().hex[:8]}"
    modern = _consumer(disabled, group, "consumer")
    classic = _consumer(disabled, group, "classic")
    errors: list[Any] = []
    try:
        modern.subscribe([topic])
        wait_for(lambda: (modern.poll(0.1), len(_assigned(modern)) == PARTITIONS)[1], 30, "joined")
        classic.subscribe([topic])

        def refused() -> bool:
            msg = classic.poll(0.2)
            modern.poll(0)
            if msg is not None and msg.error() is not None:
                errors.append(msg.error().code())
            return KafkaError.INCONSISTENT_GROUP_PROTOCOL in errors

        wait_for(refused, 30, "the classic member refused")
        assert len(_assigned(modern)) == PARTITIONS
        assert _group_type(disabled, group).type == ConsumerGroupType.CONSUMER
    finally:
        classic.close()
        modern.close()


def test_a_consumer_member_joins_a_rebalancing_classic_group(broker: Cluster) -> None:
    """A classic group mid-rebalance (its Kafka leader never syncs) is upgraded as Kafka
    upgrades it; librdkafka takes a GROUP_ID_NOT_FOUND heartbeat answer as fatal, so
    refusing would stop the member.  The silent leader expires after its session and
    the consumer-protocol member ends up owning every partition."""
    from sparklog.broker_lite.kafka.groups import encode_subscription
    from tests.kafka.wire import Connection, join_group_v9

    topic = _topic(broker, "waits")
    group = f"waits-{uuid.uuid4().hex[:8]}"
    conn = Connection(broker.kafka_bootstrap)
    modern = _consumer(broker, group, "consumer")
    try:
        subscription = {"range": encode_subscription([topic])}
        joined = join_group_v9(conn, group, subscription, session_s=6, rebalance_s=2)
        assert joined.error_code.value == 0  # the leader; it never sends its SyncGroup
        modern.subscribe([topic])
        errors: list[Any] = []

        def owns_everything() -> bool:
            msg = modern.poll(0.1)
            if msg is not None and msg.error() is not None:
                errors.append(msg.error())
            return len(_assigned(modern)) == PARTITIONS

        wait_for(owns_everything, 60, "the consumer member owning every partition")
        assert not [e for e in errors if e.fatal()], errors
        assert _group_type(broker, group).type == ConsumerGroupType.CONSUMER
    finally:
        modern.close()
        conn.close()
