"""Where Spark's Kafka connector and format("sparklog") must agree (issue 13, items 3-9).

Each test runs the case through a real local[2] Spark session, as a pipeline
moved from format("kafka") would hit it.
"""

# ruff: noqa: F811  (pytest fixtures imported from spark_support are parameters here)

from __future__ import annotations

import re
import uuid
from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import PySparkException

from sparklog.errors import SparkOptionError
from sparklog.spark.options import parse_source_options
from sparklog.spark.progress import offsets_behind_latest
from sparklog.spark.schema import source_schema
from sparklog.spark.stream import SparklogStreamReader
from sparklog.storage import open_root
from tests.spark.spark_data import fill
from tests.spark.spark_support import spark, wait_for  # noqa: F401


def batch(spark: Any, url: str, **options: str) -> Any:
    return spark.read.format("sparklog").option("root", url).options(**options).load()


def rows(df: Any) -> list[tuple[int, int]]:
    return sorted((r.partition, r.offset) for r in df.select("partition", "offset").collect())


def test_a_batch_read_ignores_the_streaming_rate_options(spark, tmp_path) -> None:
    url = f"file://{tmp_path}/root"
    fill(open_root(url), "t", partitions=2, batches=1, per_batch=10)
    shared = {"subscribe": "t", "maxOffsetsPerTrigger": "3", "minOffsetsPerTrigger": "2"}
    shared["maxTriggerDelay"] = "5s"
    assert rows(batch(spark, url, **shared)) == [(p, o) for p in (0, 1) for o in range(10)]


@pytest.mark.parametrize("fail_on_data_loss", ["true", "false"])
def test_a_batch_start_beyond_the_log_end_is_an_error_naming_it(
    spark, tmp_path, fail_on_data_loss
) -> None:
    """Not a 're-created topic' data-loss error; and never the offsets the query excluded."""
    url = f"file://{tmp_path}/root"
    fill(open_root(url), "t", partitions=1, batches=1, per_batch=30)
    df = batch(
        spark,
        url,
        subscribe="t",
        startingOffsets='{"t":{"0":50}}',
        failOnDataLoss=fail_on_data_loss,
    )
    with pytest.raises(PySparkException) as info:
        df.collect()
    message = str(info.value)
    assert "resolved start offset 50 is greater than the resolved end offset 30" in message
    assert "beyond the end of the log (high watermark 30)" in message
    assert "created again" not in message


def test_an_explicit_start_after_the_explicit_end_says_so(spark, tmp_path) -> None:
    url = f"file://{tmp_path}/root"
    fill(open_root(url), "t", partitions=1, batches=1, per_batch=30)
    df = batch(
        spark, url, subscribe="t", startingOffsets='{"t":{"0":20}}', endingOffsets='{"t":{"0":10}}'
    )
    with pytest.raises(PySparkException, match="start offset 20 is greater than the end offset 10"):
        df.collect()
    # Beyond the log end, the ending offset resolves to the high watermark: the same error.
    df = batch(
        spark, url, subscribe="t", startingOffsets='{"t":{"0":40}}', endingOffsets='{"t":{"0":45}}'
    )
    with pytest.raises(PySparkException, match="resolved start offset 40 is greater"):
        df.collect()


def test_max_records_per_partition_splits_a_batch_read(spark, tmp_path) -> None:
    url = f"file://{tmp_path}/root"
    fill(open_root(url), "t", partitions=1, batches=1, per_batch=100)
    df = batch(spark, url, subscribe="t", maxRecordsPerPartition="30")
    assert df.rdd.getNumPartitions() == 4
    assert rows(df) == [(0, o) for o in range(100)]


def test_kafka_group_id_records_the_groups_offsets_and_lag_is_computable(spark, tmp_path) -> None:
    url = f"file://{tmp_path}/root"
    root = open_root(url)
    fill(root, "t", partitions=2, batches=1, per_batch=10)
    df = (
        spark.readStream.format("sparklog")
        .option("root", url)
        .option("subscribe", "t")
        .option("startingOffsets", "earliest")
        .option("kafka.group.id", "billing")
        .option("maxOffsetsPerTrigger", "10")
        .load()
    )
    query = (
        df.writeStream.format("memory")
        .queryName(f"q_{uuid.uuid4().hex[:8]}")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert query.exception() is None
    committed = root.groups.fetch("billing")
    assert {tp: c.offset for tp, c in committed.items()} == {("t", 0): 10, ("t", 1): 10}
    first, last = [p["sources"][0] for p in query.recentProgress if p["numInputRows"]]
    assert offsets_behind_latest(first) == {
        "minOffsetsBehindLatest": 5.0,
        "maxOffsetsBehindLatest": 5.0,
        "avgOffsetsBehindLatest": 5.0,
    }
    assert offsets_behind_latest(last)["maxOffsetsBehindLatest"] == 0.0


def test_kafka_auto_offset_reset_is_refused_with_kafkas_advice(spark, tmp_path) -> None:
    url = f"file://{tmp_path}/root"
    fill(open_root(url), "t", partitions=1, batches=1, per_batch=1)
    df = spark.readStream.format("sparklog").option("root", url).option("subscribe", "t")
    with pytest.raises(PySparkException, match="Instead set the source option 'startingOffsets'"):
        df.option("kafka.auto.offset.reset", "earliest").load().writeStream.format(
            "memory"
        ).queryName("refused").option("checkpointLocation", str(tmp_path / "ck")).start()


def _start_stream(
    spark: Any, url: str, checkpoint: Path, sink: str = "memory", **options: str
) -> tuple[Any, str]:
    df = (
        spark.readStream.format("sparklog")
        .option("root", url)
        .option("subscribe", "t")
        .option("startingOffsets", "earliest")
        .options(**options)
        .load()
    )
    name = f"q_{uuid.uuid4().hex[:8]}"
    query = (
        df.writeStream.format(sink)
        .queryName(name)
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    return query, name


def test_a_topic_recreated_under_a_running_query_fails_it(spark, tmp_path) -> None:
    """The new topic already holds more records than the old position: offsets alone look fine."""
    url = f"file://{tmp_path}/root"
    root = open_root(url)
    fill(root, "t", partitions=1, batches=1, per_batch=5)
    query, table = _start_stream(spark, url, tmp_path / "ck")
    try:
        wait_for(lambda: spark.table(table).count() == 5, what="the first records")
        root.delete_topic("t")
        fill(root, "t", partitions=1, batches=1, per_batch=8)
        wait_for(lambda: query.exception() is not None or not query.isActive, what="the failure")
        # A trigger between the delete and the create sees the topic gone: a failure too.
        assert re.search("was deleted and created again|no longer exists", str(query.exception()))
    finally:
        query.stop()
    assert spark.table(table).count() == 5  # nothing of the new topic read at old offsets
    # Restarted from its checkpoint, the query recognises the new topic by its id.
    query, _ = _start_stream(spark, url, tmp_path / "ck", sink="noop")  # memory cannot resume
    try:
        with pytest.raises(PySparkException, match="was deleted and created again"):
            query.awaitTermination(120)
    finally:
        query.stop()


def test_a_recreated_topic_is_read_from_its_start_without_fail_on_data_loss(
    spark, tmp_path
) -> None:
    url = f"file://{tmp_path}/root"
    root = open_root(url)
    fill(root, "t", partitions=1, batches=1, per_batch=5)
    query, table = _start_stream(spark, url, tmp_path / "ck", failOnDataLoss="false")
    try:
        wait_for(lambda: spark.table(table).count() == 5, what="the first records")
        root.delete_topic("t")
        fill(root, "t", partitions=1, batches=1, per_batch=8)
        wait_for(lambda: spark.table(table).count() == 13, what="the new topic's records")
    finally:
        query.stop()
    values = sorted(r.value.decode() for r in spark.table(table).collect())
    assert values == sorted([f"t-0-{i}" for i in range(5)] + [f"t-0-{i}" for i in range(8)])


@pytest.mark.parametrize("fail_on_data_loss", ["true", "false"])
def test_a_stream_start_beyond_the_log_end_is_an_error(tmp_path, fail_on_data_loss) -> None:
    """The stream's first position is checked like a batch start (no Spark needed)."""
    url = f"file://{tmp_path}/root"
    fill(open_root(url), "t", partitions=1, batches=1, per_batch=30)
    options = parse_source_options(
        {
            "root": url,
            "subscribe": "t",
            "startingOffsets": '{"t":{"0":50}}',
            "failOnDataLoss": fail_on_data_loss,
        },
        streaming=True,
    )
    reader = SparklogStreamReader(options, source_schema(None, False))
    with pytest.raises(SparkOptionError, match="offset 50 for topic 't' partition 0, beyond"):
        reader.initialOffset()
