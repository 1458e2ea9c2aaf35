"""``readStream.format("sparklog-postgres")`` -> ``writeStream.format("sparklog")`` with real Spark.

Three tables change (tests/connect/pg_history.py) while the query runs, then while
it is stopped; restarted on its checkpoint it goes on from the slot. The topics
hold every change once (by LSN and key) and replay to the tables, and the slot is
confirmed up to the last batch Spark committed, not before. Missing options and
an unknown table fail the query with the connector's message naming them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sparklog.storage import open_root
from tests.connect.pg_history import TABLES, History, check_topics_mirror_tables, create_tables
from tests.spark.spark_support import spark  # noqa: F401
from tests.support.postgres import Postgres
from tests.support.waiting import wait_for

psycopg = pytest.importorskip("psycopg")
pytestmark = pytest.mark.slow


def start(spark, url: str, postgres: Postgres, checkpoint: Path) -> Any:  # noqa: F811
    return (
        spark.readStream.format("sparklog-postgres")
        .option("root", url)
        .option("dsn", postgres.dsn)
        .option("tables", ",".join(TABLES))
        .option("prefix", "shop")
        .option("partitions", "2")
        .option("maxChanges", "500")
        .load()
        .writeStream.format("sparklog")
        .option("root", url)
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="1 second")
        .start()
    )


def confirmed_lsn(postgres: Postgres) -> int:
    from sparklog.connect.pgoutput import lsn_to_int

    with psycopg.connect(postgres.dsn) as conn:
        row = conn.execute(
            "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s",
            ("sparklog_shop",),
        ).fetchone()
    return -1 if row is None else lsn_to_int(row[0])


def committed_end(checkpoint: Path) -> int:
    """The source's end offset of the newest batch in Spark's offset log."""
    logs = sorted((checkpoint / "offsets").glob("[0-9]*"), key=lambda p: int(p.name))
    return int(json.loads(logs[-1].read_text().splitlines()[-1])["lsn"])


def test_changes_stream_into_topics_once_across_a_restart(
    spark,  # noqa: F811
    postgres: Postgres,
    tmp_path: Path,
) -> None:
    create_tables(postgres)
    url = f"file://{tmp_path}/root"
    checkpoint = tmp_path / "ck"
    history = History()
    query = start(spark, url, postgres, checkpoint)
    try:
        wait_for(lambda: confirmed_lsn(postgres) > 0, timeout_s=120, what="the slot")
        history.round(postgres, transactions=6)
        query.processAllAvailable()
    finally:
        query.stop()
    assert query.exception() is None
    # Spark commits a batch's source offsets when it plans the next one: the slot is
    # confirmed up to a batch Spark committed, never past the newest
    first_end = committed_end(checkpoint)
    assert 0 < confirmed_lsn(postgres) <= first_end
    history.round(postgres, transactions=6)  # while the query is stopped: kept by the slot
    query = start(spark, url, postgres, checkpoint)
    try:
        query.processAllAvailable()
        history.round(postgres, transactions=3)
        query.processAllAvailable()
    finally:
        query.stop()
    assert query.exception() is None
    assert first_end <= confirmed_lsn(postgres) <= committed_end(checkpoint)
    ops = check_topics_mirror_tables(open_root(url), postgres)
    assert ops["r"] == 0 and ops["c"] + ops["u"] + ops["d"] == history.changes


def test_bad_settings_fail_the_query_naming_them(
    spark,  # noqa: F811
    postgres: Postgres,
    tmp_path: Path,
) -> None:
    def failure(**options: str) -> str:
        reader = spark.readStream.format("sparklog-postgres")
        for key, value in options.items():
            reader = reader.option(key, value)
        query = reader.load().writeStream.format("console").start()
        try:
            with pytest.raises(Exception) as failed:  # Spark wraps the connector error
                query.awaitTermination(120)
        finally:
            query.stop()
        return str(failed.value)

    url = f"file://{tmp_path}/root"
    assert "needs option(s) ['dsn', 'prefix']" in failure(root=url, tables="t")
    unknown = failure(root=url, tables="nosuch", prefix="bad", dsn=postgres.dsn)
    assert "table public.nosuch not found in database 'postgres'" in unknown
