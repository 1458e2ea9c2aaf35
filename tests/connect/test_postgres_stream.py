"""``readStream.format("sparklog-postgres")`` -> ``writeStream.format("sparklog")`` with real Spark.

Three tables change (tests/connect/pg_history.py) while the query runs, then while
it is stopped; restarted on its checkpoint it goes on from the slot. The topics
hold every change once (by LSN and key) and replay to the tables, and the slot is
confirmed up to the last batch Spark committed, not before. Missing options and
an unknown table fail the query with the connector's message naming them.

The initial snapshot: rows there before the query come first, as ``r`` records in
bounded micro-batches, then the changes, and a restart does not take it again;
``snapshot=never`` skips it; rows changed between two snapshot batches are in the
snapshot as of the slot's point (the reader driven as Spark's planner drives it);
a snapshot stopped midway, with a written batch Spark replays, goes on where it
was with every row once; composite text keys, empty tables and tables without a
key are read whole, each row once.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sparklog.errors import ConnectorConfigError
from sparklog.storage import open_root
from tests.connect.pg_history import (
    TABLES,
    History,
    check_topics_mirror_tables,
    create_tables,
    records,
    sql,
)
from tests.spark.spark_support import spark  # noqa: F401
from tests.support.postgres import Postgres
from tests.support.waiting import wait_for

psycopg = pytest.importorskip("psycopg")
pytestmark = pytest.mark.slow


def start(
    spark,  # noqa: F811
    url: str,
    postgres: Postgres,
    checkpoint: Path,
    once: bool = False,
    **options: str,
) -> Any:
    """The query ``tables`` -> topics ``shop.public.*`` (``once``: one micro-batch, then stop)."""
    options = {
        "tables": ",".join(TABLES),
        "prefix": "shop",
        "partitions": "2",
        "maxChanges": "500",
        **options,
    }
    reader = spark.readStream.format("sparklog-postgres").option("root", url)
    for key, value in {"dsn": postgres.dsn, **options}.items():
        reader = reader.option(key, value)
    writer = (
        reader.load()
        .writeStream.format("sparklog")
        .option("root", url)
        .option("checkpointLocation", str(checkpoint))
    )
    if once:
        return writer.trigger(once=True).start()
    return writer.trigger(processingTime="1 second").start()


def reset(postgres: Postgres, *tables: str) -> None:
    """Drop what an earlier test of the module left: its tables, the slot, the publication."""
    from sparklog.connect.postgres import drop

    sql(postgres, *(f"DROP TABLE IF EXISTS {t}" for t in (*TABLES, *tables)))
    drop(postgres.dsn, "sparklog_shop", "sparklog_shop")


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
    reset(postgres)
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


def events(root: Any, topic: str) -> list[tuple[str, int, Any]]:
    """A one-partition topic's ``(op, id, qty)`` in order (qty None for a delete; no tombstones)."""
    out = []
    for record in records(root, topic):
        if record["value"] is not None:
            event = json.loads(record["value"])
            row = event["after"] or event["before"]
            out.append((event["op"], row["id"], None if event["op"] == "d" else row["qty"]))
    return out


def ops_by_partition(root: Any, topic: str) -> list[str]:
    """Each partition's ``op`` letters in offset order (tombstones left out)."""
    t = root.topic(topic)
    values = [t.partition(p).read(0).column("value").to_pylist() for p in range(t.partitions)]
    return ["".join(json.loads(v)["op"] for v in part if v) for part in values]


def snapshot_batches(checkpoint: Path) -> int:
    """How many batches in Spark's offset log end inside the snapshot."""
    ends = [
        json.loads(p.read_text().splitlines()[-1]) for p in (checkpoint / "offsets").glob("[0-9]*")
    ]
    return sum("snapshot" in end for end in ends)


def tables_with_rows(postgres: Postgres, transactions: int) -> History:
    """The tables of :mod:`tests.connect.pg_history` anew, changed by ``transactions``."""
    reset(postgres)
    create_tables(postgres)
    history = History()
    history.round(postgres, transactions=transactions)
    return history


def capture(
    spark,  # noqa: F811
    url: str,
    postgres: Postgres,
    checkpoint: Path,
    history: History,
    transactions: int,
    **options: str,
) -> int:
    """Run the query over what the tables have, then over ``transactions`` more, and stop.

    Returns how many changes the history had before those transactions (the query
    had started and its first batch, which creates the slot, had run).
    """
    query = start(spark, url, postgres, checkpoint, **options)
    try:
        query.processAllAvailable()
        changes_before = history.changes
        history.round(postgres, transactions=transactions)
        query.processAllAvailable()
    finally:
        query.stop()
    assert query.exception() is None
    return changes_before


def test_rows_there_before_the_query_come_first_as_its_snapshot_once(
    spark,  # noqa: F811
    postgres: Postgres,
    tmp_path: Path,
) -> None:
    history = tables_with_rows(postgres, transactions=4)  # before the query: the snapshot's
    snapshot_rows = sum(len(ids) for ids in history.live.values())
    url = f"file://{tmp_path}/root"
    checkpoint = tmp_path / "ck"
    # the snapshot in micro-batches of at most 25 rows, then 3 transactions
    changes_before = capture(spark, url, postgres, checkpoint, history, 3, snapshotMaxRows="25")
    assert snapshot_rows > 50 and snapshot_batches(checkpoint) >= 2
    root = open_root(url)
    ops = check_topics_mirror_tables(root, postgres)
    assert ops["r"] == snapshot_rows
    assert ops["c"] + ops["u"] + ops["d"] == history.changes - changes_before
    for table in TABLES:  # every partition: the snapshot's records, then the changes
        for letters in ops_by_partition(root, f"shop.public.{table}"):
            assert letters.rstrip("cud") == "r" * letters.count("r"), letters
    first = json.loads(next(r for r in records(root, "shop.public.alpha") if r["value"])["value"])
    assert first["op"] == "r" and first["before"] is None
    # Debezium's markers over micro-batches: first and last once, each table's edges once
    markers = {
        table: [
            json.loads(r["value"])["source"]
            for r in records(root, f"shop.public.{table}")
            if r["value"] and json.loads(r["value"])["op"] == "r"
        ]
        for table in TABLES
    }
    edges = {
        t: sorted(s["snapshot"] for s in m if s["snapshot"] != "true") for t, m in markers.items()
    }
    assert edges == {
        "alpha": ["first", "last_in_data_collection"],
        "beta": ["first_in_data_collection", "last_in_data_collection"],
        "gamma": ["first_in_data_collection", "last"],
    }
    xids = {s["txId"] for m in markers.values() for s in m}
    assert len(xids) == 1 and xids.pop() > 0  # the snapshot transaction's id

    history.round(postgres, transactions=2)  # while stopped; then restarted, 1 more
    capture(spark, url, postgres, checkpoint, history, 1, snapshotMaxRows="25")
    ops = check_topics_mirror_tables(root, postgres)  # no snapshot again
    assert ops["r"] == snapshot_rows
    assert ops["c"] + ops["u"] + ops["d"] == history.changes - changes_before


def test_snapshot_never_starts_at_the_slot(
    spark,  # noqa: F811
    postgres: Postgres,
    tmp_path: Path,
) -> None:
    history = tables_with_rows(postgres, transactions=2)
    url = f"file://{tmp_path}/root"
    changes_before = capture(spark, url, postgres, tmp_path / "ck", history, 2, snapshot="never")
    root = open_root(url)
    ops = "".join(letters for t in TABLES for letters in ops_by_partition(root, f"shop.public.{t}"))
    assert "r" not in ops and len(ops) == history.changes - changes_before


STOCK = ("CREATE TABLE stock (id int PRIMARY KEY, qty int)",
         "INSERT INTO stock SELECT g, g FROM generate_series(1, 30) g")  # fmt: skip
#: changes to rows the snapshot read (5), will read (15, 25), and a new row (31)
STOCK_CHANGES = ("UPDATE stock SET qty = 500 WHERE id = 5",
                 "UPDATE stock SET qty = 1500 WHERE id = 15",
                 "DELETE FROM stock WHERE id = 25",
                 "INSERT INTO stock VALUES (31, 31)")  # fmt: skip


class Planner:
    """The source's reader driven as Spark's planner drives it: offsets, partitions, commit."""

    def __init__(self, postgres: Postgres, tmp_path: Path, tables: str, max_rows: int) -> None:
        from sparklog.spark.postgres_stream import PostgresStreamReader, config_from_options

        url = f"file://{tmp_path}/root"
        config, _ = config_from_options(
            {"root": url, "dsn": postgres.dsn, "tables": tables, "prefix": "shop",
             "snapshotMaxRows": str(max_rows)}
        )  # fmt: skip
        self.reader = PostgresStreamReader(config, url)
        self.offsets = [self.reader.initialOffset()]
        #: the values of the records of every batch, in order (no tombstones)
        self.got: list[dict] = []

    def batch(self) -> None:
        """One micro-batch: its end, its records, then Spark's commit of it."""
        start, end = self.offsets[-1], self.reader.latestOffset(self.offsets[-1], None)
        for partition in self.reader.partitions(start, end):
            self.got.extend(json.loads(v) for _t, _k, v in self.reader.read(partition) if v)
        self.reader.commit(end)
        self.offsets.append(end)

    def snapshot(self) -> None:
        """Batches until the snapshot is done."""
        self.batch()
        while "snapshot" in self.offsets[-1]:
            self.batch()


def test_changes_during_the_snapshot_come_after_it(postgres: Postgres, tmp_path: Path) -> None:
    """One planner: rows changed between two snapshot batches are in it as of the slot's point."""
    reset(postgres, "stock")
    sql(postgres, *STOCK)
    planner = Planner(postgres, tmp_path, "stock", max_rows=10)
    try:
        planner.batch()  # ids 1-10
        sql(postgres, *STOCK_CHANGES)
        planner.snapshot()
        planner.batch()  # the changes
    finally:
        planner.reader.stop()
    got, offsets = planner.got, planner.offsets
    snapshot = {e["after"]["id"]: e["after"]["qty"] for e in got if e["op"] == "r"}
    assert [e["after"]["id"] for e in got if e["op"] == "r"] == list(range(1, 31))
    assert snapshot == {i: i for i in range(1, 31)}  # as of the slot's point: no change in it
    assert {e["source"]["lsn"] for e in got if e["op"] == "r"} == {offsets[-2]["lsn"]}
    changes = [(e["op"], (e["after"] or e["before"])["id"]) for e in got if e["op"] != "r"]
    assert changes == [("u", 5), ("u", 15), ("d", 25), ("c", 31)]


def test_a_snapshot_stopped_midway_goes_on_where_it_was(
    spark,  # noqa: F811
    postgres: Postgres,
    tmp_path: Path,
) -> None:
    reset(postgres, "stock")
    sql(postgres, *STOCK)
    url = f"file://{tmp_path}/root"
    checkpoint = tmp_path / "ck"
    options = {"tables": "stock", "partitions": "1", "snapshotMaxRows": "10"}
    for first in (True, False):  # batch 0 (ids 1-10), the changes, batch 1 anew (11-20)
        query = start(spark, url, postgres, checkpoint, once=True, **options)
        assert query.awaitTermination(120)
        assert query.exception() is None
        if first:
            sql(postgres, *STOCK_CHANGES)
    # as if the driver died after the sink wrote batch 1 but before Spark's commit of it
    for name in ("1", ".1.crc"):
        (checkpoint / "commits" / name).unlink(missing_ok=True)
    query = start(spark, url, postgres, checkpoint, **options)
    try:
        query.processAllAvailable()  # batch 1 again (skipped by the sink), then the rest
    finally:
        query.stop()
    assert query.exception() is None
    got = events(open_root(url), "shop.public.stock")
    snapshot = [(i, q) for op, i, q in got if op == "r"]
    # every row once; those read after the restart as they were then (15, no 25, 31)
    assert [i for i, _ in snapshot] == [*range(1, 25), *range(26, 32)]
    assert dict(snapshot)[5] == 5 and dict(snapshot)[15] == 1500
    changes = [e for e in got if e[0] != "r"]
    assert changes == [("u", 5, 500), ("u", 15, 1500), ("d", 25, None), ("c", 31, 31)]
    assert got[: len(snapshot)] == [("r", i, q) for i, q in snapshot]  # the snapshot first
    table: dict[int, Any] = {}
    for op, i, q in got:  # applied in order, the records give the table
        if op == "d":
            table.pop(i, None)
        else:
            table[i] = q
    with psycopg.connect(postgres.dsn) as conn:
        assert table == dict(conn.execute("SELECT id, qty FROM stock").fetchall())


def test_snapshot_reads_each_row_once_whatever_the_key(postgres: Postgres, tmp_path: Path) -> None:
    """A composite key (in index order, not the columns'), an empty table, one without a key."""
    reset(postgres, "pairs", "empty", "loose")
    sql(
        postgres,
        "CREATE TABLE pairs (a text, b int, v text, PRIMARY KEY (b, a))",
        "INSERT INTO pairs SELECT x, g, x || g FROM unnest(ARRAY['', ' ', 'a b', 'O''Hara', "
        "'é', 'Z']) x, generate_series(-1, 1) g",
        "CREATE TABLE empty (id int PRIMARY KEY)",
        "CREATE TABLE loose (v text)",
        "INSERT INTO loose SELECT 'v' || g FROM generate_series(1, 7) g",
    )
    planner = Planner(postgres, tmp_path, "pairs,empty,loose", max_rows=4)
    try:
        planner.snapshot()
    finally:
        planner.reader.stop()
    got = planner.got
    assert {e["op"] for e in got} == {"r"} and len(got) == 18 + 7
    pairs = [(e["after"]["a"], e["after"]["b"]) for e in got if e["source"]["table"] == "pairs"]
    with psycopg.connect(postgres.dsn) as conn:
        assert pairs == conn.execute("SELECT a, b FROM pairs ORDER BY b, a").fetchall()
    loose = sorted(e["after"]["v"] for e in got if e["source"]["table"] == "loose")
    assert loose == sorted(f"v{i}" for i in range(1, 8))
    assert len(planner.offsets) == 1 + 7  # ceil(25 / 4) batches, the last one ends it


def test_snapshot_options_are_checked() -> None:
    from sparklog.spark.postgres_stream import config_from_options

    options = {"root": "/r", "dsn": "host=db", "tables": "t", "prefix": "p"}
    with pytest.raises(ConnectorConfigError, match="accepted: initial, never"):
        config_from_options({**options, "snapshot": "always"})
    with pytest.raises(ConnectorConfigError, match="'snapshotMaxRows'=0 not accepted"):
        config_from_options({**options, "snapshotMaxRows": "0"})
