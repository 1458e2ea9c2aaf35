"""Static membership (KIP-345) with confluent-kafka: ``group.instance.id``.

A static member that comes back within its session timeout takes its old place
without a rebalance; a second consumer with the same instance id fences the
first (FENCED_INSTANCE_ID, fatal for it), so the two never split the partitions.
"""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, KafkaError

from sparklog.client.transports.flight_client import BrokerClient
from sparklog.protocol import actions
from tests.support.brokers import Cluster
from tests.support.waiting import wait_for


def _consumer(cluster: Cluster, instance: str, group: str = "static") -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": cluster.kafka_bootstrap,
            "group.id": group,
            "group.instance.id": instance,
            "session.timeout.ms": 30_000,
            "heartbeat.interval.ms": 300,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )


def _assigned(consumer: Consumer) -> list[int]:
    consumer.poll(0.2)
    return sorted(tp.partition for tp in consumer.assignment())


@pytest.mark.slow
def test_a_static_member_back_within_its_session_keeps_its_place(brokers: Cluster) -> None:
    with BrokerClient(brokers.bootstrap) as admin:
        admin.create_topic("events", 4)
        first = _consumer(brokers, "pod-1")
        first.subscribe(["events"])
        wait_for(lambda: _assigned(first) == [0, 1, 2, 3], 60, "the first assignment")
        generation = admin.call(actions.DESCRIBE_GROUP, group="static")["generation"]
        first.close()  # a static member's close sends no LeaveGroup: the pod restarts
        again = _consumer(brokers, "pod-1")
        again.subscribe(["events"])
        try:
            wait_for(lambda: _assigned(again) == [0, 1, 2, 3], 60, "the place taken back")
            described = admin.call(actions.DESCRIBE_GROUP, group="static")
            assert described["generation"] == generation  # no rebalance
            assert len(described["members"]) == 1
        finally:
            again.close()


@pytest.mark.slow
def test_a_duplicate_instance_id_fences_the_older_consumer(brokers: Cluster) -> None:
    with BrokerClient(brokers.bootstrap) as admin:
        admin.create_topic("events-2", 4)
    older = _consumer(brokers, "pod-2", "static-2")
    older.subscribe(["events-2"])
    newer = _consumer(brokers, "pod-2", "static-2")
    try:
        wait_for(lambda: _assigned(older) == [0, 1, 2, 3], 60, "the older one's assignment")
        newer.subscribe(["events-2"])
        fenced: list[int] = []

        def older_fenced() -> bool:
            msg = older.poll(0.2)
            if msg is not None and msg.error() is not None:
                fenced.append(msg.error().code())
            return KafkaError._FATAL in fenced or KafkaError.FENCED_INSTANCE_ID in fenced

        wait_for(older_fenced, 60, "the older consumer to be fenced")
        wait_for(lambda: _assigned(newer) == [0, 1, 2, 3], 60, "the newer one's assignment")
    finally:
        newer.close()
        older.close()
