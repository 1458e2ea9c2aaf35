"""PostgreSQL rows and pgoutput changes as Debezium records: shared by both ways the source runs.

The plain-process connector (:mod:`sparklog.connect.postgres`) and the Spark
streaming source (:mod:`sparklog.spark.postgres_stream`) read the slot with the
same SQL (:func:`peek_changes`), decode whole transactions with one
:class:`ChangeDecoder` into :class:`Transaction` objects (each record's topic,
key, value and timestamp, Debezium's envelope, a delete followed by a tombstone),
and confirm a position with :func:`advance`. Only where the records go differs.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from sparklog.connect.pg_types import Converter
from sparklog.connect.pgoutput import (
    Begin,
    Change,
    Column,
    Commit,
    Relation,
    decode,
    lsn_to_int,
)
from sparklog.errors import ConnectorError


@dataclass
class ChangeRecord:
    topic: str
    key: bytes | None
    value: bytes | None
    ts_ms: int


@dataclass
class Transaction:
    xid: int
    end_lsn: int
    records: list[ChangeRecord] = field(default_factory=list)


@functools.cache
def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"sparklog-{version('sparklog')}"
    except PackageNotFoundError:
        return "sparklog"


def peek_changes(
    conn: Any, slot: str, publication: str, max_changes: int | None, upto: str | None = None
) -> tuple[str, list[tuple[str, bytes]]]:
    """(the end read to, the slot's messages up to it): nothing consumed.

    The end is ``upto`` or else the server's flushed WAL position. Whole transactions
    only: the server checks ``max_changes`` (None: no limit) after each commit.
    """
    end = upto or conn.execute("SELECT pg_current_wal_flush_lsn()::text").fetchone()[0]
    rows = conn.execute(
        "SELECT lsn::text, data FROM pg_logical_slot_peek_binary_changes("
        "%s, %s::pg_lsn, %s, 'proto_version', '1', 'publication_names', %s)",
        (slot, end, max_changes, publication),
    ).fetchall()
    return end, rows


def advance(conn: Any, slot: str, lsn: str) -> None:
    """Confirm the slot up to ``lsn``: the server may recycle the WAL before it."""
    conn.execute("SELECT pg_replication_slot_advance(%s, %s::pg_lsn)", (slot, lsn))


def partition_of(key: bytes | None, partitions: int) -> int:
    """The partition of a record's key, as Kafka's murmur2 partitioner picks it."""
    if partitions == 1 or key is None:
        return 0
    from sparklog.client.partitioner import partition_for_key

    return partition_for_key(key, partitions)


def snapshot_marker(
    first_in_snapshot: bool, last_in_snapshot: bool, first_in_table: bool, last_in_table: bool
) -> str:
    """``source.snapshot`` of a snapshot record, as Debezium 2.x marks it.

    ``last`` on the snapshot's last record (what consumers wait for), ``first`` on its
    first, ``last_in_data_collection``/``first_in_data_collection`` on a table's last
    and first, ``true`` on the others; in that order of precedence (one record in one
    table is ``last``), as Debezium's ``RelationalSnapshotChangeEventSource`` does.
    """
    if last_in_snapshot:
        return "last"
    if first_in_snapshot:
        return "first"
    if last_in_table:
        return "last_in_data_collection"
    if first_in_table:
        return "first_in_data_collection"
    return "true"


class ChangeDecoder:
    """Debezium records of snapshot rows and of the slot's decoded transactions."""

    def __init__(
        self,
        prefix: str,
        db: str,
        decimal_handling: str = "precise",
        time_precision: str = "adaptive",
        interval_handling: str = "numeric",
    ) -> None:
        self.prefix = prefix
        self.db = db
        self.converter = Converter(decimal_handling, time_precision, interval_handling)
        self._relations: dict[int, Relation] = {}

    def topic_of(self, schema: str, table: str) -> str:
        return f"{self.prefix}.{schema}.{table}"

    def snapshot_record(
        self,
        schema: str,
        table: str,
        columns: tuple[Column, ...],
        row: Any,
        *,
        xid: int,
        lsn: int,
        now_ns: int,
        marker: str = "true",
    ) -> ChangeRecord:
        """An ``op`` ``r`` record of one row read by the snapshot (text values).

        ``marker`` is ``source.snapshot`` (:func:`snapshot_marker`); ``xid`` the
        snapshot transaction's id, ``lsn`` its consistent point, as Debezium has them.
        """
        source = self._source(schema, table, now_ns, xid, lsn, marker)
        key, value = self._event("r", columns, None, row, source, now_ns)
        return ChangeRecord(self.topic_of(schema, table), key, value, now_ns // 1_000_000)

    def transactions(self, rows: Iterable[tuple[str, bytes]]) -> Iterator[Transaction]:
        """The complete transactions among the slot's ``(lsn, data)`` messages, in order."""
        current: Transaction | None = None
        begin: Begin | None = None
        for lsn_text, data in rows:
            message = decode(data)
            if isinstance(message, Begin):
                begin = message
                current = Transaction(message.xid, 0)
            elif isinstance(message, Relation):
                self._relations[message.oid] = message
            elif isinstance(message, Change) and current is not None and begin is not None:
                current.records.extend(self._change_records(message, lsn_to_int(lsn_text), begin))
            elif isinstance(message, Commit) and current is not None:
                current.end_lsn = message.end_lsn
                yield current
                current = begin = None

    def _change_records(self, change: Change, lsn: int, begin: Begin) -> list[ChangeRecord]:
        relation = self._relations.get(change.relation_oid)
        if relation is None:
            raise ConnectorError(
                f"pgoutput: change for relation {change.relation_oid} before its Relation message"
            )
        topic = self.topic_of(relation.schema, relation.table)
        commit_ms = begin.commit_ts_us // 1000
        now_ns = time.time_ns()
        source = self._source(
            relation.schema, relation.table, begin.commit_ts_us * 1000, begin.xid, lsn, "false"
        )
        old = change.old
        if old is not None and change.old_is_key:
            # a key-only old tuple: Debezium's ``before`` has the key columns, others null
            old = tuple(v if c.key else None for v, c in zip(old, relation.columns, strict=False))
        key, value = self._event(change.op, relation.columns, old, change.new, source, now_ns)
        records = [ChangeRecord(topic, key, value, commit_ms)]
        if change.op == "d":
            records.append(ChangeRecord(topic, key, None, commit_ms))  # tombstone
        return records

    def _source(
        self, schema: str, table: str, ts_ns: int, xid: int, lsn: int, snapshot: str
    ) -> dict[str, Any]:
        """Debezium's ``source`` block: ``ts_*`` the commit time (a snapshot: when read)."""
        return {
            "version": _version(),
            "connector": "postgresql",
            "name": self.prefix,
            "ts_ms": ts_ns // 1_000_000,
            "snapshot": snapshot,
            "db": self.db,
            "sequence": json.dumps([None, str(lsn)]),
            "ts_us": ts_ns // 1000,
            "ts_ns": ts_ns,
            "schema": schema,
            "table": table,
            "txId": xid,
            "lsn": lsn,
            "xmin": None,
        }

    def _row(self, columns: tuple[Column, ...], values: Any) -> dict[str, Any] | None:
        if values is None:
            return None
        return {
            c.name: self.converter.value(v, c.type_oid, c.typmod)
            for c, v in zip(columns, values, strict=False)
        }

    def _event(
        self,
        op: str,
        columns: tuple[Column, ...],
        old: Any,
        new: Any,
        source: dict[str, Any],
        now_ns: int,
    ) -> tuple[bytes | None, bytes]:
        before, after = self._row(columns, old), self._row(columns, new)
        image = after if after is not None else before
        keys = [c.name for c in columns if c.key]
        key = None
        if keys and image is not None:
            key = json.dumps({k: image[k] for k in keys}, separators=(",", ":")).encode()
        value = {
            "before": before,
            "after": after,
            "source": source,
            "op": op,
            "ts_ms": now_ns // 1_000_000,
            # Debezium 2.6+: the same instant in microseconds and nanoseconds
            "ts_us": now_ns // 1000,
            "ts_ns": now_ns,
            "transaction": None,
        }
        return key, json.dumps(value, separators=(",", ":")).encode()
