"""Exactly-once writes of Arrow tables into a Delta table through delta-rs.

Each write carries Delta's app transaction id (``txnAppId`` = the connector's id,
``txnVersion`` = the Spark batch id): the version is recorded in the same Delta
commit as the data, so a batch replayed after a crash (Spark re-runs a batch whose
checkpoint commit it did not write) finds its version already in the table and is
skipped. This is the mechanism delta-spark's own ``txnAppId``/``txnVersion``
options use, so delta-spark, delta-rs, DuckDB and Polars read the tables alike.

``append`` adds the rows. ``upsert`` merges by the record key (``_key``): the last
record of a key in a batch wins, a tombstone (all value columns null, as a Kafka
delete) deletes the row. The table is created by the first non-empty batch, with
that batch's schema and the partition columns asked for.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import pyarrow as pa
import pyarrow.compute as pc

from sparklog.connect import require
from sparklog.errors import ConnectorConfigError, ConnectorError

log = logging.getLogger(__name__)

Mode = Literal["append", "upsert"]
MODES = ("append", "upsert")
#: the record metadata columns every row carries beside the value's columns
KEY, TOPIC, PARTITION, OFFSET, TIMESTAMP = "_key", "_topic", "_partition", "_offset", "_timestamp"
METADATA_COLUMNS = (KEY, TOPIC, PARTITION, OFFSET, TIMESTAMP)


@dataclass(frozen=True)
class DeltaTarget:
    """One Delta table and the id under which a connector writes to it."""

    uri: str
    app_id: str
    mode: Mode = "append"
    partition_by: Sequence[str] = ()
    storage_options: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ConnectorConfigError(
                f"Delta sink mode {self.mode!r} not accepted; accepted: {', '.join(MODES)}"
            )
        if not self.app_id:
            raise ConnectorConfigError("the Delta sink needs an app id (txnAppId): got ''")
        if self.mode == "upsert" and self.partition_by:
            raise ConnectorConfigError(
                "mode 'upsert' merges by key and does not take partition columns "
                f"(got {list(self.partition_by)})"
            )

    def _open(self) -> object | None:
        require("deltalake")
        from deltalake import DeltaTable
        from deltalake.exceptions import TableNotFoundError

        try:
            return DeltaTable(self.uri, storage_options=dict(self.storage_options) or None)
        except TableNotFoundError:
            return None

    def committed_version(self) -> int | None:
        """The newest batch version this app id committed to the table (None: none yet)."""
        table = self._open()
        if table is None:
            return None
        version = table.transaction_version(self.app_id)  # type: ignore[attr-defined]
        return None if version is None else int(version)

    def write(self, data: pa.Table, version: int) -> bool:
        """Write ``data`` as batch ``version`` unless the table has it; True if written."""
        from deltalake import CommitProperties, Transaction, write_deltalake

        table = self._open()
        if table is not None:
            done = table.transaction_version(self.app_id)  # type: ignore[attr-defined]
            if done is not None and done >= version:
                log.info("%s: batch %d already committed (app %s)", self.uri, version, self.app_id)
                return False
        if data.num_rows == 0:
            return False
        missing = [c for c in self.partition_by if c not in data.column_names]
        if missing:
            raise ConnectorConfigError(
                f"partition column(s) {missing} not in the rows; columns: {data.column_names}"
            )
        commit = CommitProperties(app_transactions=[Transaction(self.app_id, version)])
        options = dict(self.storage_options) or None
        if self.mode == "upsert":
            data = last_per_key(data)
            if table is not None:
                self._merge(table, data, commit)
                return True
            data = data.filter(pc.invert(tombstones(data)))
        write_deltalake(
            self.uri,
            data,
            mode="append",
            partition_by=list(self.partition_by) or None,
            storage_options=options,
            commit_properties=commit,
        )
        return True

    def _merge(self, table: object, data: pa.Table, commit: object) -> None:
        gone = tombstones(data)
        source = data.append_column("_sparklog_deleted", gone)
        columns = [c for c in data.column_names]
        merger = table.merge(  # type: ignore[attr-defined]
            source,
            predicate=f"t.{KEY} = s.{KEY}",
            source_alias="s",
            target_alias="t",
            commit_properties=commit,
        )
        updates = {f"`{c}`": f"s.`{c}`" for c in columns}
        (
            merger.when_matched_delete(predicate="s._sparklog_deleted")
            .when_matched_update(updates=updates, predicate="NOT s._sparklog_deleted")
            .when_not_matched_insert(updates=updates, predicate="NOT s._sparklog_deleted")
            .execute()
        )


def value_columns(data: pa.Table) -> list[str]:
    """The columns of ``data`` that hold the record's value (every non-metadata column)."""
    return [c for c in data.column_names if c not in METADATA_COLUMNS]


def tombstones(data: pa.Table) -> pa.ChunkedArray | pa.Array:
    """True where a row is a delete: every value column null (Kafka's tombstone)."""
    columns = value_columns(data)
    if not columns:
        return pa.array([False] * data.num_rows)
    gone = pc.is_null(data.column(columns[0]))
    for name in columns[1:]:
        gone = pc.and_(gone, pc.is_null(data.column(name)))
    return gone


def last_per_key(data: pa.Table) -> pa.Table:
    """The last record of each key (by partition, offset): what a merge must apply."""
    if KEY not in data.column_names:
        raise ConnectorConfigError(
            f"mode 'upsert' needs the {KEY!r} column; columns: {data.column_names}"
        )
    if data.column(KEY).null_count:
        at = pc.index(pc.is_null(data.column(KEY)), True).as_py()
        where = ""
        if PARTITION in data.column_names and OFFSET in data.column_names:
            where = (
                f" (partition {data.column(PARTITION)[at].as_py()}, "
                f"offset {data.column(OFFSET)[at].as_py()})"
            )
        raise ConnectorError(f"mode 'upsert' merges by key, and a record has no key{where}")
    order = [(KEY, "ascending")]
    order += [(c, "ascending") for c in (PARTITION, OFFSET) if c in data.column_names]
    indices = pc.sort_indices(data, sort_keys=order)
    ordered = data.take(indices)
    keys = ordered.column(KEY)
    if ordered.num_rows < 2:
        return ordered
    # a row is its key's last when the next row has another key
    nxt = keys.slice(1)
    cur = keys.slice(0, ordered.num_rows - 1)
    last = pc.not_equal(cur, nxt)
    mask = (
        pa.concat_arrays([*(c for c in last.chunks), pa.array([True])])
        if isinstance(last, pa.ChunkedArray)
        else pa.concat_arrays([last, pa.array([True])])
    )
    return ordered.filter(mask)
