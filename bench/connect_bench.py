"""Connector throughput against plain pyarrow -> Parquet of the same rows, in the same run.

    PYSPARK_PYTHON=$PWD/.venv/bin/python .venv/bin/python bench/connect_bench.py --rows 200000

Measured (rows per second, wall clock, on whatever load the machine has: run
``uptime`` beside it):

* PostgreSQL -> topic: ``--rows`` rows of (id int, name text, qty int, price
  numeric(10,2), ts timestamptz) in one table, captured by the snapshot, then the
  same number inserted afterwards and captured from the slot (changes);
* topic -> Delta: the snapshot's topic landed by ``sparklog connect delta-sink``'s code
  (Spark local[2], Trigger.AvailableNow, ``value-format debezium``, append), and by
  delta-rs alone (``DeltaTarget.write`` of the decoded rows, no Spark);
* baseline: the same decoded rows written with ``pyarrow.parquet.write_table``.

The PostgreSQL server is the test suite's (tests/support/postgres.py: Debian's binaries,
a fresh cluster in a temporary folder). No result is asserted.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from sparklog.connect.delta import DeltaTarget  # noqa: E402
from sparklog.connect.postgres import PostgresSource, PostgresSourceConfig  # noqa: E402
from sparklog.storage import open_root  # noqa: E402
from tests.support.postgres import running_postgres, why_unavailable  # noqa: E402

SCHEMA = "id INT, name STRING, qty INT, price STRING, ts STRING"


def decoded_rows(root: object, topic: str) -> pa.Table:
    """The topic's Debezium ``after`` rows as an Arrow table (what Delta and Parquet get)."""
    t = root.topic(topic)  # type: ignore[attr-defined]
    afters = [
        json.loads(v)["after"]
        for p in range(t.partitions)
        for v in t.partition(p).read(0).column("value").to_pylist()
        if v is not None
    ]
    return pa.Table.from_pylist(afters)


def rate(rows: int, seconds: float) -> str:
    return f"{rows / seconds:>12,.0f} rows/s ({seconds:.2f} s)"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--no-spark", action="store_true", help="skip the Spark delta-sink run")
    args = parser.parse_args()
    reason = why_unavailable()
    if reason:
        print(f"skipped: {reason}")
        return 0
    import psycopg

    work = Path(tempfile.mkdtemp(prefix="connect-bench-"))
    try:
        with running_postgres() as pg:
            with psycopg.connect(pg.dsn, autocommit=True) as conn:
                conn.execute(
                    "CREATE TABLE items (id int PRIMARY KEY, name text, qty int, "
                    "price numeric(10,2), ts timestamptz)"
                )
                conn.execute(
                    "INSERT INTO items SELECT g, 'name-' || g, g %% 100, g / 100.0, now() "
                    "FROM generate_series(1, %s) g",
                    (args.rows,),
                )
            url = f"file://{work}/root"
            root = open_root(url)
            config = PostgresSourceConfig(
                pg.dsn, ["items"], "bench", decimal_handling="string", max_changes=50_000
            )
            started = time.perf_counter()
            PostgresSource(root, config).run(until_caught_up=True)
            snap_s = time.perf_counter() - started
            with psycopg.connect(pg.dsn, autocommit=True) as conn:
                conn.execute(
                    "INSERT INTO items SELECT g, 'name-' || g, g %% 100, g / 100.0, now() "
                    "FROM generate_series(%s, %s) g",
                    (args.rows + 1, 2 * args.rows),
                )
            started = time.perf_counter()
            PostgresSource(root, config).run(until_caught_up=True)
            change_s = time.perf_counter() - started

            rows = decoded_rows(root, "bench.public.items")
            started = time.perf_counter()
            pq.write_table(rows, work / "plain.parquet")
            parquet_s = time.perf_counter() - started
            started = time.perf_counter()
            DeltaTarget(str(work / "delta-rs"), "bench").write(rows, 0)
            delta_rs_s = time.perf_counter() - started

            spark_s = None
            if not args.no_spark:
                from sparklog.spark.delta_sink import (
                    DeltaForeachBatch,
                    delta_sink_session,
                    start_delta_sink,
                )

                spark = delta_sink_session("connect-bench")
                sink = DeltaForeachBatch(
                    str(work / "spark-delta"), "bench", value_format="debezium", value_schema=SCHEMA
                )
                warm = start_delta_sink(
                    spark, sink, topic="bench.public.items", source_options={"root": url},
                    checkpoint=str(work / "ck-warm"), once=True, max_offsets_per_trigger=10,
                )  # fmt: skip
                warm.awaitTermination(timeout=5)  # JVM and Python workers started
                warm.stop()
                shutil.rmtree(work / "spark-delta", ignore_errors=True)
                started = time.perf_counter()
                query = start_delta_sink(
                    spark, sink, topic="bench.public.items", source_options={"root": url},
                    checkpoint=str(work / "ck"), once=True,
                )  # fmt: skip
                query.awaitTermination()
                spark_s = time.perf_counter() - started
                spark.stop()
        n = args.rows
        print(f"rows {n} per PostgreSQL phase; {rows.num_rows} rows landed")
        print(f"PostgreSQL -> topic, snapshot   {rate(n, snap_s)}")
        print(f"PostgreSQL -> topic, changes    {rate(n, change_s)}")
        print(f"pyarrow -> Parquet (baseline)   {rate(rows.num_rows, parquet_s)}")
        print(f"rows -> Delta, delta-rs alone   {rate(rows.num_rows, delta_rs_s)}")
        if spark_s is not None:
            print(f"topic -> Delta, Spark + delta-rs {rate(rows.num_rows, spark_s)}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
