"""Burrow 1.2 (Debian's ``burrow``, binary ``Burrow``) reports a group's lag from the
read-only ``__consumer_offsets`` (issue 24 item 7).

The test writes Burrow's config: one cluster and one consumer module pointing at
a sparklog broker's Kafka port, its HTTP server on a free loopback port, and
in-memory storage.  Burrow 1.2 cannot run without ZooKeeper (for its own locks;
there is no setting to turn it off), so it is given a real one: Debian's
ZooKeeper server (tests/support/zookeeper.py), one for the module.  Before the
topic existed Burrow exited at start (``failed to get partition count``).
Skipped, saying why, where Burrow or ZooKeeper is missing.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support import zookeeper as zk
from tests.support.brokers import Cluster
from tests.support.waiting import wait_for

TOPIC = "burrow-watched"
GROUP = "lagging-group"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def zookeeper() -> Iterator[str]:
    """A ZooKeeper server's ``host:port`` (skipped, saying why, where it cannot run)."""
    missing = zk.why_unavailable()
    if missing:
        pytest.skip(missing)
    with zk.running_zookeeper() as address:
        yield address


def start_burrow(
    workdir: Path, kafka: str, zookeeper: str, http_port: int, kafka_version: str
) -> Any:
    binary = shutil.which("Burrow") or shutil.which("burrow")
    if binary is None:
        pytest.skip("Burrow is not installed (Debian: burrow; .ci/system-packages)")
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "burrow.toml").write_text(
        f"""
[general]
pidfile="{workdir}/burrow.pid"
[logging]
level="info"
[zookeeper]
servers=["{zookeeper}"]
timeout=6
root-path="/burrow"
[client-profile.sparklog]
client-id="burrow-test"
kafka-version="{kafka_version}"
[cluster.local]
class-name="kafka"
servers=["{kafka}"]
client-profile="sparklog"
topic-refresh=1
offset-refresh=1
[consumer.local]
class-name="kafka"
cluster="local"
servers=["{kafka}"]
client-profile="sparklog"
[httpserver.default]
address="127.0.0.1:{http_port}"
[storage.default]
class-name="inmemory"
intervals=10
min-distance=0
"""
    )
    log = (workdir / "burrow.log").open("wb")
    return subprocess.Popen(
        [binary, "--config-dir", str(workdir)], stdout=log, stderr=subprocess.STDOUT
    )


def get(port: int, path: str) -> Any:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
            return json.loads(answer.read())
    except (OSError, ValueError):
        return None


@pytest.mark.slow
@pytest.mark.parametrize("kafka_version", ["0.8.2", "1.0.0"])
def test_burrow_lists_a_group_and_its_lag(
    kafka_cluster: Cluster, zookeeper: str, tmp_path: Path, kafka_version: str
) -> None:
    """Burrow's client profile picks sarama's protocol versions: 0.8.2
    reads with Fetch v0 and ListOffsets v0 (message sets of magic 0), 1.0.0 with record
    batches."""
    kafka_cluster.start(0, consumer_offsets_settle_ms=300)
    bootstrap = kafka_cluster.kafka_bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(timeout=30)
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(10):
        producer.produce(TOPIC, value=f"v{i}".encode(), partition=0)
    assert producer.flush(30) == 0

    port = free_port()
    burrow = start_burrow(tmp_path / "burrow", bootstrap, zookeeper, port, kafka_version)
    log = tmp_path / "burrow" / "burrow.log"
    try:

        def topic_offsets() -> Any:
            assert burrow.poll() is None, f"Burrow exited: {log.read_text()[-3000:]}"
            found = get(port, f"/v3/kafka/local/topic/{TOPIC}")
            return found is not None and found.get("offsets") == [10]

        wait_for(topic_offsets, timeout_s=60, what="Burrow to see the topic's 10 records")

        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP})
        try:  # 4 of 10 records consumed
            consumer.commit(offsets=[KafkaTopicPartition(TOPIC, 0, 4)], asynchronous=False)
        finally:
            consumer.close()

        def lag() -> Any:
            assert burrow.poll() is None, f"Burrow exited: {log.read_text()[-3000:]}"
            groups = get(port, "/v3/kafka/local/consumer")
            if groups is None or GROUP not in groups.get("consumers", []):
                return None
            found = get(port, f"/v3/kafka/local/consumer/{GROUP}/lag")
            return found and found.get("status", {}).get("totallag") == 6 and found["status"]

        status = wait_for(lag, timeout_s=60, what=f"Burrow to report {GROUP}'s lag")
        (partition,) = status["partitions"]
        assert (partition["topic"], partition["partition"]) == (TOPIC, 0)
        assert partition["current_lag"] == 6
    finally:
        burrow.terminate()
        try:
            burrow.wait(timeout=20)
        except subprocess.TimeoutExpired:
            burrow.kill()
            burrow.wait(timeout=20)
