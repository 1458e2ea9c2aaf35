"""Idempotent confluent-kafka producer across leader kills; producer ids across brokers."""

from __future__ import annotations

import collections
import socket
import struct

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.brokers import Cluster
from tests.support.waiting import wait_for

TOPIC = "payments"
PARTITIONS = 6


def init_producer_id(address: str) -> int:
    """One raw InitProducerId v0 request (no transactional id): the id it returns."""
    body = struct.pack(">hhih", 22, 0, 1, -1) + struct.pack(">hi", -1, 60_000)
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(struct.pack(">i", len(body)) + body)
        size = struct.unpack(">i", sock.recv(4))[0]
        data = b""
        while len(data) < size:
            data += sock.recv(size - len(data))
    _correlation, _throttle, error, producer_id, _epoch = struct.unpack(">iihqh", data)
    assert error == 0
    return producer_id


def test_producer_ids_are_unique_across_brokers_and_restarts(kafka_cluster: Cluster) -> None:
    for broker_id in range(2):
        kafka_cluster.start(broker_id)
    ids = [
        init_producer_id(b.kafka_address) for b in kafka_cluster.brokers.values() for _ in range(3)
    ]
    kafka_cluster.brokers[0].terminate()
    kafka_cluster.restart(0)
    ids += [init_producer_id(kafka_cluster.brokers[0].kafka_address) for _ in range(3)]
    assert len(set(ids)) == len(ids)


@pytest.mark.slow
def test_idempotent_producer_across_leader_kills(kafka_cluster: Cluster) -> None:
    for broker_id in range(3):
        kafka_cluster.start(broker_id)
    bootstrap = kafka_cluster.kafka_bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(timeout=30)
    acked: list[bytes] = []
    failed: list[str] = []

    def on_delivery(err, msg) -> None:
        if err is None:
            acked.append(msg.value())
        else:
            failed.append(str(err))

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "message.timeout.ms": 120_000,
            "topic.metadata.refresh.interval.ms": 500,
        }
    )
    total = 0

    def send(count: int) -> None:
        nonlocal total
        for _ in range(count):
            producer.produce(
                TOPIC, key=str(total).encode(), value=f"m{total}".encode(), on_delivery=on_delivery
            )
            total += 1
        producer.poll(0)

    def acked_at_least(n: int) -> bool:
        producer.poll(0.1)
        return len(acked) >= n

    send(1000)
    wait_for(lambda: acked_at_least(500), what="first acks")
    for victim in (1, 2):  # kill a leader mid-stream, keep producing, bring it back
        kafka_cluster.brokers[victim].kill()
        send(1000)
        wait_for(lambda: acked_at_least(total - 1000), timeout_s=120, what="acks after kill")
        kafka_cluster.restart(victim)
        send(500)
    assert producer.flush(120) == 0
    assert not failed, failed[:5]
    assert len(acked) == total

    consumer = Consumer({"bootstrap.servers": kafka_cluster.kafka_bootstrap, "group.id": "audit"})
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    seen: list[bytes] = []

    def read_all() -> bool:
        for msg in consumer.consume(1000, 0.2):
            if msg.error() is None:
                seen.append(msg.value())
        return len(seen) >= total

    try:
        wait_for(read_all, timeout_s=120, what="every record")
        extra = consumer.poll(2)
        assert extra is None or extra.error() is not None
    finally:
        consumer.close()
    counts = collections.Counter(seen)
    assert [v for v, n in counts.items() if n > 1] == []  # nothing doubled
    assert set(counts) == set(acked)  # nothing acknowledged lost
