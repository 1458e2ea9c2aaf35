"""The initial consistent snapshot of PostgreSQL tables: shared by both ways the source runs.

The slot is created on a replication connection with ``EXPORT_SNAPSHOT``; a
``REPEATABLE READ`` read-only transaction imports that snapshot
(``SET TRANSACTION SNAPSHOT``), so every row it reads is as of the slot's
consistent point: each row is either in the snapshot (``op`` ``r``) or a change
the slot gives after it, never both nor neither. The exported snapshot lives only
until the replication connection runs another command or closes, so it is
imported first and the replication connection closed after.

The plain connector (:mod:`sparklog.connect.postgres`) reads each table whole in
that transaction; the Spark source (:mod:`sparklog.spark.postgres_stream`) reads
it in ranges of the table's order key (its primary key, else ``ctid``) so that a
micro-batch is a bounded, repeatable range. Both turn the rows into the same
Debezium records with :meth:`ChangeDecoder.snapshot_record`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sparklog.connect import require, state
from sparklog.connect.changes import ChangeDecoder, ChangeRecord, snapshot_marker
from sparklog.connect.pgoutput import Column, lsn_to_int
from sparklog.errors import ConnectorConfigError

log = logging.getLogger(__name__)

SESSION_OPTIONS = (
    "-c TimeZone=UTC -c DateStyle=ISO -c IntervalStyle=iso_8601 -c bytea_output=hex "
    "-c extra_float_digits=3"
)

#: a position in a table's order key: the key's values in PostgreSQL's text form
KeyValues = tuple[str, ...]


@dataclass(frozen=True)
class SnapshotTable:
    """A captured table's columns, and the key its snapshot is read in order of."""

    schema: str
    table: str
    columns: tuple[Column, ...]
    #: each column's type as ``format_type`` spells it, to cast a key bound back
    types: tuple[str, ...] = ()
    #: each column's place in the primary key (None: not in it), the key's index order
    key_places: tuple[int | None, ...] = ()

    @property
    def key_columns(self) -> list[Column]:
        return [c for c in self.columns if c.key]

    def order_key(self) -> tuple[list[str], list[str]]:
        """(SQL expressions, their types) the snapshot is ordered by: the primary key, else ctid.

        A table without a primary key is read in ``ctid`` order: stable inside one
        transaction (no row version the snapshot sees moves while it is open), but
        not across two, which matters only when a snapshot resumes (docs/connect.md).
        """
        # qualified: ``ORDER BY "id"`` would sort by the output column ``"id"::text``
        table = f'"{self.schema}"."{self.table}"'
        places = self.key_places or tuple(range(len(self.columns)))
        keyed = sorted(
            (p or 0, c, t)
            for p, c, t in zip(places, self.columns, self.types, strict=False)
            if c.key
        )  # in the key's index order, so the index serves the ORDER BY
        if not keyed:
            return [f"{table}.ctid"], ["tid"]
        return [f'{table}."{c.name}"' for _, c, _ in keyed], [t for *_, t in keyed]

    def select(
        self,
        after: KeyValues | None = None,
        upto: KeyValues | None = None,
        limit: int | None = None,
        columns: bool = True,
        ordered: bool = True,
    ) -> tuple[str, list[Any]]:
        """SQL and parameters reading the rows with order key in ``(after, upto]``, in order.

        Each row is the order key's values then (unless ``columns`` is false)
        every column's, all as text (the form pgoutput sends too, so one converter
        handles both). A whole table read once needs no order (``ordered`` false:
        a sequential scan, not the key's index).
        """
        exprs, types = self.order_key()
        selected = [f"{e}::text" for e in exprs]
        if columns:
            selected += [f'"{c.name}"::text' for c in self.columns]
        sql = f'SELECT {", ".join(selected)} FROM "{self.schema}"."{self.table}"'
        where: list[str] = []
        params: list[Any] = []
        row = f"({', '.join(exprs)})"
        bound = "(" + ", ".join(f"%s::{t}" for t in types) + ")"
        if after is not None:
            where.append(f"{row} > {bound}")
            params.extend(after)
        if upto is not None:
            where.append(f"{row} <= {bound}")
            params.extend(upto)
        if where:
            sql += " WHERE " + " AND ".join(where)
        if ordered:
            sql += f" ORDER BY {', '.join(exprs)}"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        return sql, params

    def split(self, row: Sequence[Any]) -> tuple[KeyValues, tuple[Any, ...]]:
        """A row of :meth:`select` as (its order key's values, its columns' values)."""
        width = len(self.order_key()[0])
        return tuple(row[:width]), tuple(row[width:])


def describe_table(conn: Any, schema: str, table: str, db: str) -> SnapshotTable:
    """A table's columns from the catalog; one line naming it if it is missing."""
    rows = conn.execute(
        """
        SELECT a.attname, a.atttypid, a.atttypmod,
               coalesce(a.attnum = ANY(i.indkey), false),
               format_type(a.atttypid, a.atttypmod),
               array_position(i.indkey::int2[], a.attnum)
        FROM pg_attribute a
        JOIN pg_class c ON c.oid = a.attrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace
        LEFT JOIN pg_index i ON i.indrelid = c.oid AND i.indisprimary
        WHERE n.nspname = %s AND c.relname = %s AND c.relkind IN ('r', 'p')
          AND a.attnum > 0 AND NOT a.attisdropped
        ORDER BY a.attnum
        """,
        (schema, table),
    ).fetchall()
    if not rows:
        raise ConnectorConfigError(
            f"table {schema}.{table} not found in database {db!r} (or not a table)"
        )
    return SnapshotTable(
        schema,
        table,
        tuple(Column(n, o, m, bool(k)) for n, o, m, k, _, _ in rows),
        tuple(t for *_, t, _ in rows),
        tuple(p for *_, p in rows),
    )


@dataclass
class Snapshot:
    """An open ``REPEATABLE READ`` read-only transaction the snapshot's rows are read in.

    ``lsn`` is the slot's consistent point (every snapshot record's
    ``source.lsn``), ``xid`` the transaction's id (``txid_current()``, as Debezium
    reads it), every snapshot record's ``source.txId``.
    """

    conn: Any
    lsn: int
    xid: int

    def close(self) -> None:
        """End the transaction (nothing to commit) and its connection."""
        try:
            self.conn.rollback()
        finally:
            self.conn.close()


def connection(dsn: str, **kwargs: Any) -> Any:
    """A PostgreSQL session with the settings every reader of the connector relies on (UTC,
    ISO dates, hex bytea); here, where the snapshot's sessions open, and imported by the
    connector (:mod:`sparklog.connect.postgres`) and the Spark source."""
    require("psycopg")
    import psycopg

    try:
        return psycopg.connect(dsn, autocommit=True, options=SESSION_OPTIONS, **kwargs)
    except psycopg.OperationalError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConnectorConfigError(
            f"cannot connect to PostgreSQL ({state.redact(dsn)}): {first}"
        ) from None


def _repeatable_read(dsn: str, exported: str | None) -> Any:
    """A connection in a read-only REPEATABLE READ transaction, importing ``exported`` if given."""
    from psycopg import IsolationLevel

    conn = connection(dsn)
    conn.autocommit = False
    conn.isolation_level = IsolationLevel.REPEATABLE_READ
    conn.read_only = True
    if exported is not None:
        conn.execute(f"SET TRANSACTION SNAPSHOT '{exported}'")
    return conn


def _xid(conn: Any) -> int:
    """The snapshot transaction's id, as Debezium reads it for ``txId`` (``txid_current()``)."""
    return int(conn.execute("SELECT txid_current()").fetchone()[0])


def create_slot_with_snapshot(dsn: str, slot: str) -> Snapshot:
    """Create the logical slot ``slot`` (pgoutput) and a transaction seeing its exported snapshot.

    The slot must not exist. The replication connection is closed once the
    snapshot is imported: from then on the returned transaction alone holds it.
    """
    import psycopg

    try:
        repl = psycopg.connect(dsn, autocommit=True, replication="database")
    except psycopg.OperationalError as exc:
        raise ConnectorConfigError(
            f"cannot open a replication connection ({state.redact(dsn)}): "
            f"{str(exc).strip().splitlines()[0]}"
        ) from None
    with repl:
        created = repl.execute(
            f'CREATE_REPLICATION_SLOT "{slot}" LOGICAL pgoutput EXPORT_SNAPSHOT'
        ).fetchone()
        assert created is not None  # (slot name, consistent point, snapshot, plugin)
        _slot, point, exported, _plugin = created
        log.info("slot %s created at %s; snapshot %s", slot, point, exported)
        conn = _repeatable_read(dsn, exported)
        snapshot = Snapshot(conn, lsn_to_int(point), _xid(conn))
    return snapshot  # the exporting connection is closed: the import holds the snapshot


def resume_snapshot(dsn: str, lsn: int) -> Snapshot:
    """A new transaction to go on reading a snapshot whose exported one is gone.

    Its rows are as of now, not of the slot's point ``lsn``: the slot still gives
    every change after ``lsn``, so a consumer applying records in order reaches
    the table's state, but a row changed in between appears as ``r`` (newer) and
    then as those changes (docs/connect.md, "restarts during the snapshot").
    """
    conn = _repeatable_read(dsn, None)
    return Snapshot(conn, lsn, _xid(conn))


@dataclass(frozen=True)
class Place:
    """Where a run of rows sits: does it hold its table's first or last row, and is that
    table the snapshot's first or last with rows (for :func:`snapshot_marker`)."""

    table_starts: bool = False
    table_ends: bool = False
    first_table: bool = False
    last_table: bool = False

    def marker(self, index: int, count: int) -> str:
        """``source.snapshot`` of the run's row ``index`` of ``count``."""
        first = self.table_starts and index == 0
        last = self.table_ends and index == count - 1
        return snapshot_marker(first and self.first_table, last and self.last_table, first, last)


def tables_with_rows(snapshot: Snapshot, tables: Sequence[SnapshotTable]) -> list[int]:
    """Indexes of the tables that have a row in the snapshot (the first and last of them
    hold the snapshot's ``first`` and ``last`` records)."""
    return [
        i
        for i, t in enumerate(tables)
        if snapshot.conn.execute(
            f'SELECT EXISTS (SELECT 1 FROM "{t.schema}"."{t.table}")'
        ).fetchone()[0]
    ]


def snapshot_records(
    decoder: ChangeDecoder,
    table: SnapshotTable,
    rows: Sequence[Sequence[Any]],
    snapshot: Snapshot,
    now_ns: int | None = None,
    place: Place = Place(),
) -> list[ChangeRecord]:
    """The ``op`` ``r`` records of rows read by :meth:`SnapshotTable.select`, marked by place."""
    now_ns = time.time_ns() if now_ns is None else now_ns
    return [
        decoder.snapshot_record(
            table.schema,
            table.table,
            table.columns,
            table.split(row)[1],
            xid=snapshot.xid,
            lsn=snapshot.lsn,
            now_ns=now_ns,
            marker=place.marker(i, len(rows)),
        )
        for i, row in enumerate(rows)
    ]
