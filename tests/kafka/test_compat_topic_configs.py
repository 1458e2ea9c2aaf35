"""Kafka topic configs with a meaning here are honoured (issue 39): the timestamp window
(``message.timestamp.before.max.ms`` / ``after.max.ms``, and Kafka 3's deprecated
``message.timestamp.difference.max.ms``) refuses records at produce with INVALID_TIMESTAMP,
through Kafka's protocol, sparklog's Flight client and an embedded root alike."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from sparklog.client.admin import Admin
from sparklog.client.producer import Producer as SparklogProducer
from sparklog.errors import InvalidTimestampError
from tests.support.brokers import Cluster

HOUR_MS = 3_600_000


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _produce_outcomes(bootstrap: str, topic: str, stamps: list[int]) -> list[int]:
    """Each record's delivery error code (0: written), produced with the given timestamps."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    codes: dict[int, int] = {}
    for index, stamp in enumerate(stamps):

        def done(err, _msg, index=index) -> None:
            codes[index] = err.code() if err is not None else 0

        # one request per record: a refused record fails its batch, as in Kafka
        producer.produce(topic, value=b"v%d" % index, timestamp=stamp, on_delivery=done)
        assert producer.flush(30) == 0
    return [codes[i] for i in range(len(stamps))]


def test_timestamp_window_refuses_at_produce(brokers: Cluster) -> None:
    admin = AdminClient({"bootstrap.servers": brokers.kafka_bootstrap})
    windowed, deprecated, appended = unique("window"), unique("difference"), unique("append")
    topics = [
        NewTopic(windowed, 1, 1, config={"message.timestamp.before.max.ms": str(HOUR_MS)}),
        NewTopic(deprecated, 1, 1, config={"message.timestamp.difference.max.ms": str(HOUR_MS)}),
        NewTopic(
            appended,
            1,
            1,
            config={
                "message.timestamp.before.max.ms": "0",
                "message.timestamp.type": "LogAppendTime",
            },
        ),
    ]
    for future in admin.create_topics(topics).values():
        future.result(timeout=30)
    for topic in (windowed, deprecated, appended):
        brokers.wait_listed(topic)
    now = int(time.time() * 1000)
    day_ago, two_hours_ahead, minute_ago = now - 24 * HOUR_MS, now + 2 * HOUR_MS, now - 60_000
    invalid = KafkaError.INVALID_TIMESTAMP
    # before.max.ms set: a day old is refused; the default after.max.ms (1 h) refuses 2 h ahead
    assert _produce_outcomes(
        brokers.kafka_bootstrap, windowed, [minute_ago, day_ago, two_hours_ahead]
    ) == [0, invalid, invalid]
    # the deprecated difference stands in for both when they are not set
    assert _produce_outcomes(
        brokers.kafka_bootstrap, deprecated, [minute_ago, day_ago, two_hours_ahead]
    ) == [0, invalid, invalid]
    # LogAppendTime stamps the write time: never outside the window
    assert _produce_outcomes(brokers.kafka_bootstrap, appended, [day_ago, two_hours_ahead]) == [
        0,
        0,
    ]


@pytest.mark.parametrize("mode", ["embedded", "flight"])
def test_timestamp_window_in_sparklog_clients(mode: str, tmp_path, request) -> None:
    if mode == "flight":
        cluster = request.getfixturevalue("one_broker")
        address = f"127.0.0.1:{cluster.brokers[0].port}"
    else:
        address = str(tmp_path / "root")
    with Admin(address) as admin:
        admin.create_topic("ticks", 1, {"message.timestamp.after.max.ms": "60000"})
    now = int(time.time() * 1000)
    with SparklogProducer(address) as producer:
        producer.send("ticks", b"now").get()
        producer.send("ticks", b"old", timestamp_ms=now - 365 * 24 * HOUR_MS).get()
        with pytest.raises(InvalidTimestampError) as refused:
            producer.send("ticks", b"ahead", timestamp_ms=now + 10 * 60_000).get()
    text = str(refused.value)
    assert "message.timestamp.after.max.ms=60000" in text and str(now + 10 * 60_000) in text
    assert refused.value.code == "INVALID_TIMESTAMP"
