"""PostgreSQL -> topics with a real server (Debian's binaries, wal_level=logical).

Types as Debezium maps them; a transaction replayed by the slot after a crash is
skipped by the topic's markers; and the connector process SIGKILLed while rows
are inserted, updated and deleted across three tables, restarted each time: the
topics hold every change exactly once and replaying them gives the tables
(5 kills; ``SPARKLOG_CONNECT_KILLS=N`` for more, about 1.5 s each).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sparklog.connect.postgres import PostgresSource, PostgresSourceConfig
from sparklog.errors import ConnectorConfigError
from sparklog.storage import open_root
from tests.connect.pg_history import (
    REPO,
    TABLES,
    History,
    check_topics_mirror_tables,
    create_tables,
    records,
    sql,
    start_connector,
)
from tests.support.postgres import Postgres
from tests.support.waiting import wait_for

psycopg = pytest.importorskip("psycopg")

KILLS = int(os.environ.get("SPARKLOG_CONNECT_KILLS", "5"))


def test_types_are_written_as_debezium_maps_them(postgres: Postgres, tmp_path: Path) -> None:
    sql(
        postgres,
        "CREATE TABLE typed (id bigint PRIMARY KEY, name text, price numeric(10,2), n numeric, "
        "ts timestamp, ts3 timestamp(3), tz timestamptz, d date, t time, j jsonb, "
        "ints int[], tags text[], b bytea, f float8, ok bool, u uuid, iv interval, t3 time(3), "
        "ttz timetz)",
        "INSERT INTO typed VALUES (1, 'x', 12.50, 3.14159, '2024-01-02 03:04:05.5', "
        "'2024-01-02 03:04:05.5', '2024-01-02 03:04:05+02', '2024-01-02', '01:02:03.25', "
        "'{\"k\": [1, 2]}', '{1,NULL,3}', '{\"a b\",c}', '\\x0102', 1.5, true, "
        "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '1 day 02:00:00.5', '01:02:03.25', "
        "'10:15:30.5+02')",
    )
    root = open_root(f"file://{tmp_path}/root")
    config = PostgresSourceConfig(postgres.dsn, ["typed"], "types", name="types")
    PostgresSource(root, config).run(until_caught_up=True)
    sql(postgres, "UPDATE typed SET name = 'y', price = -0.01, iv = '-1 mon' WHERE id = 1")
    PostgresSource(root, config).run(until_caught_up=True)
    got = records(root, "types.public.typed")
    assert [json.loads(r["key"]) for r in got] == [{"id": 1}, {"id": 1}]
    snap, update = (json.loads(r["value"]) for r in got)
    assert snap["op"] == "r" and update["op"] == "u"
    row = snap["after"]
    assert row == {
        "id": 1,
        "name": "x",
        "price": "BOI=",  # 1250, scale 2: big-endian two's complement, base64
        "n": {"scale": 5, "value": "BMsv"},  # 314159 with its scale (no declared scale)
        "ts": 1704164645500000,  # microseconds
        "ts3": 1704164645500,  # precision 3: milliseconds
        "tz": "2024-01-02T01:04:05Z",
        "d": 19724,  # days since 1970-01-01
        "t": 3723250000,  # microseconds of the day
        "j": '{"k": [1, 2]}',
        "ints": [1, None, 3],
        "tags": ["a b", "c"],
        "b": "AQI=",
        "f": 1.5,
        "ok": True,
        "u": "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
        "iv": 93_600_500_000,  # interval.handling.mode=numeric: microseconds
        "t3": 3_723_250,  # time(3): milliseconds of the day (adaptive)
        "ttz": "08:15:30.5Z",  # timetz in UTC
    }
    assert update["after"]["name"] == "y" and update["after"]["price"] == "/w=="  # -1
    assert update["after"]["iv"] == -2_629_800_000_000  # a month is 30.4375 days
    # the snapshot's one record is its last; its txId is the snapshot transaction's
    assert snap["source"]["snapshot"] == "last" and snap["source"]["txId"] > 0
    assert update["source"]["snapshot"] == "false"
    for event in (snap, update):  # Debezium 2.6+: ts_us and ts_ns beside ts_ms
        for block in (event, event["source"]):
            assert block["ts_us"] // 1000 == block["ts_ms"]
            assert block["ts_ns"] // 1000 == block["ts_us"]
    source = update["source"]
    assert source["connector"] == "postgresql" and source["table"] == "typed"
    assert source["schema"] == "public" and source["db"] == "postgres"
    assert source["txId"] > 0 and source["lsn"] >= snap["source"]["lsn"]


def test_snapshot_records_are_marked_as_debezium_marks_them(
    postgres: Postgres, tmp_path: Path
) -> None:
    """first / first_in_data_collection / true / last_in_data_collection / last, across
    tables (an empty one between) and fetches (2 rows at a time), and one txId."""
    sql(
        postgres,
        "CREATE TABLE m1 (id int PRIMARY KEY)",
        "CREATE TABLE m2 (id int PRIMARY KEY)",
        "CREATE TABLE m3 (id int PRIMARY KEY)",
        "INSERT INTO m1 SELECT generate_series(1, 4)",
        "INSERT INTO m3 SELECT generate_series(1, 3)",
    )
    root = open_root(f"file://{tmp_path}/root")
    config = PostgresSourceConfig(
        postgres.dsn, ["m1", "m2", "m3"], "mk", name="mk", snapshot_fetch_rows=2
    )
    PostgresSource(root, config).run(until_caught_up=True)
    sources = {
        table: [json.loads(r["value"])["source"] for r in records(root, f"mk.public.{table}")]
        for table in ("m1", "m2", "m3")
    }
    assert [s["snapshot"] for s in sources["m1"]] == [
        "first", "true", "true", "last_in_data_collection"
    ]  # fmt: skip
    assert sources["m2"] == []
    assert [s["snapshot"] for s in sources["m3"]] == ["first_in_data_collection", "true", "last"]
    xids = {s["txId"] for rows in sources.values() for s in rows}
    assert len(xids) == 1 and xids.pop() > 0  # the snapshot transaction's id, not 0
    for bad, line in (
        ({"interval_handling": "iso"}, "interval handling 'iso' not accepted"),
        ({"time_precision": "micro"}, "time precision 'micro' not accepted"),
    ):
        with pytest.raises(ConnectorConfigError, match=line):
            PostgresSourceConfig(postgres.dsn, ["m1"], "x", **bad).validate()  # type: ignore[arg-type]


class CrashAfterWrite(PostgresSource):
    """Writes the slot's transactions to the topic, then dies before confirming them."""

    def poll(self, conn: Any) -> int:
        original = self._write_transactions

        def write_then_crash(transactions: Any) -> int:
            written = original(transactions)
            if transactions:
                raise KeyboardInterrupt("crash before the slot is advanced")
            return written

        self._write_transactions = write_then_crash  # type: ignore[method-assign]
        return super().poll(conn)


def test_transactions_replayed_by_the_slot_are_skipped(postgres: Postgres, tmp_path: Path) -> None:
    sql(postgres, "CREATE TABLE replayed (id int PRIMARY KEY, v text)")
    root = open_root(f"file://{tmp_path}/root")
    config = PostgresSourceConfig(postgres.dsn, ["public.replayed"], "rp", name="rp")
    PostgresSource(root, config).run(until_caught_up=True)
    sql(
        postgres,
        "INSERT INTO replayed SELECT g, 'v' || g FROM generate_series(1, 20) g",
        "DELETE FROM replayed WHERE id <= 5",
    )
    with pytest.raises(KeyboardInterrupt):
        CrashAfterWrite(root, config).run(until_caught_up=True)
    assert len(records(root, "rp.public.replayed")) == 30  # 20 inserts, 5 deletes + tombstones
    again = PostgresSource(root, config)
    again.run(until_caught_up=True)  # the slot gives both transactions again
    assert again.stats["skipped"] == 30 and again.stats["changes"] == 0
    assert len(records(root, "rp.public.replayed")) == 30


def test_bad_settings_are_one_line_naming_them(postgres: Postgres, tmp_path: Path) -> None:
    root = open_root(f"file://{tmp_path}/root")
    with pytest.raises(ConnectorConfigError, match=r"table public\.nosuch not found"):
        PostgresSource(root, PostgresSourceConfig(postgres.dsn, ["nosuch"], "x")).run()
    wrong_port = postgres.dsn.replace(f"port={postgres.port}", "port=1")
    with pytest.raises(ConnectorConfigError, match="cannot connect to PostgreSQL"):
        PostgresSource(root, PostgresSourceConfig(wrong_port, ["t"], "x")).run()
    with pytest.raises(ConnectorConfigError, match="decimal handling 'exact' not accepted"):
        PostgresSourceConfig(postgres.dsn, ["t"], "x", decimal_handling="exact").validate()
    cli = subprocess.run(
        [sys.executable, "-m", "sparklog.cli", "-a", str(tmp_path / "root"), "connect",
         "postgres-source", "--dsn", postgres.dsn, "--table", "nosuch", "--prefix", "x"],
        capture_output=True, text=True, cwd=REPO, check=False,
    )  # fmt: skip
    assert cli.returncode == 1
    assert cli.stderr.strip().splitlines() == [
        "error: table public.nosuch not found in database 'postgres' (or not a table)"
    ]
    for flag, value, line in (
        ("--interval-handling", "iso", "error: interval handling 'iso' not accepted; "
         "accepted: numeric, string"),
        ("--time-precision", "nanos", "error: time precision 'nanos' not accepted; "
         "accepted: adaptive, adaptive_time_microseconds, connect"),
    ):  # fmt: skip
        refused = subprocess.run(
            [sys.executable, "-m", "sparklog.cli", "-a", str(tmp_path / "root"), "connect",
             "postgres-source", "--dsn", postgres.dsn, "--table", "t", "--prefix", "x",
             flag, value],
            capture_output=True, text=True, cwd=REPO, check=False,
        )  # fmt: skip
        assert refused.returncode == 1 and refused.stderr.strip().splitlines() == [line]


@pytest.mark.slow
def test_killed_connector_captures_every_change_once(postgres: Postgres, tmp_path: Path) -> None:
    create_tables(postgres)
    history = History()
    history.round(postgres, transactions=10)  # rows before the connector: the snapshot's
    snapshot_rows = sum(len(v) for v in history.live.values())
    url = f"file://{tmp_path}/root"
    root = open_root(url)
    first = start_connector(url, postgres, "--once")
    assert first.wait(timeout=120) == 0, first.stdout.read()

    def total() -> int:
        return sum(len(records(root, f"shop.public.{t}")) for t in TABLES)

    history_before = history.changes
    proc = start_connector(url, postgres)
    try:
        for _ in range(KILLS):
            before = total()
            history.round(postgres)
            wait_for(lambda before=before: total() > before, timeout_s=60, what="progress")
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            proc = start_connector(url, postgres)
        history.round(postgres)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    last = start_connector(url, postgres, "--once")
    assert last.wait(timeout=120) == 0, last.stdout.read()

    ops = check_topics_mirror_tables(root, postgres)
    assert ops["r"] == snapshot_rows
    assert ops["c"] + ops["u"] + ops["d"] == history.changes - history_before
