"""PostgreSQL -> topics: a consistent snapshot of tables, then their changes, as Debezium writes.

Start: the settings are checked against the server (reachable, ``wal_level=logical``,
replication permission, every table present), one topic per table
``PREFIX.schema.table`` is created if missing, and a publication and a logical
replication slot (``pgoutput``) are created unless they exist.

Snapshot (:mod:`sparklog.connect.pg_snapshot`, shared with the Spark source):
the slot is created on a replication connection with ``EXPORT_SNAPSHOT``; a
``REPEATABLE READ`` transaction imports that snapshot and reads every table, so
each row is either in the snapshot (``op`` ``r``) or a change after it, never
both nor neither. A crash during the snapshot starts it again (a new slot): its
records are written at least once.

Changes: the slot is read with ``pg_logical_slot_peek_binary_changes`` (plain
SQL on a normal connection: psycopg 3 has no streaming replication protocol),
whole transactions at a time. Each transaction's rows are written with the
transaction's commit end LSN as the sink's marker version (``txn=(app id,
LSN)``), and only then is the slot advanced past it: after a crash the slot
gives the unconfirmed transactions again, and the markers in the topic skip
those already written (exactly once into the topic; at least once if the
topic's markers were lost).

Records: key ``{"pk": value, ...}`` (Debezium's key layout, JSON without schema),
value Debezium's envelope ``{"before", "after", "source", "op", "ts_ms",
"transaction"}`` with ``op`` ``c``/``u``/``d``/``r``; a delete is followed by a
tombstone (the key with a null value) for compaction. Values are converted as
Debezium does (:mod:`sparklog.connect.pg_types`).
"""

from __future__ import annotations

import logging
import re
import threading
import time
from dataclasses import dataclass
from typing import Any

from sparklog.connect import state
from sparklog.connect.changes import (
    ChangeDecoder,
    ChangeRecord,
    Transaction,
    advance,
    partition_of,
    peek_changes,
)
from sparklog.connect.metrics import ConnectorMetrics
from sparklog.connect.pg_snapshot import (
    Place,
    Snapshot,
    SnapshotTable,
    connection,
    create_slot_with_snapshot,
    describe_table,
    snapshot_records,
    tables_with_rows,
)
from sparklog.connect.pg_types import (
    DECIMAL_MODES,
    INTERVAL_MODES,
    TIME_PRECISION_MODES,
    check_mode,
)
from sparklog.connect.pgoutput import int_to_lsn, lsn_to_int
from sparklog.errors import ConnectorConfigError
from sparklog.storage import LogRoot, make_batch

log = logging.getLogger(__name__)

KIND = "postgres-source"
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_$]*$")


@dataclass
class PostgresSourceConfig:
    """Settings of one PostgreSQL source connector (all checked by :meth:`validate`)."""

    dsn: str
    tables: list[str]
    prefix: str
    name: str = ""
    slot: str = ""
    publication: str = ""
    partitions: int = 1
    decimal_handling: str = "precise"
    #: Debezium's ``time.precision.mode`` and ``interval.handling.mode`` (pg_types.py)
    time_precision: str = "adaptive"
    interval_handling: str = "numeric"
    max_changes: int = 10_000
    #: rows fetched at a time by the snapshot; the Spark source's rows per micro-batch
    snapshot_fetch_rows: int = 10_000
    poll_interval_s: float = 0.5

    def __post_init__(self) -> None:
        self.name = self.name or self.prefix
        ident = re.sub(r"[^a-z0-9_]", "_", self.name.lower())
        self.slot = self.slot or f"sparklog_{ident}"
        self.publication = self.publication or f"sparklog_{ident}"

    def validate(self) -> None:
        state.validate_name(self.name)
        if not self.tables:
            raise ConnectorConfigError("postgres-source needs at least one table (schema.table)")
        for table in self.tables:
            parts = table.split(".")
            if len(parts) > 2 or not all(_IDENT.match(p) for p in parts):
                raise ConnectorConfigError(
                    f"table {table!r} not accepted; accepted: 'table' or 'schema.table' "
                    "(unquoted identifiers)"
                )
        for what, value in (("slot", self.slot), ("publication", self.publication)):
            if not _IDENT.match(value) or value != value.lower():
                raise ConnectorConfigError(
                    f"{what} name {value!r} not accepted; accepted: lower-case letters, digits, '_'"
                )
        if not 1 <= self.partitions <= 10_000:
            raise ConnectorConfigError(
                f"partitions={self.partitions} not accepted; accepted: 1-10000"
            )
        check_mode("decimal handling", self.decimal_handling, DECIMAL_MODES)
        check_mode("time precision", self.time_precision, TIME_PRECISION_MODES)
        check_mode("interval handling", self.interval_handling, INTERVAL_MODES)

    def definition(self) -> dict[str, Any]:
        """The settings ``connect run NAME`` starts the connector again with (no password)."""
        return {
            "dsn": state.redact(self.dsn),
            "table": list(self.tables),
            "prefix": self.prefix,
            "slot": self.slot,
            "publication": self.publication,
            "partitions": self.partitions,
            "decimal_handling": self.decimal_handling,
            "time_precision": self.time_precision,
            "interval_handling": self.interval_handling,
        }

    @property
    def qualified_tables(self) -> list[tuple[str, str]]:
        return [tuple(t.split(".")) if "." in t else ("public", t) for t in self.tables]  # type: ignore[misc]

    def topic_of(self, schema: str, table: str) -> str:
        return f"{self.prefix}.{schema}.{table}"


class PostgresSource:
    """The connector: :meth:`run` snapshots (once) then streams changes into the topics."""

    def __init__(
        self,
        root: LogRoot,
        config: PostgresSourceConfig,
        metrics: ConnectorMetrics | None = None,
    ) -> None:
        config.validate()
        self.root = root
        self.config = config
        self.app_id = f"{KIND}:{config.name}"
        self.decoder = ChangeDecoder(
            config.prefix,
            "",
            config.decimal_handling,
            config.time_precision,
            config.interval_handling,
        )
        self.stats = {"snapshot_rows": 0, "changes": 0, "transactions": 0, "skipped": 0}
        self.metrics = metrics
        #: the slot's last confirmed LSN and the WAL bytes the server had beyond it
        self.last_lsn: int | None = None
        self.lag_bytes = 0
        self._progress_saves = state.Throttled()

    # -- checks and setup -------------------------------------------------------------------

    def check(self) -> dict[tuple[str, str], SnapshotTable]:
        """Check the server and tables up front; each problem is one line naming it."""
        with connection(self.config.dsn) as conn:
            wal_level = conn.execute("SHOW wal_level").fetchone()[0]
            if wal_level != "logical":
                raise ConnectorConfigError(
                    f"PostgreSQL wal_level is {wal_level!r}; logical replication needs "
                    "wal_level=logical (postgresql.conf, then a restart)"
                )
            user, can = conn.execute(
                "SELECT current_user, rolreplication OR rolsuper FROM pg_roles "
                "WHERE rolname = current_user"
            ).fetchone()
            if not can:
                raise ConnectorConfigError(
                    f"PostgreSQL role {user!r} lacks the REPLICATION attribute "
                    f"(ALTER ROLE {user} REPLICATION)"
                )
            self.decoder.db = conn.execute("SELECT current_database()").fetchone()[0]
            return {
                (s, t): describe_table(conn, s, t, self.decoder.db)
                for s, t in self.config.qualified_tables
            }

    def ensure_topics(self) -> None:
        existing = set(self.root.list_topics())
        for schema, table in self.config.qualified_tables:
            topic = self.config.topic_of(schema, table)
            if topic not in existing:
                self.root.create_topic(topic, self.config.partitions)

    def _ensure_publication(self, conn: Any) -> None:
        found = conn.execute(
            "SELECT 1 FROM pg_publication WHERE pubname = %s", (self.config.publication,)
        ).fetchone()
        listed = ", ".join(f'"{s}"."{t}"' for s, t in self.config.qualified_tables)
        if found is None:
            conn.execute(f'CREATE PUBLICATION "{self.config.publication}" FOR TABLE {listed}')
            return
        covered = {
            (s, t)
            for s, t in conn.execute(
                "SELECT schemaname, tablename FROM pg_publication_tables WHERE pubname = %s",
                (self.config.publication,),
            ).fetchall()
        }
        missing = [f"{s}.{t}" for s, t in self.config.qualified_tables if (s, t) not in covered]
        if missing:
            raise ConnectorConfigError(
                f"publication {self.config.publication!r} exists but does not publish {missing}"
            )

    def ensure_slot(self, conn: Any) -> None:
        """The publication and the slot, created if missing (no snapshot: ``snapshot=never``)."""
        self._ensure_publication(conn)
        if not self._slot_exists(conn):
            conn.execute(
                "SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (self.config.slot,)
            )

    def start_snapshot(self, conn: Any) -> Snapshot:
        """The slot created anew with an exported snapshot, and a transaction reading as of it.

        A slot left by a snapshot that did not finish is dropped first: its
        snapshot is gone with the connection that exported it.
        """
        self._ensure_publication(conn)
        if self._slot_exists(conn):
            conn.execute("SELECT pg_drop_replication_slot(%s)", (self.config.slot,))
        return create_slot_with_snapshot(self.config.dsn, self.config.slot)

    def _slot_exists(self, conn: Any) -> bool:
        return (
            conn.execute(
                "SELECT 1 FROM pg_replication_slots WHERE slot_name = %s", (self.config.slot,)
            ).fetchone()
            is not None
        )

    # -- running ----------------------------------------------------------------------------

    def run(self, *, until_caught_up: bool = False, stop: threading.Event | None = None) -> None:
        """Snapshot if not done yet, then stream changes (until caught up, or ``stop``)."""
        tables = self.check()
        self.ensure_topics()
        done = state.load(self.root, self.config.name) or {}
        state.save(
            self.root,
            self.config.name,
            kind=KIND,
            dsn=state.redact(self.config.dsn),
            tables=[f"{s}.{t}" for s, t in self.config.qualified_tables],
            topics=[self.config.topic_of(s, t) for s, t in self.config.qualified_tables],
            slot=self.config.slot,
            publication=self.config.publication,
            config=self.config.definition(),
        )
        stop = stop or threading.Event()
        try:
            with connection(self.config.dsn) as conn:
                self._ensure_publication(conn)
                if not (done.get("snapshot_done") and self._slot_exists(conn)):
                    self._snapshot(conn, tables)
                while not stop.is_set():
                    progressed = self.poll(conn)
                    if until_caught_up and not progressed:
                        return
                    if not progressed:
                        stop.wait(self.config.poll_interval_s)
        finally:
            self.save_progress(force=True)

    def progress(self) -> dict[str, Any]:
        """What ``connect status`` shows: records written, last LSN, lag in WAL bytes."""
        return {
            **self.stats,
            "last_lsn": None if self.last_lsn is None else int_to_lsn(self.last_lsn),
            "lag_bytes": self.lag_bytes,
        }

    def save_progress(self, force: bool = False) -> None:
        if force or self._progress_saves.due():
            state.save(self.root, self.config.name, progress=self.progress())

    def _snapshot(self, conn: Any, tables: dict[tuple[str, str], SnapshotTable]) -> None:
        """Create the slot with an exported snapshot and write every table's rows as of it."""
        snapshot = self.start_snapshot(conn)
        try:
            ordered = [tables[t] for t in self.config.qualified_tables]
            with_rows = tables_with_rows(snapshot, ordered)
            for index, table in enumerate(ordered):
                if index in with_rows:
                    first, last = index == with_rows[0], index == with_rows[-1]
                    self._snapshot_table(snapshot, table, first, last)
        finally:
            snapshot.close()
        state.save(
            self.root, self.config.name, snapshot_done=True, snapshot_lsn=int_to_lsn(snapshot.lsn)
        )

    def _snapshot_table(
        self, snapshot: Snapshot, table: SnapshotTable, first_table: bool, last_table: bool
    ) -> None:
        """Write one table's rows (a server-side cursor, ``snapshot_fetch_rows`` at a time).

        One fetch ahead, so the table's last row is known when it is written (its
        ``source.snapshot`` marker: :func:`sparklog.connect.changes.snapshot_marker`).
        """
        topic = self.config.topic_of(table.schema, table.table)
        now_ns = time.time_ns()
        sql, params = table.select(ordered=False)
        with snapshot.conn.cursor(name=f"sparklog_snapshot_{table.table}") as cur:
            cur.execute(sql, params)
            rows = cur.fetchmany(self.config.snapshot_fetch_rows)
            starts = True
            while rows:
                following = cur.fetchmany(self.config.snapshot_fetch_rows)
                place = Place(starts, not following, first_table, last_table)
                records = snapshot_records(self.decoder, table, rows, snapshot, now_ns, place)
                self._produce(topic, records, txn=None)
                self.stats["snapshot_rows"] += len(rows)
                if self.metrics is not None:
                    self.metrics.source_progress(
                        self.config.name, records=0, snapshot_rows=len(rows), lsn=None, lag_bytes=0
                    )
                rows, starts = following, False
        log.info("snapshot of %s.%s written", table.schema, table.table)

    # -- changes ----------------------------------------------------------------------------

    def poll(self, conn: Any) -> int:
        """Write the slot's next transactions and confirm them; how many transactions."""
        end, rows = peek_changes(
            conn, self.config.slot, self.config.publication, self.config.max_changes
        )
        transactions = list(self.decoder.transactions(rows))
        written = self._write_transactions(transactions)
        if transactions:
            confirm = int_to_lsn(transactions[-1].end_lsn)
        elif not rows:
            confirm = end  # nothing to send up to ``end``: let the server recycle that WAL
        else:
            confirm = None
        if confirm is not None:
            advance(conn, self.config.slot, confirm)
            self.last_lsn = lsn_to_int(confirm)
        if self.last_lsn is not None:
            self.lag_bytes = max(0, lsn_to_int(end) - self.last_lsn)
        if self.metrics is not None:
            self.metrics.source_progress(
                self.config.name,
                records=written,
                snapshot_rows=0,
                lsn=self.last_lsn,
                lag_bytes=self.lag_bytes,
            )
        self.save_progress()
        return len(transactions)

    def _write_transactions(self, transactions: list[Transaction]) -> int:
        """Write each topic's records of these transactions, skipping what the topic has."""
        if not transactions:
            return 0
        by_topic: dict[str, list[tuple[int, ChangeRecord]]] = {}
        for txn in transactions:
            for record in txn.records:
                by_topic.setdefault(record.topic, []).append((txn.end_lsn, record))
        written = 0
        version = transactions[-1].end_lsn
        for topic_name, items in by_topic.items():
            topic = self.root.topic(topic_name)
            markers = {
                p: topic.partition(p).refresh().txn_versions.get(self.app_id, -1)
                for p in range(topic.partitions)
            }
            fresh = []
            for end_lsn, record in items:
                if markers[partition_of(record.key, topic.partitions)] >= end_lsn:
                    self.stats["skipped"] += 1
                else:
                    fresh.append(record)
            written += self._produce(topic_name, fresh, txn=(self.app_id, version))
        self.stats["changes"] += written
        self.stats["transactions"] += len(transactions)
        return written

    def _produce(
        self, topic_name: str, records: list[ChangeRecord], txn: tuple[str, int] | None
    ) -> int:
        if not records:
            return 0
        topic = self.root.topic(topic_name)
        parts: dict[int, list[ChangeRecord]] = {}
        for record in records:
            parts.setdefault(partition_of(record.key, topic.partitions), []).append(record)
        topic.produce(
            {
                p: make_batch(
                    [r.value for r in rs],
                    keys=[r.key for r in rs],
                    timestamps_ms=[r.ts_ms for r in rs],
                )
                for p, rs in parts.items()
            },
            txn=txn,
        )
        return len(records)


def slot_status(dsn: str, slot: str) -> dict[str, Any]:
    """A slot's confirmed LSN and how many WAL bytes it is behind the server (its lag)."""
    with connection(dsn) as conn:
        row = conn.execute(
            "SELECT confirmed_flush_lsn::text, active, "
            "pg_wal_lsn_diff(pg_current_wal_flush_lsn(), confirmed_flush_lsn)::bigint "
            "FROM pg_replication_slots WHERE slot_name = %s",
            (slot,),
        ).fetchone()
    if row is None:
        return {"slot": slot, "slot_exists": False}
    return {
        "slot": slot,
        "slot_exists": True,
        "confirmed_lsn": row[0],
        "slot_active": row[1],
        "lag_bytes": row[2],
    }


def drop(dsn: str, slot: str, publication: str) -> None:
    """Drop the connector's slot and publication (the slot otherwise keeps WAL forever)."""
    with connection(dsn) as conn:
        if conn.execute(
            "SELECT 1 FROM pg_replication_slots WHERE slot_name = %s", (slot,)
        ).fetchone():
            conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
        conn.execute(f'DROP PUBLICATION IF EXISTS "{publication}"')
