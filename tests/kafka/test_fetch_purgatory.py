"""Long-poll Fetches hold no request thread (issue 36 item 4: Kafka's fetch purgatory).

A Fetch waiting for records (``max_wait_ms``, ``min_bytes``) is parked
(``broker_lite/kafka/fetch_waits.py``): more waiting consumers than the broker
has request threads (``num_io_threads``) leave another client's requests
answered at once, a produce to a partition wakes the fetches parked on it (not
their deadline), and a fetch with nothing to read is answered at its deadline.
An in-process broker on 127.0.0.1 and raw frames (``tests/kafka/wire.py``);
``fetch_refresh_ms`` is longer than any wait here, so only a commit or a deadline
can answer a parked fetch, and the purgatory's counts say which did.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData

from sparklog.broker_lite.config import load_config
from sparklog.broker_lite.server import start_broker, stop_broker
from tests.kafka.test_group_purgatory import _busy_request_threads
from tests.kafka.wire import Connection, metadata_of, record_batch_bytes
from tests.support.waiting import wait_for

REQUEST_THREADS = 2
CONSUMERS = 6
#: longer than the test: a parked fetch is answered by a commit, or fails the test
LONG_WAIT_MS = 30_000


@pytest.fixture(scope="module")
def broker() -> Iterator[tuple[Any, Any]]:
    """One in-process broker for the module: (server, broker)."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        config = {
            "root": f"file://{tmp}/root", "listen": "127.0.0.1:0", "metrics_listen": "",
            "kafka_listen": "127.0.0.1:0", "cleaner_interval_ms": 0,
            "num_io_threads": REQUEST_THREADS, "fetch_refresh_ms": 120_000,
        }  # fmt: skip
        server, broker = start_broker(load_config(None, config, env={}))[:2]
        try:
            yield server, broker
        finally:
            stop_broker(server, broker)


def _fetch(topic: str, partitions: list[int], wait_ms: int) -> FetchRequest:
    return FetchRequest(
        max_wait=timedelta(milliseconds=wait_ms),
        min_bytes=1,  # type: ignore[arg-type]
        topics=(
            FetchTopic(
                topic=topic,
                partitions=tuple(
                    FetchPartition(
                        partition=p,  # type: ignore[arg-type]
                        fetch_offset=0,  # type: ignore[arg-type]
                        partition_max_bytes=1 << 20,  # type: ignore[arg-type]
                    )
                    for p in partitions
                ),
            ),
        ),
        forgotten_topics_data=(),
    )


def _produce(topic: str, partition: int, value: bytes) -> ProduceRequest:
    return ProduceRequest(
        transactional_id=None,
        acks=-1,  # type: ignore[arg-type]
        timeout=timedelta(seconds=10),  # type: ignore[arg-type]
        topic_data=(
            TopicProduceData(
                name=topic,
                partition_data=(
                    PartitionProduceData(
                        index=partition,  # type: ignore[arg-type]
                        records=record_batch_bytes([value]),
                    ),
                ),
            ),
        ),
    )


@contextlib.contextmanager
def _connections(address: str, count: int) -> Iterator[list[Connection]]:
    conns = [Connection(address) for _ in range(count)]
    try:
        yield conns
    finally:
        for conn in conns:
            conn.close()


def test_parked_fetches_leave_the_pool_free_and_a_produce_wakes_them(
    broker: tuple[Any, Any],
) -> None:
    server, real = broker
    real.create_topic("polled", 2)
    real.create_topic("other", 1)
    address = real.cluster.kafka_address or ""
    before = dict(server.kafka.fetches.answered)
    request = _fetch("polled", [0, 1], LONG_WAIT_MS)
    with _connections(address, CONSUMERS) as consumers:
        for conn in consumers:  # more long-polls than request threads
            conn.send_frame(conn.encode(request))
        # every fetch parked (or, without parking, every request thread held by one)
        wait_for(
            lambda: (
                server.kafka.fetches.waiting() == CONSUMERS
                or len(_busy_request_threads()) == REQUEST_THREADS
            ),
            what="the fetches waiting for records",
        )
        other = Connection(address, timeout_s=10)
        try:
            # another client is answered at once, a Metadata and a produce elsewhere
            metadata = other.call(metadata_of("other"))
            assert [t.error_code for t in metadata.topics] == [0]
            assert server.kafka.fetches.waiting() == CONSUMERS
            assert _busy_request_threads() == []  # no request thread waits for records
            elsewhere = other.call(_produce("other", 0, b"elsewhere"))
            assert elsewhere.responses[0].partition_responses[0].error_code == 0
            assert server.kafka.fetches.waiting() == CONSUMERS  # not woken by "other"
            # a produce to partition 1 wakes every fetch parked on it
            woke = other.call(_produce("polled", 1, b"wake"))
            assert woke.responses[0].partition_responses[0].error_code == 0
        finally:
            other.close()
        for conn in consumers:
            answer = conn.answer(request)
            parts = {p.partition_index: p for p in answer.responses[0].partitions}
            assert parts[1].error_code == 0 and parts[1].high_watermark == 1
            assert b"wake" in bytes(parts[1].records or b"")
            assert not parts[0].records
    after = server.kafka.fetches.answered
    assert {k: after[k] - before[k] for k in after} == {
        "commit": CONSUMERS,
        "refresh": 0,
        "expired": 0,
    }
    assert server.kafka.fetches.waiting() == 0


def test_a_parked_fetch_with_nothing_to_read_is_answered_at_its_deadline(
    broker: tuple[Any, Any],
) -> None:
    server, real = broker
    real.create_topic("quiet", 1)
    before = dict(server.kafka.fetches.answered)
    request = _fetch("quiet", [0], 50)
    with _connections(real.cluster.kafka_address or "", 1) as (conn,):
        answer = conn.call(request)
    part = answer.responses[0].partitions[0]
    assert part.error_code == 0 and part.high_watermark == 0 and not part.records
    after = server.kafka.fetches.answered
    assert after["expired"] - before["expired"] == 1
    assert after["commit"] == before["commit"]
    assert server.kafka.fetches.waiting() == 0
