"""Streaming reads through real Spark (local[2]): triggers, rate limits, groups, data loss."""

# ruff: noqa: F811  (pytest fixtures imported from spark_support are parameters here)

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from chispa import assert_df_equality
from pyspark.errors import PySparkException

from sparklog.errors import SparkOptionError
from sparklog.spark.compat import HAS_ADMISSION_CONTROL
from sparklog.spark.offsets import TOPIC_IDS_KEY
from sparklog.spark.schema import source_schema
from sparklog.spark.source import SparklogDataSource
from sparklog.storage import make_batch, open_root
from sparklog.storage.maintenance import apply_retention
from tests.spark.spark_data import BASE_TS_MS, fill, stored_rows
from tests.spark.spark_support import (  # noqa: F401
    source_options,
    spark,
    spark_root,
    wait_for,
)

#: rate limits need the admission control of pyspark >= 4.2; older ones refuse them (see below)
with_admission_control = pytest.mark.skipif(
    not HAS_ADMISSION_CONTROL, reason="pyspark < 4.2 has no admission control: limits are refused"
)


def stream(spark: Any, url: str, storage: dict | None = None, **options: str) -> Any:
    return (
        spark.readStream.format("sparklog")
        .options(**source_options(url, storage or {}))
        .options(**options)
        .load()
    )


def to_memory(df: Any, checkpoint: Path, trigger: dict[str, Any]) -> tuple[Any, str]:
    name = f"q_{uuid.uuid4().hex[:8]}"
    query = (
        df.writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", str(checkpoint))
        .trigger(**trigger)
        .start()
    )
    return query, name


def run_available_now(spark: Any, df: Any, checkpoint: Path) -> tuple[list[Any], str]:
    query, name = to_memory(df, checkpoint, {"availableNow": True})
    query.awaitTermination(180)
    assert query.exception() is None, query.exception()
    batches = [p for p in query.recentProgress if p["numInputRows"] > 0]
    return batches, name


def end_offsets(progress: Any) -> dict[str, dict[str, int]]:
    raw = progress["sources"][0]["endOffset"]
    doc = json.loads(raw) if isinstance(raw, str) else raw
    return {topic: parts for topic, parts in doc.items() if topic != TOPIC_IDS_KEY}


def positions(spark: Any, table: str) -> list[tuple[int, int]]:
    return sorted((r.partition, r.offset) for r in spark.table(table).collect())


def test_available_now_reads_everything_once(spark, spark_root, tmp_path) -> None:
    url, storage = spark_root
    root = open_root(url, storage)
    fill(root, "t", partitions=3, batches=2, per_batch=10)
    df = stream(
        spark, url, storage, subscribe="t", startingOffsets="earliest", includeHeaders="true"
    )
    batches, table = run_available_now(spark, df, tmp_path / "ck")
    assert len(batches) == 1
    got = spark.table(table).orderBy("partition", "offset")
    expected = spark.createDataFrame(stored_rows(root, "t"), source_schema(None, True))
    assert_df_equality(got, expected.orderBy("partition", "offset"))


@with_admission_control
def test_max_offsets_per_trigger_is_split_by_backlog(spark, spark_root, tmp_path) -> None:
    url, storage = spark_root
    root = open_root(url, storage)
    fill(root, "t", partitions=2, batches=6, per_batch=10)  # both partitions: 60
    root.topic("t").append(0, make_batch([b"x"] * 120))  # partition 0: 180, partition 1: 60
    df = stream(
        spark, url, storage, subscribe="t", startingOffsets="earliest", maxOffsetsPerTrigger="80"
    )
    batches, table = run_available_now(spark, df, tmp_path / "ck")
    assert [b["numInputRows"] for b in batches] == [80, 80, 80]
    assert end_offsets(batches[0]) == {"t": {"0": 60, "1": 20}}
    assert len(positions(spark, table)) == 240 == len(set(positions(spark, table)))


@with_admission_control
def test_max_bytes_per_trigger_bounds_each_batch(spark, tmp_path) -> None:
    url = f"file://{tmp_path}/root"
    root = open_root(url)
    fill(root, "t", partitions=1, batches=8, per_batch=50)
    total_bytes = sum(s.size_bytes for s in root.topic("t").partition(0).segments())
    budget = total_bytes // 4
    df = stream(
        spark, url, subscribe="t", startingOffsets="earliest", maxBytesPerTrigger=str(budget)
    )
    batches, table = run_available_now(spark, df, tmp_path / "ck")
    assert 4 <= len(batches) <= 5
    sizes = [b["numInputRows"] for b in batches]
    # Bytes are prorated over each segment's records, so batches are about, not exactly, equal.
    assert all(90 <= n <= 110 for n in sizes[:-1]) and sum(sizes) == 400, sizes
    assert positions(spark, table) == [(0, o) for o in range(400)]


@with_admission_control
def test_trigger_once_ignores_rate_limits(spark, tmp_path) -> None:
    url = f"file://{tmp_path}/root"
    fill(open_root(url), "t", partitions=2, batches=2, per_batch=10)
    df = stream(spark, url, subscribe="t", startingOffsets="earliest", maxOffsetsPerTrigger="5")
    query, _ = to_memory(df, tmp_path / "ck", {"once": True})
    query.awaitTermination(120)
    assert [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]] == [40]


def test_processing_time_follows_new_records_and_new_partitions(spark, tmp_path) -> None:
    url = f"file://{tmp_path}/root"
    root = open_root(url)
    fill(root, "t", partitions=2, batches=1, per_batch=5)
    df = stream(spark, url, subscribe="t")  # startingOffsets=latest: only new records
    query, table = to_memory(df, tmp_path / "ck", {"processingTime": "200 milliseconds"})
    try:
        wait_for(lambda: query.lastProgress is not None, what="the first trigger")
        fill(root, "t", batches=1, per_batch=5, create=False)
        wait_for(lambda: spark.table(table).count() == 10, what="the new records")
        root.add_partitions("t", 3)
        fill(root, "t", batches=1, per_batch=3, create=False)
        wait_for(lambda: spark.table(table).count() == 19, what="the new partition's records")
    finally:
        query.stop()
    got = positions(spark, table)
    assert got == sorted([(p, o) for p in (0, 1) for o in range(5, 13)] + [(2, 0), (2, 1), (2, 2)])


@with_admission_control
def test_min_offsets_per_trigger_waits_for_records_or_max_trigger_delay(spark, tmp_path) -> None:
    url = f"file://{tmp_path}/root"
    root = open_root(url)
    root.create_topic("t", 1)
    delay_s = 6
    df = stream(
        spark,
        url,
        subscribe="t",
        startingOffsets="earliest",
        minOffsetsPerTrigger="50",
        maxTriggerDelay=f"{delay_s}s",
    )
    query, table = to_memory(df, tmp_path / "ck", {"processingTime": "100 milliseconds"})
    try:
        fill(root, "t", batches=1, per_batch=60, create=False)
        wait_for(lambda: spark.table(table).count() == 60, what="a full batch")
        first_batch = time.monotonic()
        fill(root, "t", batches=1, per_batch=10, create=False)  # below the minimum: waits
        wait_for(lambda: spark.table(table).count() == 70, what="the delayed batch")
        assert time.monotonic() - first_batch >= delay_s - 1
        delayed = time.monotonic()
        fill(root, "t", batches=1, per_batch=60, create=False)  # enough records: at once
        wait_for(lambda: spark.table(table).count() == 130, what="the next full batch")
        assert time.monotonic() - delayed < delay_s
    finally:
        query.stop()


def test_checkpoint_resumes_where_it_stopped(spark, tmp_path) -> None:
    url = f"file://{tmp_path}/root"
    root = open_root(url)
    fill(root, "t", partitions=2, batches=1, per_batch=10)
    df = stream(spark, url, subscribe="t", startingOffsets="earliest")
    out = str(tmp_path / "out")

    def run() -> list[tuple[int, int]]:
        query = (
            df.select("partition", "offset")
            .writeStream.format("parquet")
            .option("path", out)
            .option("checkpointLocation", str(tmp_path / "ck"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
        assert query.exception() is None
        return sorted((r.partition, r.offset) for r in spark.read.parquet(out).collect())

    assert run() == [(p, o) for p in (0, 1) for o in range(10)]
    fill(root, "t", batches=1, per_batch=7, create=False)
    assert run() == [(p, o) for p in (0, 1) for o in range(17)]  # each record once


@pytest.mark.skipif(
    not HAS_ADMISSION_CONTROL,
    reason="pyspark < 4.2: the group's offsets are recorded when the next batch is planned",
)
def test_groups_commit_offsets_and_new_queries_start_there(spark, spark_root, tmp_path) -> None:
    url, storage = spark_root
    root = open_root(url, storage)
    fill(root, "t", partitions=2, batches=1, per_batch=10)
    for group in ("g1", "g2"):  # two groups each see every record
        df = stream(spark, url, storage, subscribe="t", startingOffsets="earliest", group=group)
        _, table = run_available_now(spark, df, tmp_path / f"ck-{group}")
        assert len(positions(spark, table)) == 20
        committed = root.groups.fetch(group)
        assert {tp: c.offset for tp, c in committed.items()} == {("t", 0): 10, ("t", 1): 10}
    fill(root, "t", batches=1, per_batch=4, create=False)
    # No checkpoint: g1 resumes from its committed offsets, not from startingOffsets.
    df = stream(spark, url, storage, subscribe="t", startingOffsets="earliest", group="g1")
    _, table = run_available_now(spark, df, tmp_path / "ck-g1-new")
    assert positions(spark, table) == [(p, o) for p in (0, 1) for o in range(10, 14)]
    assert {c.offset for c in root.groups.fetch("g1").values()} == {14}
    assert {c.offset for c in root.groups.fetch("g2").values()} == {10}


def test_kafka_group_id_records_progress_but_new_queries_start_at_starting_offsets(
    spark, tmp_path
) -> None:
    """kafka.group.id keeps Kafka's meaning (docs/spark.md): it never moves a new query's start."""
    url = f"file://{tmp_path}/root"
    root = open_root(url)
    fill(root, "t", partitions=2, batches=1, per_batch=10)
    group = {"kafka.group.id": "kg"}
    df = stream(spark, url, subscribe="t", startingOffsets="earliest", **group)
    _, table = run_available_now(spark, df, tmp_path / "ck-1")
    assert len(positions(spark, table)) == 20
    if HAS_ADMISSION_CONTROL:  # older Spark records it when the next batch is planned
        assert {c.offset for c in root.groups.fetch("kg").values()} == {10}
    fill(root, "t", batches=1, per_batch=4, create=False)
    # A fresh checkpoint to reprocess: startingOffsets decides, as with Spark's Kafka source.
    df = stream(spark, url, subscribe="t", startingOffsets="earliest", **group)
    _, table = run_available_now(spark, df, tmp_path / "ck-2")
    assert positions(spark, table) == [(p, o) for p in (0, 1) for o in range(14)]
    if HAS_ADMISSION_CONTROL:
        assert {c.offset for c in root.groups.fetch("kg").values()} == {14}


def test_a_topic_dropped_from_subscribe_is_not_reported_deleted(spark, tmp_path) -> None:
    """Restarting with fewer topics: fine when all was read; else the loss is named right."""
    url = f"file://{tmp_path}/root"
    root = open_root(url)
    for topic in ("a", "b", "c"):
        fill(root, topic, partitions=1, batches=1, per_batch=5)
    out = str(tmp_path / "out")

    def run(subscribe: str, **options: str) -> Any:
        query = (
            stream(spark, url, subscribe=subscribe, startingOffsets="earliest", **options)
            .select("topic", "offset")
            .writeStream.format("parquet")
            .option("path", out)
            .option("checkpointLocation", str(tmp_path / "ck"))
            .trigger(availableNow=True)
            .start()
        )
        try:
            query.awaitTermination(120)
        except PySparkException as exc:
            return exc
        return None

    def read() -> list[tuple[str, int]]:
        return sorted((r.topic, r.offset) for r in spark.read.parquet(out).collect())

    assert run("a,b,c") is None and len(read()) == 15
    fill(root, "a", batches=1, per_batch=3, create=False)
    failed = run("a,c")
    assert failed is None, str(failed)  # b was read to its end: dropping it loses nothing
    assert [x for x in read() if x[0] == "a"] == [("a", o) for o in range(8)]
    fill(root, "c", batches=1, per_batch=2, create=False)  # unread when c is dropped
    failure = run("a")
    message = str(failure)
    assert "c-0 is no longer subscribed" in message and "offsets 5-6" in message, message
    assert "topic deleted" not in message
    fill(root, "a", batches=1, per_batch=1, create=False)
    assert run("a", failOnDataLoss="false") is None
    if not HAS_ADMISSION_CONTROL:  # Spark 4.0/4.1's AvailableNow: a run after a failed batch
        assert run("a", failOnDataLoss="false") is None  # completes only that batch
    assert [x for x in read() if x[0] == "a"] == [("a", o) for o in range(9)]
    assert len(read()) == 19  # c's records 5-6 were never read


@pytest.mark.skipif(HAS_ADMISSION_CONTROL, reason="pyspark >= 4.2 honours the rate limits")
def test_rate_limits_are_refused_where_spark_has_no_admission_control(spark, tmp_path) -> None:
    """pyspark 4.0/4.1: each rate limit is refused naming Spark 4.2, never ignored."""
    url = f"file://{tmp_path}/root"
    fill(open_root(url), "t", partitions=1, batches=1, per_batch=3)
    df = stream(spark, url, subscribe="t", startingOffsets="earliest", maxOffsetsPerTrigger="1")
    query, _ = to_memory(df, tmp_path / "ck", {"availableNow": True})
    with pytest.raises(PySparkException, match=r"'maxOffsetsPerTrigger' needs Spark 4\.2"):
        query.awaitTermination(120)
    schema = source_schema(None, False)
    for key, value in (
        ("minOffsetsPerTrigger", "5"),
        ("maxTriggerDelay", "5s"),
        ("maxBytesPerTrigger", "4096"),
    ):
        source = SparklogDataSource({"root": url, "subscribe": "t", key: value})
        with pytest.raises(SparkOptionError, match=rf"option '{key}' needs Spark 4\.2 or newer"):
            source.streamReader(schema)


def test_fail_on_data_loss_in_a_stream(spark, tmp_path) -> None:
    url = f"file://{tmp_path}/root"
    root = open_root(url)
    fill(root, "t", partitions=1, batches=3, per_batch=10)
    log = root.topic("t").partition(0)
    config = {**root.topic("t").info.effective_config, "retention.ms": 1}
    apply_retention(log, config, now=BASE_TS_MS + 10**12)
    assert root.topic("t").partition(0).log_start_offset > 0
    strict = stream(spark, url, subscribe="t", startingOffsets='{"t":{"0":0}}')
    query, _ = to_memory(strict, tmp_path / "ck-strict", {"availableNow": True})
    with pytest.raises(PySparkException, match=r"records 0-\d+ of t-0 were removed"):
        query.awaitTermination(120)
    lenient = stream(
        spark, url, subscribe="t", startingOffsets='{"t":{"0":0}}', failOnDataLoss="false"
    )
    _, table = run_available_now(spark, lenient, tmp_path / "ck-lenient")
    start = root.topic("t").partition(0).log_start_offset
    assert positions(spark, table) == [(0, o) for o in range(start, 30)]


def test_streaming_refuses_batch_only_options(spark, tmp_path) -> None:
    url = f"file://{tmp_path}/root"
    fill(open_root(url), "t", partitions=1, batches=1, per_batch=1)
    with pytest.raises(PySparkException, match="for batch queries only"):
        df = stream(spark, url, subscribe="t", endingOffsets="latest")
        query, _ = to_memory(df, tmp_path / "ck", {"availableNow": True})
        query.awaitTermination(60)
