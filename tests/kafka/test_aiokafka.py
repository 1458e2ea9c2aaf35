"""aiokafka: produce and consume with headers and each codec; offsets by timestamp."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from tests.support.brokers import Cluster

BASE_MS = 1_690_000_000_000


async def round_trip(bootstrap: str, codec: str | None) -> None:
    topic = f"aio-{codec or 'none'}"
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, 2, 1)])
    finally:
        await admin.close()
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, compression_type=codec, acks="all")
    await producer.start()
    try:
        batch = []
        for i in range(40):
            batch.append(
                await producer.send(
                    topic,
                    key=f"k{i}".encode(),
                    value=f"v{i}".encode() * 20,
                    headers=[("i", str(i).encode()), ("codec", (codec or "none").encode())],
                    timestamp_ms=BASE_MS + i * 1000,
                    partition=0,
                )
            )
        metadata = await asyncio.gather(*batch)
    finally:
        await producer.stop()
    assert [m.offset for m in metadata] == list(range(40))

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest")
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        got = []
        while len(got) < 40:
            records = await consumer.getmany(tp, timeout_ms=1000)
            got += records.get(tp, [])
        assert [(r.offset, r.key, r.value, r.timestamp) for r in got] == [
            (i, f"k{i}".encode(), f"v{i}".encode() * 20, BASE_MS + i * 1000) for i in range(40)
        ]
        assert [list(r.headers) for r in got] == [
            [("i", str(i).encode()), ("codec", (codec or "none").encode())] for i in range(40)
        ]
        found = await consumer.offsets_for_times({tp: BASE_MS + 10_500})
        assert (found[tp].offset, found[tp].timestamp) == (11, BASE_MS + 11_000)
        beyond = await consumer.offsets_for_times({tp: BASE_MS + 10_000_000})
        assert beyond[tp] is None
        assert await consumer.beginning_offsets([tp]) == {tp: 0}
        assert await consumer.end_offsets([tp]) == {tp: 40}
    finally:
        await consumer.stop()


@pytest.mark.parametrize("codec", [None, "gzip", "snappy", "lz4", "zstd"])
def test_aiokafka_round_trip(brokers: Cluster, codec: str | None) -> None:
    asyncio.run(round_trip(brokers.kafka_bootstrap, codec))
