"""Spark's format("sparklog") reads what a Kafka client wrote, and the reverse."""

# ruff: noqa: F811  (the spark fixture imported from spark_support is a parameter here)

from __future__ import annotations

import datetime as dt

import pytest
from confluent_kafka import Producer

from tests.kafka.test_interop import STAMP, create, kafka_records
from tests.spark.spark_support import source_options, spark  # noqa: F401
from tests.support.brokers import Cluster

pytestmark = pytest.mark.slow


def test_spark_reads_kafka_clients_records_and_kafka_reads_the_sink(
    spark, brokers: Cluster
) -> None:
    bootstrap = brokers.kafka_bootstrap
    root = brokers.root
    create(bootstrap, "k2spark", 2)
    producer = Producer({"bootstrap.servers": bootstrap, "compression.type": "zstd"})
    for i in range(30):
        producer.produce(
            "k2spark",
            key=f"k{i}".encode(),
            value=None if i == 4 else f"v{i}".encode(),
            headers=[("h", str(i).encode())],
            timestamp=STAMP + i,
            partition=i % 2,
        )
    assert producer.flush(30) == 0
    from_kafka = kafka_records(bootstrap, "k2spark", 2, 30)
    rows = (
        spark.read.format("sparklog")
        .options(**source_options(root, {}))
        .option("subscribe", "k2spark")
        .option("includeHeaders", "true")
        .load()
        .collect()
    )
    from_spark = sorted(
        (
            r["partition"],
            r["offset"],
            r["key"],
            r["value"],
            int(r["timestamp"].replace(tzinfo=dt.UTC).timestamp() * 1000),
            [(h["key"], h["value"]) for h in r["headers"] or []],
        )
        for r in rows
    )
    assert from_spark == from_kafka

    create(bootstrap, "spark2k", 1)
    stamp = dt.datetime(2024, 5, 1, 12, 0, 0, 123000, tzinfo=dt.UTC)
    df = spark.createDataFrame(
        [(f"k{i}".encode(), f"v{i}".encode(), stamp, [("h", b"x")]) for i in range(10)],
        "key binary, value binary, timestamp timestamp, "
        "headers array<struct<key:string,value:binary>>",
    )
    df.write.format("sparklog").options(**source_options(root, {})).option("topic", "spark2k").mode(
        "append"
    ).save()
    written = kafka_records(bootstrap, "spark2k", 1, 10)
    assert sorted((r[2], r[3], r[4], r[5]) for r in written) == sorted(
        (f"k{i}".encode(), f"v{i}".encode(), int(stamp.timestamp() * 1000), [("h", b"x")])
        for i in range(10)
    )
    assert [r[1] for r in written] == list(range(10))
