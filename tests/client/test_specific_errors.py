"""Specific conditions raise specific classes (docs/architecture.md, "Errors"), each still a
``SparklogError``: a closed client is an illegal state (Kafka's clients'
``IllegalStateException``), a bad GC grace is a configuration error, a staged object too
old to commit says so."""

from __future__ import annotations

import pytest

from sparklog import Consumer, Producer
from sparklog.client.transports.flight_client import BrokerClient
from sparklog.errors import (
    IllegalStateError,
    InvalidConfigurationError,
    SparklogError,
    StagedObjectExpiredError,
)
from sparklog.storage import make_batch, open_root
from sparklog.storage.log import STAGED_OBJECT_MAX_AGE_MS
from sparklog.storage.maintenance import collect_garbage


def test_a_closed_producer_is_an_illegal_state(tmp_path) -> None:
    url = f"file://{tmp_path}/root"
    open_root(url).create_topic("t", 1)
    producer = Producer(url)
    producer.close()
    with pytest.raises(IllegalStateError, match="producer is closed") as info:
        producer.send("t", b"late")
    assert isinstance(info.value, SparklogError)
    assert not info.value.retriable


def test_a_closed_consumer_is_an_illegal_state(tmp_path) -> None:
    url = f"file://{tmp_path}/root"
    open_root(url).create_topic("t", 1)
    consumer = Consumer(url)
    consumer.assign([("t", 0)])
    consumer.close()
    with pytest.raises(IllegalStateError, match="consumer is closed"):
        consumer.poll(timeout_ms=0)


def test_a_closed_broker_client_is_an_illegal_state() -> None:
    client = BrokerClient("127.0.0.1:1", discover=False)
    client.close()
    with pytest.raises(IllegalStateError, match="broker client is closed"):
        client._conn("127.0.0.1:1")


def test_a_gc_grace_below_the_staged_limit_is_a_config_error(tmp_path) -> None:
    root = open_root(f"file://{tmp_path}/root")
    root.create_topic("t", 1)
    with pytest.raises(InvalidConfigurationError, match="gc grace"):
        collect_garbage(root.topic("t"), STAGED_OBJECT_MAX_AGE_MS - 1)


def test_a_staged_object_too_old_to_commit_says_so(tmp_path) -> None:
    root = open_root(f"file://{tmp_path}/root")
    root.create_topic("t", 1)
    topic = root.topic("t")
    staged = topic.write({0: make_batch([b"a"])})
    now = topic.shard(0).clock_ms()
    topic.shard(0).clock_ms = lambda: now + STAGED_OBJECT_MAX_AGE_MS + 1
    with pytest.raises(StagedObjectExpiredError, match="older than"):
        topic.commit(staged)
