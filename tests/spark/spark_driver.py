"""A Spark driver run as a subprocess by the exactly-once tests, so it can be killed.

Usage: python -m tests.spark.spark_driver ROOT_URL CHECKPOINT IN_TOPIC OUT_TOPIC MAX_OFFSETS

Runs ``readStream(IN_TOPIC) -> writeStream(OUT_TOPIC)`` with Trigger.AvailableNow
and exits 0 when caught up.  ``SPARKLOG_SPARK_FAULT`` (see tests/support/spark_faults.py)
makes it die at a chosen point; this script records its process group so that
a fault in a Python worker can kill the driver, its JVM and its workers at once.
"""

from __future__ import annotations

import os
import sys

from tests.spark.spark_support import new_session
from tests.support.spark_faults import PGID_ENV, FaultySparklogDataSource


def main(argv: list[str]) -> int:
    root_url, checkpoint, in_topic, out_topic, max_offsets = argv
    os.environ[PGID_ENV] = str(os.getpgid(0))
    # local[2,4]: two cores, and a failed task is retried (up to 4 attempts).
    spark = new_session("sparklog-exactly-once", master="local[2,4]")
    # the real source and sink with faults around their calls (production code has no hooks)
    spark.dataSource.register(FaultySparklogDataSource)
    query = (
        spark.readStream.format("sparklog_faulty")
        .option("root", root_url)
        .option("subscribe", in_topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", max_offsets)
        .load()
        .select("key", "value")
        .writeStream.format("sparklog_faulty")
        .option("root", root_url)
        .option("topic", out_topic)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    batches = [p["batchId"] for p in query.recentProgress if p["numInputRows"]]
    print(f"batches {batches}", flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
