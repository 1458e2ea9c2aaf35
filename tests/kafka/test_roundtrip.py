"""Produce and consume through the Kafka listener with confluent-kafka and kafka-python."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KpTopicPartition

from tests.support.brokers import Cluster


def create_topic(bootstrap: str, name: str, partitions: int, config: dict | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, partitions, 1, config=config or {})])
    futures[name].result(timeout=30)


def consume_all(bootstrap: str, topic: str, partitions: int, expected: int) -> list:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "reader", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got = []
    deadline = time.monotonic() + 60
    try:
        while len(got) < expected and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            got.append(msg)
    finally:
        consumer.close()
    return got


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_confluent_kafka_round_trip(brokers: Cluster, codec: str) -> None:
    bootstrap = brokers.kafka_bootstrap
    topic = f"events-{codec}"
    create_topic(bootstrap, topic, 3)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "compression.type": codec})
    sent = {}
    for i in range(300):
        key = f"k{i}".encode()
        value = None if i % 50 == 7 else f"value-{i}".encode() * (i % 5 + 1)
        producer.produce(
            topic,
            key=key,
            value=value,
            headers=[("n", str(i).encode()), ("e", b"")],
            timestamp=1_700_000_000_000 + i,
        )
        sent[key] = (value, 1_700_000_000_000 + i, [("n", str(i).encode()), ("e", b"")])
    assert producer.flush(30) == 0
    got = consume_all(bootstrap, topic, 3, 300)
    assert len(got) == 300
    by_partition: dict[int, list[int]] = {}
    for msg in got:
        value, stamp, headers = sent[msg.key()]
        assert msg.value() == value
        assert msg.timestamp() == (1, stamp)  # CreateTime
        assert msg.headers() == headers
        by_partition.setdefault(msg.partition(), []).append(msg.offset())
    for offsets in by_partition.values():
        assert offsets == list(range(len(offsets)))  # dense, in order, none doubled


def test_kafka_python_round_trip_and_log_append_time(brokers: Cluster) -> None:
    bootstrap = brokers.kafka_bootstrap
    create_topic(bootstrap, "stamped", 2, {"message.timestamp.type": "LogAppendTime"})
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    before = int(time.time() * 1000)
    for i in range(40):
        producer.send("stamped", key=b"k", value=f"v{i}".encode(), timestamp_ms=1000)
    producer.flush(30)
    producer.close()
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=3000
    )
    consumer.assign([KpTopicPartition("stamped", p) for p in range(2)])
    got = list(consumer)
    consumer.close()
    assert sorted(m.value for m in got) == sorted(f"v{i}".encode() for i in range(40))
    assert {m.partition for m in got} == {got[0].partition}  # one key, one partition
    assert all(m.timestamp_type == 1 and m.timestamp >= before for m in got)
    assert [m.offset for m in got] == list(range(40))


def test_acks_zero_and_one_are_written(brokers: Cluster) -> None:
    bootstrap = brokers.kafka_bootstrap
    create_topic(bootstrap, "acks", 1)
    for acks in ("0", "1"):
        producer = Producer({"bootstrap.servers": bootstrap, "acks": acks})
        for i in range(20):
            producer.produce("acks", value=f"{acks}-{i}".encode())
        assert producer.flush(30) == 0
    got = consume_all(bootstrap, "acks", 1, 40)
    assert sorted(m.value() for m in got) == sorted(
        f"{a}-{i}".encode() for a in ("0", "1") for i in range(20)
    )


def test_list_offsets_earliest_latest_and_by_timestamp(brokers: Cluster) -> None:
    bootstrap = brokers.kafka_bootstrap
    create_topic(bootstrap, "times", 1)
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(10):
        producer.produce("times", value=b"x", timestamp=1_000_000 + i * 10)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "offsets"})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition("times", 0), timeout=10)
        assert (low, high) == (0, 10)
        found = consumer.offsets_for_times([TopicPartition("times", 0, 1_000_035)], timeout=10)
        assert found[0].offset == 4
        after = consumer.offsets_for_times([TopicPartition("times", 0, 9_999_999)], timeout=10)
        assert after[0].offset == -1  # no record at or after: Kafka answers -1 (end)
    finally:
        consumer.close()


def test_each_kafka_api_request_is_timed_in_the_metrics(brokers: Cluster) -> None:
    """``sparklog_kafka_request_seconds{api}``: a Produce and a Fetch each count once more."""
    import re
    import urllib.request

    bootstrap = brokers.kafka_bootstrap

    def counts() -> dict[str, float]:
        """Each API's count, summed over the cluster's brokers (one of them leads)."""
        total: dict[str, float] = {}
        for broker in brokers.brokers.values():
            url = f"http://127.0.0.1:{broker.metrics_port}/metrics"
            text = urllib.request.urlopen(url, timeout=10).read().decode()
            found = re.findall(r'sparklog_kafka_request_seconds_count\{api="(\w+)"\} (\S+)', text)
            for api, n in found:
                total[api] = total.get(api, 0) + float(n)
        return total

    create_topic(bootstrap, "timed", 1)
    before = counts()
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce("timed", value=b"x")
    assert producer.flush(30) == 0
    assert len(consume_all(bootstrap, "timed", 1, 1)) == 1
    after = counts()
    assert after["Produce"] >= before.get("Produce", 0) + 1
    assert after["Fetch"] >= before.get("Fetch", 0) + 1
    assert after["Metadata"] > before.get("Metadata", 0)
