"""Changes made to PostgreSQL tables by the connector tests, and the topics read back.

:class:`History` inserts, updates and deletes rows of tables ``(id int PRIMARY KEY,
name text, qty int)`` in transactions spanning two tables and counts the changes,
so a test can compare what the topics hold with what it did; :func:`records` reads
a topic whole; :func:`start_connector` starts ``sparklog connect postgres-source`` as
a process that can be SIGKILLed.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from tests.support.postgres import Postgres

REPO = Path(__file__).resolve().parents[2]
TABLES = ("alpha", "beta", "gamma")
#: inserts, updates and deletes one :meth:`History._change` makes in a table
CHANGES_PER_STEP = 14


def sql(pg: Postgres, *statements: str) -> None:
    import psycopg

    with psycopg.connect(pg.dsn, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)


def create_tables(pg: Postgres) -> None:
    sql(pg, *(f"CREATE TABLE {t} (id int PRIMARY KEY, name text, qty int)" for t in TABLES))


def records(root: Any, topic: str) -> list[dict[str, Any]]:
    t = root.topic(topic)
    out = []
    for p in range(t.partitions):
        out.extend(t.partition(p).read(0).to_pylist())
    return out


class History:
    """The row changes the test made, to compare with what the topics hold."""

    def __init__(self) -> None:
        self.rng = random.Random(28)
        self.live: dict[str, set[int]] = {t: set() for t in TABLES}
        self.next_id = 0
        self.changes = 0

    def round(self, pg: Postgres, transactions: int = 12) -> None:
        """``transactions`` transactions, each changing two tables (28 changes)."""
        import psycopg

        with psycopg.connect(pg.dsn, autocommit=False) as conn:
            for _ in range(transactions):
                for table in self.rng.sample(TABLES, 2):
                    self._change(conn, table)
                conn.commit()

    def _change(self, conn: Any, table: str) -> None:
        live = self.live[table]
        for _ in range(10):
            self.next_id += 1
            conn.execute(
                f"INSERT INTO {table} VALUES (%s, %s, %s)", (self.next_id, f"n{self.next_id}", 0)
            )
            live.add(self.next_id)
        picked = self.rng.sample(sorted(live), 4)
        for row in picked[:3]:
            conn.execute(
                f"UPDATE {table} SET qty = qty + 1, name = name || '+' WHERE id = %s", (row,)
            )
        conn.execute(f"DELETE FROM {table} WHERE id = %s", (picked[3],))
        live.discard(picked[3])
        self.changes += CHANGES_PER_STEP


def start_connector(
    root_url: str, pg: Postgres, *extra: str, log: Path | None = None
) -> subprocess.Popen:
    """The connector as a process; its output into ``log`` (appended) or a pipe."""
    out = open(log, "a") if log is not None else subprocess.PIPE  # noqa: SIM115
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "sparklog.cli", "-a", root_url, "connect", "postgres-source",
             "--dsn", pg.dsn, "--prefix", "shop", "--partitions", "2",
             *(a for t in TABLES for a in ("--table", t)), *extra],
            cwd=REPO, stdout=out, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
    finally:
        if log is not None:
            out.close()  # type: ignore[union-attr]


def check_topics_mirror_tables(root: Any, pg: Postgres) -> Counter[str]:
    """Replaying each topic gives its table, and no change is in a topic twice (by LSN).

    Returns how many records of each ``op`` the topics hold.
    """
    import psycopg

    events: list[tuple[int, str, bytes]] = []
    for table in TABLES:
        state: dict[bytes, Any] = {}
        for record in records(root, f"shop.public.{table}"):
            if record["value"] is None:
                assert record["key"] not in state  # a tombstone follows its delete
                continue
            event = json.loads(record["value"])
            events.append((event["source"]["lsn"], event["op"], record["key"]))
            if event["op"] == "d":
                del state[record["key"]]
            else:
                state[record["key"]] = event["after"]
        with psycopg.connect(pg.dsn) as conn:
            rows = conn.execute(f"SELECT id, name, qty FROM {table}").fetchall()
        expected = {
            json.dumps({"id": i}, separators=(",", ":")).encode(): (i, n, q) for i, n, q in rows
        }
        assert {k: (v["id"], v["name"], v["qty"]) for k, v in state.items()} == expected
    duplicated = [e for e, n in Counter(events).items() if n > 1]
    assert not duplicated, duplicated[:5]
    return Counter(op for _, op, _ in events)
