"""A driver for the foreachBatch exactly-once test, run as a subprocess so it can be killed.

Usage: python -m tests.spark.spark_windows_driver ROOT_URL CHECKPOINT

The docs/spark.md recipe: a windowed count of topic ``events`` (10-second
windows on the record timestamp, watermark, ``outputMode("update")``) written
to topic ``counts`` through ``foreachBatch`` as a batch write with
``txnAppId``/``txnVersion``.  Each output record is one window's count as of
one batch: key = window start, value = JSON ``{"window", "count", "batch"}``.
``SPARKLOG_SPARK_FAULT`` (tests/support/spark_faults.py) kills it at a chosen point: the
writes go through ``format("sparklog_faulty")``, sparklog's sink with the kill points.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from pyspark.sql import functions as F

from tests.spark.spark_support import new_session
from tests.support.spark_faults import PGID_ENV, FaultySparklogDataSource


def main(argv: list[str]) -> int:
    root_url, checkpoint = argv
    os.environ[PGID_ENV] = str(os.getpgid(0))
    spark = new_session("sparklog-windows", master="local[2,4]")
    spark.dataSource.register(FaultySparklogDataSource)
    counts = (
        spark.readStream.format("sparklog")
        .option("root", root_url)
        .option("subscribe", "events")
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "40")
        .load()
        .withWatermark("timestamp", "1 hour")
        .groupBy(F.window("timestamp", "10 seconds"))
        .count()
    )

    def write_counts(batch: Any, batch_id: int) -> None:
        (
            batch.select(
                F.col("window.start").cast("string").alias("key"),
                F.to_json(
                    F.struct(
                        F.col("window.start").cast("string").alias("window"),
                        F.col("count"),
                        F.lit(batch_id).alias("batch"),
                    )
                ).alias("value"),
            )
            .write.format("sparklog_faulty")
            .option("root", root_url)
            .option("topic", "counts")
            .option("txnAppId", "window-counts")
            .option("txnVersion", batch_id)
            .mode("append")
            .save()
        )

    query = (
        counts.writeStream.outputMode("update")
        .foreachBatch(write_counts)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
