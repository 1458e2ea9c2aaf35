"""The metrics endpoint names no tenant's topic or group on a broker that authenticates (#38.10).

The endpoint asks no one who they are. On a broker whose Kafka listener takes
SASL users, its series are summed over topics, groups and partitions unless
``metrics_resource_names = "shown"`` says the operator wants the names; a
broker where no listener authenticates (development) shows them as before.
"""

from __future__ import annotations

import pathlib
import urllib.request
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer

from sparklog.security import users
from sparklog.storage.catalog import open_root
from tests.support.brokers import Cluster

TOPIC, GROUP = "alice-payroll", "alice-payroll-readers"
AUTH = {
    "security.protocol": "SASL_PLAINTEXT",
    "sasl.mechanism": "PLAIN",
    "sasl.username": "alice",
    "sasl.password": "alice-Pa55",
}


def _scrape(tmp_path: pathlib.Path, sasl: bool, **config: Any) -> str:
    """The metrics text after alice produced to TOPIC and read it in GROUP."""
    root = f"file://{tmp_path}/root"
    users.create(open_root(root, create=True).metadata, "alice", "SCRAM-SHA-256", "alice-Pa55")
    cluster = Cluster(tmp_path, root)
    auth = AUTH if sasl else {}
    if sasl:
        config["kafka_security_protocol"] = "SASL_PLAINTEXT"
    broker = cluster.start(0, **config)
    try:
        producer = Producer({"bootstrap.servers": cluster.kafka_bootstrap, **auth})
        producer.produce(TOPIC, b"salary")
        assert producer.flush(30) == 0
        consumer = Consumer(
            {"bootstrap.servers": cluster.kafka_bootstrap, "group.id": GROUP,
             "auto.offset.reset": "earliest", **auth}
        )  # fmt: skip
        consumer.subscribe([TOPIC])
        got = None
        for _ in range(120):
            got = consumer.poll(0.5)
            if got is not None and got.error() is None:
                break
        assert got is not None and got.value() == b"salary"
        consumer.commit(asynchronous=False)
        consumer.close()
        url = f"http://127.0.0.1:{broker.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=30) as answer:
            return str(answer.read().decode())
    finally:
        cluster.stop_all()


def _value(text: str, series: str) -> float:
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(series + " ") or line.startswith(series + "{")
    )


def test_a_broker_that_authenticates_names_no_topic_or_group(tmp_path: pathlib.Path) -> None:
    text = _scrape(tmp_path, sasl=True)
    assert TOPIC not in text and GROUP not in text
    assert "sparklog_produce_records_total 1.0" in text.splitlines()
    assert _value(text, "sparklog_fetch_records_total") >= 1


@pytest.mark.parametrize("sasl", [True, False])
def test_names_are_shown_when_the_key_says_or_no_listener_authenticates(
    tmp_path: pathlib.Path, sasl: bool
) -> None:
    config = {"metrics_resource_names": "shown"} if sasl else {}
    text = _scrape(tmp_path, sasl=sasl, **config)
    assert f'sparklog_produce_records_total{{topic="{TOPIC}"}} 1.0' in text.splitlines()
