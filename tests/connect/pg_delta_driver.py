"""A Spark driver landing Debezium topics in Delta tables (upsert), run as a killable subprocess.

Usage: python -m tests.connect.pg_delta_driver ROOT CHECKPOINTS TABLES once|stream TOPIC...

One query per topic, ``readStream(TOPIC) -> foreachBatch(DeltaForeachBatch)`` with
``value_format="debezium"`` and ``mode="upsert"`` into ``TABLES_DIR/TOPIC`` (app id
``e2e-TOPIC``, checkpoint ``CHECKPOINT_DIR/TOPIC``): the production sink, three
queries in one driver so a kill hits them all. ``once`` lands what the topics hold
and exits 0 (Trigger.AvailableNow); ``stream`` runs micro-batches until killed.
"""

from __future__ import annotations

import sys

from sparklog.spark.delta_sink import DeltaForeachBatch, start_delta_sink
from tests.spark.spark_support import new_session

SCHEMA = "id INT, name STRING, qty INT"


def main(argv: list[str]) -> int:
    root_url, checkpoints, tables, mode, *topics = argv
    spark = new_session("sparklog-pg-delta", master="local[2]")
    queries = []
    for topic in topics:
        sink = DeltaForeachBatch(
            f"{tables}/{topic}",
            app_id=f"e2e-{topic}",
            value_format="debezium",
            value_schema=SCHEMA,
            mode="upsert",
        )
        queries.append(
            start_delta_sink(
                spark,
                sink,
                topic=topic,
                source_options={"root": root_url},
                checkpoint=f"{checkpoints}/{topic}",
                once=mode == "once",
                max_offsets_per_trigger=2000,
            )
        )
    for query in queries:
        query.awaitTermination()
        if query.exception() is not None:
            raise SystemExit(f"query {query.name} failed: {query.exception()}")
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
