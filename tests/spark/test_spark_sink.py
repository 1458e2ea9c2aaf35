"""The sink through real Spark (local[2]): Kafka's columns, murmur2 placement, exactly-once."""

# ruff: noqa: F811  (pytest fixtures imported from spark_support are parameters here)

from __future__ import annotations

import datetime as dt
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.errors import PySparkException
from pyspark.sql import functions as F

from sparklog.client.partitioner import partition_for_key
from sparklog.spark.compat import HAS_ADMISSION_CONTROL
from sparklog.spark.options import parse_sink_options
from sparklog.spark.sink import _TaskWriter, commit_segments
from sparklog.storage import make_batch, open_root
from tests.broker_lite.test_handed_commits import revokes
from tests.chaos.inproc import inproc_broker
from tests.spark.spark_data import fill
from tests.spark.spark_support import (  # noqa: F401
    source_options,
    spark,
    spark_root,
)


def records(root: Any, name: str) -> list[dict[str, Any]]:
    topic = root.topic(name)
    out = []
    for p in range(topic.partitions):
        for r in topic.partition(p).read(0).to_pylist():
            out.append({**r, "partition": p})
    return out


def rows_df(spark: Any, n: int, keyed: bool = True) -> Any:
    df = spark.range(n).select(
        F.concat(F.lit("v"), F.col("id").cast("string")).alias("value"),
        F.col("id"),
    )
    if keyed:
        df = df.withColumn("key", F.concat(F.lit("key-"), F.col("id").cast("string")))
    return df


def write(df: Any, url: str, storage: dict | None = None, **options: str) -> None:
    df.write.format("sparklog").options(**source_options(url, storage or {})).options(
        **options
    ).mode("append").save()


def test_keyed_rows_land_where_kafka_puts_them(spark, spark_root) -> None:
    url, storage = spark_root
    root = open_root(url, storage)
    root.create_topic("out", 5)
    write(rows_df(spark, 300).repartition(3), url, storage, topic="out")
    got = records(root, "out")
    assert sorted(r["value"] for r in got) == sorted(f"v{i}".encode() for i in range(300))
    for r in got:
        assert r["partition"] == partition_for_key(r["key"], 5)


def test_keyless_rows_are_spread_evenly(spark, tmp_path) -> None:
    url = f"file://{tmp_path}/root"
    root = open_root(url)
    root.create_topic("out", 4)
    write(rows_df(spark, 400, keyed=False).coalesce(1), url, topic="out")
    counts = Counter(r["partition"] for r in records(root, "out"))
    assert counts == {0: 100, 1: 100, 2: 100, 3: 100}


def test_topic_partition_headers_and_timestamp_columns(spark, tmp_path) -> None:
    url = f"file://{tmp_path}/root"
    root = open_root(url)
    root.create_topic("a", 3)
    root.create_topic("b", 2)
    stamp = dt.datetime(2024, 5, 1, 12, 0, 0, 123000, tzinfo=dt.UTC)
    rows = [
        ("a", 2, b"k1", b"v1", stamp, [("h", b"x")]),
        ("b", None, b"k2", b"v2", stamp, []),
        ("a", 0, None, b"v3", None, None),
    ]
    df = spark.createDataFrame(
        rows,
        "topic string, partition int, key binary, value binary, timestamp timestamp, "
        "headers array<struct<key:string,value:binary>>",
    ).withColumn("ignored", F.lit(1))
    write(df, url)
    a = {r["value"]: r for r in records(root, "a")}
    b = records(root, "b")
    assert a[b"v1"]["partition"] == 2 and a[b"v1"]["headers"] == [{"key": "h", "value": b"x"}]
    assert a[b"v1"]["timestamp"] == stamp
    assert a[b"v3"]["partition"] == 0 and a[b"v3"]["key"] is None
    assert b[0]["partition"] == partition_for_key(b"k2", 2) and b[0]["value"] == b"v2"


def test_topic_option_overrides_the_column(spark, tmp_path) -> None:
    url = f"file://{tmp_path}/root"
    root = open_root(url)
    root.create_topic("a", 1)
    root.create_topic("b", 1)
    df = spark.createDataFrame([("a", "x")], "topic string, value string")
    write(df, url, topic="b")
    assert [r["value"] for r in records(root, "b")] == [b"x"]
    assert records(root, "a") == []


def test_typed_topics_accept_their_struct(spark, tmp_path) -> None:
    url = f"file://{tmp_path}/root"
    root = open_root(url)
    value_type = pa.struct([("id", pa.int64()), ("name", pa.string())])
    root.create_topic("typed", 1, value_type=value_type)
    df = spark.createDataFrame([(1, "a"), (2, "b")], "id long, name string").select(
        F.struct("id", "name").alias("value")
    )
    write(df, url, topic="typed")
    assert sorted(r["value"]["id"] for r in records(root, "typed")) == [1, 2]


@pytest.mark.parametrize(
    ("ddl", "message"),
    [
        ("key binary", "has no 'value' column, which is required"),
        ("value int", "column 'value' has type int; accepted: binary, string"),
        ("value binary, key int", "column 'key' has type int; accepted: binary, string"),
        ("value binary, partition string", "column 'partition' has type string; accepted: int"),
        ("value binary, timestamp string", "column 'timestamp' has type string"),
        ("value binary, headers string", "column 'headers' has type string"),
        ("value binary, topic int", "column 'topic' has type int; accepted: string"),
    ],
)
def test_bad_columns_fail_before_anything_is_written(spark, tmp_path, ddl, message) -> None:
    url = f"file://{tmp_path}/root"
    root = open_root(url)
    root.create_topic("out", 2)
    df = spark.createDataFrame([tuple(None for _ in ddl.split(","))], ddl)
    with pytest.raises(PySparkException) as info:
        write(df, url, topic="out")
    assert message in str(info.value)
    assert records(root, "out") == []
    assert list((tmp_path / "root" / "topics" / "out").rglob("*.arrow")) == []


def test_missing_topic_and_overwrite_are_refused(spark, tmp_path) -> None:
    url = f"file://{tmp_path}/root"
    open_root(url).create_topic("out", 1)
    df = spark.createDataFrame([("x",)], "value string")
    with pytest.raises(PySparkException, match="no 'topic' column and the 'topic' option"):
        write(df, url)
    with pytest.raises(PySparkException, match="topic 'nope' does not exist"):
        write(df, url, topic="nope")
    with pytest.raises(PySparkException, match=r'accepted: append \(write .mode\("append"\)\)'):
        df.write.format("sparklog").option("root", url).option("topic", "out").mode(
            "overwrite"
        ).save()


def test_save_without_a_mode_is_refused_by_spark_naming_append(spark, tmp_path) -> None:
    """Spark refuses ErrorIfExists for every Python data source before sparklog runs.

    If a later Spark lets Python sources accept it, this test fails: make
    save() append then and update docs/spark.md.
    """
    url = f"file://{tmp_path}/root"
    open_root(url).create_topic("out", 1)
    df = spark.createDataFrame([("x",)], "value string")
    with pytest.raises(PySparkException, match='cannot be written in the "ErrorIfExists" mode'):
        df.write.format("sparklog").option("root", url).option("topic", "out").save()
    with pytest.raises(PySparkException, match='"Append"'):
        df.write.format("sparklog").option("root", url).option("topic", "out").save()
    assert records(open_root(url), "out") == []


def test_batch_writes_with_txn_app_id_and_version_are_exactly_once(spark, tmp_path) -> None:
    """Delta's idempotent-write options: a version already committed (or older) is skipped.
    The topic's shards are leased by a broker's journal, so the driver hands each commit,
    marker included, to that leader (issue 37 item 3): no shard is revoked from it."""
    url = f"file://{tmp_path}/root"
    root = open_root(url)
    with inproc_broker(url) as (server, _):
        server.broker.create_topic("out", 2)
        for p in range(2):
            server.broker.produce("out", [(p, make_batch([b"leased"]))])

        def write_version(first: int, version: int) -> None:
            df = spark.range(first, first + 4).select(
                F.concat(F.lit("v"), F.col("id").cast("string")).alias("value")
            )
            write(df, url, topic="out", txnAppId="nightly", txnVersion=str(version))

        write_version(0, 0)
        write_version(0, 0)  # the same write replayed: skipped
        write_version(4, 1)
        write_version(8, 0)  # an older version: skipped too
        got = Counter(r["value"] for r in records(root, "out"))
        assert got == Counter([b"leased"] * 2 + [f"v{i}".encode() for i in range(8)])
        assert revokes(tmp_path / "root") == 0
    with pytest.raises(PySparkException, match="'txnAppId' needs option 'txnVersion'"):
        write(spark.createDataFrame([("x",)], "value string"), url, topic="out", txnAppId="a")


def test_out_of_range_partition_column_fails(spark, tmp_path) -> None:
    url = f"file://{tmp_path}/root"
    open_root(url).create_topic("out", 2)
    df = spark.createDataFrame([("x", 7)], "value string, partition int")
    with pytest.raises(PySparkException, match="column 'partition' has value 7; accepted: 0-1"):
        write(df, url, topic="out")


def test_stream_topic_to_topic(spark, spark_root, tmp_path: Path) -> None:
    url, storage = spark_root
    root = open_root(url, storage)
    fill(root, "in", partitions=3, batches=2, per_batch=20)
    root.create_topic("out", 3)
    # several micro-batches where Spark has admission control (pyspark >= 4.2), else one
    limits = {"maxOffsetsPerTrigger": "50"} if HAS_ADMISSION_CONTROL else {}
    query = (
        spark.readStream.format("sparklog")
        .options(**source_options(url, storage))
        .option("subscribe", "in")
        .option("startingOffsets", "earliest")
        .options(**limits)
        .option("includeHeaders", "true")
        .load()
        .select("key", "value", "headers", "timestamp")
        .writeStream.format("sparklog")
        .options(**source_options(url, storage))
        .option("topic", "out")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(180)
    assert query.exception() is None
    source = {(r["key"], r["value"]) for r in records(root, "in")}
    written = records(root, "out")
    assert len(written) == 120 and {(r["key"], r["value"]) for r in written} == source
    # Keyed records kept Kafka's placement (same partition count, same keys).
    assert all(r["partition"] == partition_for_key(r["key"], 3) for r in written)


def test_a_replayed_commit_is_skipped(tmp_path) -> None:
    """The driver commit of a batch Spark replays appends nothing (txn marker)."""
    url = f"file://{tmp_path}/root"
    root = open_root(url)
    root.create_topic("out", 2)
    options = parse_sink_options({"root": url, "topic": "out"})
    writer = _TaskWriter(options, task_index=0)
    writer.add(pa.record_batch({"value": pa.array([b"a", b"b", b"c"])}))
    message = writer.finish()
    commit_segments(options, [message], txn=("spark-q1", 7))
    commit_segments(options, [message], txn=("spark-q1", 7))  # replay after a crash
    retry = _TaskWriter(options, task_index=0)  # a re-run of the batch writes new objects
    retry.add(pa.record_batch({"value": pa.array([b"a", b"b", b"c"])}))
    commit_segments(options, [retry.finish()], txn=("spark-q1", 7))
    assert sorted(r["value"] for r in records(root, "out")) == [b"a", b"b", b"c"]
    commit_segments(options, [message], txn=("spark-q1", 8))
    assert len(records(root, "out")) == 6


def test_update_mode_is_refused_by_spark_and_complete_mode_appends(spark, tmp_path) -> None:
    """Spark offers Python sinks no update mode (docs/spark.md: the foreachBatch recipe).

    Complete mode reaches the sink as overwrite; like Kafka's sink, sparklog
    appends the whole result table each batch.  If a later Spark accepts
    update mode for Python sinks, this test fails: accept it then.
    """
    url = f"file://{tmp_path}/root"
    root = open_root(url)
    fill(root, "in", partitions=1, batches=1, per_batch=6)
    root.create_topic("out", 1)
    counts = (
        spark.readStream.format("sparklog")
        .option("root", url)
        .option("subscribe", "in")
        .option("startingOffsets", "earliest")
        .load()
        .groupBy((F.col("offset") % 2).cast("string").alias("key"))
        .count()
        .select("key", F.col("count").cast("string").alias("value"))
    )
    for mode in ("update", "complete"):
        query = (
            counts.writeStream.format("sparklog")
            .outputMode(mode)
            .option("root", url)
            .option("topic", "out")
            .option("checkpointLocation", str(tmp_path / f"ck-{mode}"))
            .trigger(availableNow=True)
            .start()
        )
        if mode == "update":
            with pytest.raises(PySparkException, match="does not support Update mode"):
                query.awaitTermination(120)
        else:
            query.awaitTermination(120)
            assert query.exception() is None
    assert sorted((r["key"], r["value"]) for r in records(root, "out")) == [
        (b"0", b"3"),
        (b"1", b"3"),
    ]
