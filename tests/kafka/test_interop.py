"""What a Kafka client writes, sparklog's clients read the same way, and the reverse."""

from __future__ import annotations

import json
import subprocess
import sys
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from sparklog import Admin
from sparklog import Consumer as SlConsumer
from sparklog import Producer as SlProducer
from tests.support.brokers import REPO, Cluster
from tests.support.waiting import wait_for

STAMP = 1_700_000_000_000


def create(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(timeout=30)


def kafka_records(bootstrap: str, topic: str, partitions: int, count: int) -> list[tuple]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "interop-reader"})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got: list[tuple] = []

    def more() -> bool:
        for msg in consumer.consume(500, 0.2):
            if msg.error() is not None:
                continue
            got.append(
                (
                    msg.partition(),
                    msg.offset(),
                    msg.key(),
                    msg.value(),
                    msg.timestamp()[1],
                    [(k, v) for k, v in msg.headers() or []],
                )
            )
        return len(got) >= count

    try:
        wait_for(more, timeout_s=60, what=f"{count} records from {topic}")
    finally:
        consumer.close()
    return sorted(got)


def sparklog_records(address: str, topic: str, count: int) -> list[tuple]:
    consumer = SlConsumer(address)
    partitions = consumer.partitions_for_topic(topic)
    consumer.assign([(topic, p) for p in partitions])
    consumer.seek_to_beginning()
    got: list[tuple] = []

    def more() -> bool:
        for r in consumer.poll_records(timeout_ms=200):
            got.append(
                (
                    r.partition,
                    r.offset,
                    r.key,
                    r.value,
                    r.timestamp_ms,
                    [(k, v) for k, v in r.headers or []],
                )
            )
        return len(got) >= count

    try:
        wait_for(more, timeout_s=60, what=f"{count} records from {topic}")
    finally:
        consumer.close(autocommit=False)
    return sorted(got)


def test_kafka_client_to_sparklog_consumer_and_cli(brokers: Cluster) -> None:
    bootstrap = brokers.kafka_bootstrap
    address = f"sparklog://{brokers.bootstrap}"
    create(bootstrap, "k2s", 2)
    producer = Producer({"bootstrap.servers": bootstrap, "compression.type": "lz4"})
    for i in range(50):
        producer.produce(
            "k2s",
            key=None if i % 10 == 3 else f"key{i}".encode(),
            value=None if i % 10 == 5 else f"value{i}".encode(),
            headers=[("trace", f"t{i}".encode()), ("empty", None)],
            timestamp=STAMP + i,
            partition=i % 2,
        )
    assert producer.flush(30) == 0
    from_kafka = kafka_records(bootstrap, "k2s", 2, 50)
    from_sparklog = sparklog_records(address, "k2s", 50)
    assert from_sparklog == from_kafka
    assert {r[4] for r in from_kafka} == {STAMP + i for i in range(50)}

    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "sparklog.cli",
            "--address",
            address,
            "consume",
            "k2s",
            "--from-beginning",
            "--max-messages",
            "50",
            "--timeout-ms",
            "20000",
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
        check=True,
    )
    printed = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert len(printed) == 50
    assert sorted((p["partition"], p["offset"]) for p in printed) == [r[:2] for r in from_kafka]


def test_sparklog_producer_to_kafka_client(brokers: Cluster) -> None:
    bootstrap = brokers.kafka_bootstrap
    address = f"sparklog://{brokers.bootstrap}"
    Admin(address).create_topic("s2k", 3)
    producer = SlProducer(address)
    for i in range(60):
        producer.send(
            "s2k",
            key=f"key{i}".encode(),
            value=None if i % 7 == 0 else f"v{i}".encode(),
            headers=[("n", str(i).encode())],
            timestamp_ms=STAMP + i,
        )
    producer.flush()
    producer.close()
    from_kafka = kafka_records(bootstrap, "s2k", 3, 60)
    assert from_kafka == sparklog_records(address, "s2k", 60)
    assert sorted(r[2] for r in from_kafka) == sorted(f"key{i}".encode() for i in range(60))


def test_group_offsets_are_shared_and_described_with_lag(brokers: Cluster) -> None:
    bootstrap = brokers.kafka_bootstrap
    address = f"sparklog://{brokers.bootstrap}"
    create(bootstrap, "shared", 1)
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(30):
        producer.produce("shared", value=f"v{i}".encode())
    assert producer.flush(30) == 0
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "mixed",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe(["shared"])
    seen: list[bytes] = []

    def ten() -> bool:
        msg = consumer.poll(0.2)
        if msg is not None and msg.error() is None:
            seen.append(msg.value())
        return len(seen) >= 10

    wait_for(ten, what="ten records")
    consumer.commit(offsets=[TopicPartition("shared", 0, 10)], asynchronous=False)
    consumer.close()

    described = Admin(address).describe_group("mixed")
    assert [(p.partition, p.committed, p.lag) for p in described.lag] == [(0, 10, 20)]
    cli = subprocess.run(
        [sys.executable, "-m", "sparklog.cli", "--address", address, "groups", "describe", "mixed"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
        check=True,
    )
    assert "20" in cli.stdout and "shared" in cli.stdout

    resumed = SlConsumer(address, group_id="mixed")
    resumed.subscribe(["shared"])
    rest: list = []
    deadline = time.monotonic() + 60
    while len(rest) < 20 and time.monotonic() < deadline:
        rest += resumed.poll_records(timeout_ms=200)
    resumed.close()
    assert [r.offset for r in rest] == list(range(10, 30))


def test_one_group_mixes_kafka_and_sparklog_members(brokers: Cluster) -> None:
    import threading

    bootstrap = brokers.kafka_bootstrap
    address = f"sparklog://{brokers.bootstrap}"
    create(bootstrap, "mixed-topic", 4)
    native = SlConsumer(
        address, group_id="mixed2", session_timeout_ms=6000, heartbeat_interval_ms=300
    )
    native.subscribe(["mixed-topic"])
    stop = threading.Event()

    def keep_polling() -> None:
        while not stop.is_set():
            native.poll(timeout_ms=100)

    poller = threading.Thread(target=keep_polling)
    poller.start()
    kafka = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "mixed2",
            "partition.assignment.strategy": "range",
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 300,
        }
    )
    kafka.subscribe(["mixed-topic"])
    try:

        def split() -> bool:
            kafka.poll(0.1)
            theirs = {tp.partition for tp in kafka.assignment()}
            ours = {tp.partition for tp in native.assignment()}
            return (
                bool(theirs) and bool(ours) and not theirs & ours and theirs | ours == set(range(4))
            )

        wait_for(split, what="a Kafka and a sparklog member splitting the partitions")
        described = Admin(address).describe_group("mixed2")
        assert len(described.members) == 2
    finally:
        stop.set()
        poller.join()
        kafka.close()
        native.close(autocommit=False)
