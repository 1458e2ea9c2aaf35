"""Batch reads through real Spark (local[2]): schema, offsets, timestamps, pushdown, planning."""

# ruff: noqa: F811  (pytest fixtures imported from spark_support are parameters here)

from __future__ import annotations

import datetime as dt
from typing import Any

import pyarrow as pa
import pytest
from chispa import assert_df_equality
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame

from sparklog.spark.batch import SparklogPushdownReader
from sparklog.spark.compat import (
    HAS_FILTER_PUSHDOWN,
    EqualTo,
    GreaterThanOrEqual,
    In,
    LessThan,
)
from sparklog.spark.options import parse_source_options
from sparklog.spark.schema import source_schema
from sparklog.spark.source import SparklogDataSource
from sparklog.storage import make_batch, open_root
from sparklog.storage.maintenance import apply_retention
from tests.spark.spark_data import BASE_TS_MS, fill, stored_rows
from tests.spark.spark_support import (  # noqa: F401
    source_options,
    spark,
    spark_root,
)


def reader(spark: Any, url: str, storage: dict | None = None, **options: str) -> DataFrame:
    return spark.read.format("sparklog").options(**source_options(url, storage or {}), **options)


def expected(spark: Any, rows: list[dict], include_headers: bool = True) -> DataFrame:
    return spark.createDataFrame(rows, source_schema(None, include_headers))


def by_position(df: DataFrame) -> DataFrame:
    return df.orderBy("topic", "partition", "offset")


def test_registered_automatically_and_reads_every_record_exactly(spark, spark_root) -> None:
    url, storage = spark_root
    root = open_root(url, storage)
    count = fill(root, "events")
    df = reader(spark, url, storage, subscribe="events", includeHeaders="true").load()
    assert df.schema == source_schema(None, include_headers=True)
    assert df.count() == count
    assert_df_equality(by_position(df), by_position(expected(spark, stored_rows(root, "events"))))


def test_explicit_registration_works_too(spark, tmp_path) -> None:
    url = f"file://{tmp_path}/root"
    fill(open_root(url), "t", partitions=1, batches=1, per_batch=3)
    try:
        spark.dataSource.register(SparklogDataSource)
    except PySparkException as exc:  # Spark 4.0 will not replace the installed registration
        assert "DATA_SOURCE_ALREADY_EXISTS" in str(exc) and not HAS_FILTER_PUSHDOWN, exc
    assert reader(spark, url, subscribe="t").load().count() == 3


def test_without_headers_the_schema_is_kafkas(spark, tmp_path) -> None:
    url = f"file://{tmp_path}/root"
    root = open_root(url)
    fill(root, "t", partitions=2, batches=1, per_batch=5)
    df = reader(spark, url, subscribe="t").load()
    assert df.columns == [
        "key",
        "value",
        "topic",
        "partition",
        "offset",
        "timestamp",
        "timestampType",
    ]
    assert_df_equality(
        by_position(df), by_position(expected(spark, stored_rows(root, "t", False), False))
    )


def test_starting_and_ending_offsets_json(spark, tmp_path) -> None:
    url = f"file://{tmp_path}/root"
    root = open_root(url)
    fill(root, "t", partitions=2, batches=2, per_batch=10)
    df = reader(
        spark,
        url,
        subscribe="t",
        startingOffsets='{"t":{"0":5,"1":-2}}',
        endingOffsets='{"t":{"0":8,"1":-1}}',
    ).load()
    got = sorted((r.partition, r.offset) for r in df.select("partition", "offset").collect())
    assert got == [(0, o) for o in range(5, 8)] + [(1, o) for o in range(20)]


def test_offsets_json_must_name_every_partition(spark, tmp_path) -> None:
    url = f"file://{tmp_path}/root"
    fill(open_root(url), "t", partitions=2, batches=1, per_batch=2)
    with pytest.raises(PySparkException, match="it lacks t-1"):
        reader(spark, url, subscribe="t", startingOffsets='{"t":{"0":0}}').load().count()


def test_timestamps_select_offsets_like_kafka(spark, tmp_path) -> None:
    url = f"file://{tmp_path}/root"
    fill(open_root(url), "t", partitions=2, batches=1, per_batch=10)
    ts = BASE_TS_MS + 1000 * 3
    df = reader(
        spark, url, subscribe="t", startingTimestamp=str(ts), endingTimestamp=str(ts + 4000)
    )
    got = sorted((r.partition, r.offset) for r in df.load().collect())
    assert got == [(p, o) for p in (0, 1) for o in range(3, 7)]
    by_ts = reader(
        spark,
        url,
        subscribe="t",
        startingOffsetsByTimestamp=f'{{"t":{{"0":{ts},"1":{BASE_TS_MS}}}}}',
        endingOffsetsByTimestamp=f'{{"t":{{"0":{ts + 1000},"1":{BASE_TS_MS + 2000}}}}}',
    ).load()
    got = sorted((r.partition, r.offset) for r in by_ts.collect())
    assert got == [(0, 3), (1, 0), (1, 1)]


def test_starting_timestamp_after_every_record_fails_unless_strategy_latest(spark, tmp_path):
    url = f"file://{tmp_path}/root"
    fill(open_root(url), "t", partitions=1, batches=1, per_batch=3)
    late = str(BASE_TS_MS + 10**9)
    with pytest.raises(PySparkException, match="startingOffsetsByTimestampStrategy=latest"):
        reader(spark, url, subscribe="t", startingTimestamp=late).load().count()
    df = reader(
        spark,
        url,
        subscribe="t",
        startingTimestamp=late,
        startingOffsetsByTimestampStrategy="latest",
    )
    assert df.load().count() == 0


def test_pattern_and_assign(spark, tmp_path) -> None:
    url = f"file://{tmp_path}/root"
    root = open_root(url)
    for name in ("ev-a", "ev-b", "other"):
        fill(root, name, partitions=2, batches=1, per_batch=4)
    pattern = reader(spark, url, subscribePattern="ev-.*").load()
    assert sorted({r.topic for r in pattern.select("topic").collect()}) == ["ev-a", "ev-b"]
    assert pattern.count() == 16
    assign = reader(spark, url, assign='{"other":[1],"ev-a":[0]}').load()
    got = sorted({(r.topic, r.partition) for r in assign.collect()})
    assert got == [("ev-a", 0), ("other", 1)]


def test_filters_on_topic_partition_offset_are_exact(spark, tmp_path) -> None:
    url = f"file://{tmp_path}/root"
    root = open_root(url)
    fill(root, "a", partitions=3, batches=2, per_batch=10)
    fill(root, "b", partitions=1, batches=1, per_batch=10)
    df = reader(spark, url, subscribePattern="[ab]").load()
    filtered = df.filter(
        "topic = 'a' and partition in (0, 2) and offset >= 5 and offset < 12"
    ).select("partition", "offset")
    got = sorted((r.partition, r.offset) for r in filtered.collect())
    assert got == [(p, o) for p in (0, 2) for o in range(5, 12)]
    if HAS_FILTER_PUSHDOWN:  # pyspark >= 4.1; 4.0 applies every filter itself
        # Spark left no Filter on these columns: the source applied them (pushdown happened).
        plan = filtered._jdf.queryExecution().executedPlan().toString()
        filters = [line for line in plan.splitlines() if "Filter (" in line]
        columns = ("offset#", "partition#", "topic#")
        assert not any(c in line for line in filters for c in columns), plan
    ts = dt.datetime.fromtimestamp((BASE_TS_MS + 15_000) / 1000, tz=dt.UTC)
    late = df.filter(df.timestamp >= ts).filter("topic = 'a'").count()
    assert late == 3 * 5


@pytest.mark.skipif(not HAS_FILTER_PUSHDOWN, reason="filter pushdown arrives in pyspark 4.1")
def test_pushdown_prunes_ranges_and_segments(tmp_path) -> None:
    url = f"file://{tmp_path}/root"
    root = open_root(url)
    fill(root, "a", partitions=3, batches=4, per_batch=10)  # 4 segments of 10 per partition
    fill(root, "b", partitions=1, batches=1, per_batch=10)
    options = parse_source_options({"root": url, "subscribePattern": "[ab]"}, streaming=False)
    ts_filter = GreaterThanOrEqual(
        ("timestamp",), dt.datetime.fromtimestamp((BASE_TS_MS + 25_000) / 1000, dt.UTC)
    )
    filters = [
        EqualTo(("topic",), "a"),
        In(("partition",), (1, 2)),
        LessThan(("offset",), 35),
        ts_filter,
    ]
    pushed = SparklogPushdownReader(options, source_schema(None, False))
    remaining = list(pushed.pushFilters(filters))
    assert remaining == [ts_filter]  # timestamps are re-checked by Spark on the rows
    ranges = sorted(
        (r.topic, r.partition, r.start, r.end) for t in pushed.partitions() for r in t.ranges
    )
    # Segments [0,10) and [10,20) hold timestamps below the bound and are skipped.
    assert ranges == [("a", 1, 20, 35), ("a", 2, 20, 35)]


def test_min_partitions_and_byte_planning(spark, tmp_path) -> None:
    url = f"file://{tmp_path}/root"
    fill(open_root(url), "t", partitions=4, batches=2, per_batch=50)
    small = reader(spark, url, subscribe="t").load()
    assert small.rdd.getNumPartitions() == 1  # a small backlog is one task, not four
    split = reader(spark, url, subscribe="t", minPartitions="6").load()
    assert split.rdd.getNumPartitions() == 6
    assert split.count() == 400
    assert split.select("partition", "offset").distinct().count() == 400


def test_typed_topic_value_is_a_struct(spark, tmp_path) -> None:
    url = f"file://{tmp_path}/root"
    root = open_root(url)
    value_type = pa.struct([("id", pa.int64()), ("name", pa.string())])
    root.create_topic("typed", 1, value_type=value_type)
    root.topic("typed").append(
        0, make_batch([{"id": 1, "name": "a"}, {"id": 2, "name": None}], value_type=value_type)
    )
    df = reader(spark, url, subscribe="typed").load()
    assert df.schema["value"].dataType.simpleString() == "struct<id:bigint,name:string>"
    assert [(r.value.id, r.value.name) for r in df.orderBy("offset").collect()] == [
        (1, "a"),
        (2, None),
    ]


def test_log_append_time_topics_report_timestamp_type_1(spark, tmp_path) -> None:
    url = f"file://{tmp_path}/root"
    fill(
        open_root(url),
        "t",
        partitions=1,
        batches=1,
        per_batch=2,
        config={"message.timestamp.type": "LogAppendTime"},
    )
    rows = reader(spark, url, subscribe="t").load().select("timestampType").collect()
    assert [r.timestampType for r in rows] == [1, 1]


def test_fail_on_data_loss(spark, tmp_path) -> None:
    url = f"file://{tmp_path}/root"
    root = open_root(url)
    fill(root, "t", partitions=1, batches=3, per_batch=10)
    config = {**root.topic("t").info.effective_config, "retention.ms": 1}
    apply_retention(root.topic("t").partition(0), config, now=BASE_TS_MS + 10**12)
    start = root.topic("t").partition(0).log_start_offset
    assert start > 0
    lost = reader(spark, url, subscribe="t", startingOffsets='{"t":{"0":0}}').load()
    with pytest.raises(PySparkException, match=rf"records 0-{start - 1} of t-0 were removed"):
        lost.count()
    tolerant = reader(
        spark, url, subscribe="t", startingOffsets='{"t":{"0":0}}', failOnDataLoss="false"
    ).load()
    assert tolerant.count() == 30 - start


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, "exactly one of the options 'subscribe', 'subscribePattern', 'assign'"),
        ({"subscribe": "t", "kafka.auto.offset.reset": "earliest"}, "set the source option"),
        ({"subscribe": "t", "startingOffsets": "latest"}, "not accepted for batch queries"),
        ({"subscribe": "t", "includeHeaders": "yes"}, "'includeheaders'='yes'"),
    ],
)
def test_bad_options_fail_with_their_message(spark, tmp_path, options, message) -> None:
    url = f"file://{tmp_path}/root"
    fill(open_root(url), "t", partitions=1, batches=1, per_batch=1)
    with pytest.raises(PySparkException) as info:
        reader(spark, url, **options).load().count()
    assert message.lower() in str(info.value).lower()
