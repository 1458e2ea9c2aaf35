"""A Spark driver landing a topic in a Delta table, run as a subprocess so it can be killed.

Usage: python -m tests.connect.delta_driver ROOT_URL CHECKPOINT TOPIC TABLE MAX_OFFSETS

Runs ``readStream(TOPIC) -> foreachBatch(DeltaForeachBatch(TABLE))`` with
Trigger.AvailableNow and exits 0 when caught up. ``SPARKLOG_SPARK_FAULT``
(tests/support/spark_faults.py) kills it at ``delta.before_commit:N`` (the batch's
rows computed, nothing in the table) or ``delta.after_commit:N`` (the Delta commit
made, Spark's checkpoint commit not), where N is the batch id.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from sparklog.spark.delta_sink import DeltaForeachBatch, start_delta_sink
from tests.spark.spark_support import new_session
from tests.support.spark_faults import PGID_ENV, maybe_fault


class FaultyDeltaSink(DeltaForeachBatch):
    """The production foreachBatch function with kill points around the Delta write."""

    def __call__(self, df: Any, batch_id: int) -> None:
        df.count()  # the batch's rows are read before the kill
        maybe_fault("delta.before_commit", batch_id)
        super().__call__(df, batch_id)
        maybe_fault("delta.after_commit", batch_id)


def main(argv: list[str]) -> int:
    root_url, checkpoint, topic, table, max_offsets = argv
    os.environ[PGID_ENV] = str(os.getpgid(0))
    spark = new_session("sparklog-delta-kills", master="local[2,4]")
    sink = FaultyDeltaSink(table, app_id="delta-kills", partition_by=["_partition"])
    query = start_delta_sink(
        spark,
        sink,
        topic=topic,
        source_options={"root": root_url},
        checkpoint=checkpoint,
        once=True,
        max_offsets_per_trigger=int(max_offsets),
    )
    query.awaitTermination()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
