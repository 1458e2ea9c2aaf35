"""``format("sparklog-postgres")``: PostgreSQL's change stream as a Spark streaming source.

The same capture as ``sparklog connect postgres-source`` (one
:class:`~sparklog.connect.changes.ChangeDecoder`, the same slot SQL), as rows
``(topic, key, value)`` that ``writeStream.format("sparklog")`` writes into the
topics exactly-once (the sink marks each batch):

* **the snapshot** (``snapshot=initial``, the default): the first
  ``latestOffset`` of a query without a checkpoint creates the slot with an
  exported snapshot and keeps a ``REPEATABLE READ`` transaction importing it open
  in the planner (:mod:`sparklog.connect.pg_snapshot`, shared with the plain
  connector); each batch is the ``op`` ``r`` records of up to ``snapshotMaxRows``
  rows, the offsets ``{"lsn": point, "snapshot": {"table": i, "after": key}}``
  saying how far it has read (tables in order, each by primary key, else
  ``ctid``). A planner started again mid-snapshot goes on from its offsets in a
  new transaction (its rows as of then; docs/connect.md);
* **offsets** after it are ``{"lsn": N}``, the commit end LSN of the last
  transaction in the batch, starting at the slot's consistent point (with
  ``snapshot=never``: its confirmed LSN, slot and publication created if missing);
  every setting is checked against the server first;
* ``latestOffset`` peeks the slot (nothing consumed) up to ``maxChanges``
  changes of whole transactions; ``partitions`` decodes exactly the
  transactions in ``(start, end]`` again, so a batch Spark replays after a crash
  is the same records;
* ``commit`` advances the slot to the batch's end only after Spark committed the
  batch: the server keeps the WAL of anything not yet in the topics.

Options: ``dsn``, ``tables`` (comma-separated ``schema.table``), ``prefix``, and
optionally ``name``, ``slot``, ``publication``, ``decimalHandling``,
``timePrecisionMode``, ``intervalHandlingMode``,
``maxChanges``, ``partitions``, ``snapshot``, ``snapshotMaxRows``; ``root`` is the
storage root whose topics get the records (created if missing, with
``partitions``), the one the sink writes to.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.types import BinaryType, StringType, StructField, StructType

from sparklog.errors import ConnectorConfigError

if TYPE_CHECKING:  # the connector (and the storage engine) load when a query starts
    from sparklog.connect.changes import ChangeDecoder, ChangeRecord
    from sparklog.connect.pg_snapshot import KeyValues, Snapshot, SnapshotTable
    from sparklog.connect.postgres import PostgresSourceConfig

NAME = "sparklog-postgres"
#: Debezium's ``snapshot.mode`` names: ``initial`` (snapshot when the query first
#: starts, then changes) or ``never`` (start at the slot)
SNAPSHOT_MODES = ("initial", "never")
SCHEMA = StructType(
    [
        StructField("topic", StringType(), False),
        StructField("key", BinaryType(), True),
        StructField("value", BinaryType(), True),
    ]
)


def config_from_options(options: Mapping[str, str]) -> tuple[PostgresSourceConfig, dict[str, str]]:
    """The connector's settings from Spark options (keys case-insensitive), validated."""
    opts = {str(k).lower(): str(v) for k, v in options.items()}
    missing = [k for k in ("root", "dsn", "tables", "prefix") if not opts.get(k)]
    if missing:
        raise ConnectorConfigError(
            f"format({NAME!r}) needs option(s) {missing}; e.g. .option('dsn', 'host=db "
            "dbname=shop').option('tables', 'public.orders,public.customers')"
            ".option('prefix', 'shop')"
        )

    def number(key: str, default: int) -> int:
        try:
            return int(opts.get(key.lower(), default))
        except ValueError:
            raise ConnectorConfigError(
                f"option {key!r}={opts[key.lower()]!r} not accepted; accepted: a whole number"
            ) from None

    from sparklog.connect.postgres import PostgresSourceConfig

    config = PostgresSourceConfig(
        opts["dsn"],
        [t.strip() for t in opts["tables"].split(",") if t.strip()],
        opts["prefix"],
        name=opts.get("name", ""),
        slot=opts.get("slot", ""),
        publication=opts.get("publication", ""),
        partitions=number("partitions", 1),
        decimal_handling=opts.get("decimalhandling", "precise"),
        time_precision=opts.get("timeprecisionmode", "adaptive"),
        interval_handling=opts.get("intervalhandlingmode", "numeric"),
        max_changes=number("maxChanges", 10_000),
        snapshot_fetch_rows=number("snapshotMaxRows", 10_000),
    )
    config.validate()
    if opts.get("snapshot", "initial") not in SNAPSHOT_MODES:
        raise ConnectorConfigError(
            f"option 'snapshot'={opts['snapshot']!r} not accepted; accepted: "
            f"{', '.join(SNAPSHOT_MODES)}"
        )
    if config.snapshot_fetch_rows < 1:
        raise ConnectorConfigError(
            f"option 'snapshotMaxRows'={config.snapshot_fetch_rows} not accepted; "
            "accepted: 1 or more"
        )
    return config, opts


class PostgresStreamDataSource(DataSource):
    """``spark.readStream.format("sparklog-postgres")``: Debezium records of PostgreSQL changes."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        return SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        config, opts = config_from_options(self.options)
        return PostgresStreamReader(config, opts["root"], opts.get("snapshot", "initial"))


class _Batch(InputPartition):
    """The records of one micro-batch (decoded on the driver, a few thousand at most)."""

    def __init__(self, rows: list[tuple[str, bytes | None, bytes | None]]) -> None:
        self.rows = rows


def _position(offset: Mapping[str, Any]) -> tuple[int, KeyValues | None]:
    """A snapshot offset's (table index, last order key read in it, None: none yet)."""
    mark = offset["snapshot"]
    after = mark.get("after")
    return int(mark["table"]), None if after is None else tuple(after)


def _snapshot_offset(lsn: int, table: int, after: KeyValues | None) -> dict:
    return {
        "lsn": lsn,
        "snapshot": {"table": table, "after": None if after is None else list(after)},
    }


class PostgresStreamReader(DataSourceStreamReader):
    """Offsets are commit LSNs, with the snapshot's position while it runs.

    The planner (one long-lived Python process on the driver) does the work:
    it holds the snapshot's transaction from one micro-batch to the next and
    decodes each batch's records into its partition; executors only hand them
    to Spark. The slot is confirmed in :meth:`commit`, after Spark's commit.
    """

    def __init__(
        self, config: PostgresSourceConfig, root_url: str, snapshot_mode: str = "initial"
    ) -> None:
        self.config = config
        self.root_url = root_url
        self.snapshot_mode = snapshot_mode
        #: this process's open snapshot transaction (None: none, or the snapshot is done)
        self._snapshot: Snapshot | None = None
        #: the captured tables' columns and a decoder knowing the database, read once
        self._tables: tuple[list[SnapshotTable], ChangeDecoder] | None = None

    def _source(self) -> Any:
        """The plain connector's object: its checks, publication and decoder (no running)."""
        from sparklog.connect.postgres import PostgresSource
        from sparklog.spark.roots import cached_root

        return PostgresSource(cached_root(self.root_url, {}), self.config)

    def _connection(self) -> Any:
        from sparklog.connect.postgres import connection

        return connection(self.config.dsn)

    def initialOffset(self) -> dict:
        """Where a query without a checkpoint starts: before the snapshot, or at the slot.

        Spark calls this again for the first batch (also in a restarted planner),
        so it creates nothing the first batch depends on: with a snapshot the slot
        is created by the first :meth:`latestOffset`, whose end Spark logs.
        """
        source = self._source()
        source.check()  # a wrong host, a missing permission, an unknown table: one line
        source.ensure_topics()
        if self.snapshot_mode == "initial":
            return _snapshot_offset(0, 0, None)  # LSN 0: the slot is not created yet
        with self._connection() as conn:
            source.ensure_slot(conn)
            lsn = conn.execute(
                "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s",
                (self.config.slot,),
            ).fetchone()[0]
        from sparklog.connect.pgoutput import lsn_to_int

        return {"lsn": lsn_to_int(lsn)}

    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict:
        if start is not None and "snapshot" in start:
            return self._snapshot_end(start)
        from sparklog.connect.changes import peek_changes

        with self._connection() as conn:
            _end, rows = peek_changes(
                conn, self.config.slot, self.config.publication, self.config.max_changes
            )
        source = self._source()
        ends = [t.end_lsn for t in source.decoder.transactions(rows)]
        known = int((start or {}).get("lsn", 0))
        if not ends:
            if start is None:
                return self.initialOffset()
            return {"lsn": known}
        return {"lsn": max(known, ends[-1])}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        if "snapshot" in start:  # a batch of the snapshot: no change comes before it ends
            return [_Batch([(r.topic, r.key, r.value) for r in self._snapshot_records(start, end)])]
        from sparklog.connect.changes import peek_changes
        from sparklog.connect.pgoutput import int_to_lsn

        low, high = int(start["lsn"]), int(end["lsn"])
        if high <= low:
            return []
        source = self._source()
        with self._connection() as conn:
            source.decoder.db = conn.execute("SELECT current_database()").fetchone()[0]
            _end, rows = peek_changes(
                conn, self.config.slot, self.config.publication, None, upto=int_to_lsn(high)
            )
        batch = [
            (r.topic, r.key, r.value)
            for t in source.decoder.transactions(rows)
            if low < t.end_lsn <= high
            for r in t.records
        ]
        return [_Batch(batch)]

    def read(self, partition: InputPartition) -> Iterator[tuple]:
        assert isinstance(partition, _Batch)
        yield from partition.rows

    def commit(self, end: dict) -> None:
        """Spark committed the batch ending at ``end``: the slot may forget up to there.

        During the snapshot the slot stays at its consistent point (every change
        after it is still to come); past it, the snapshot's transaction ends.
        """
        if "snapshot" in end:
            return
        self._close_snapshot()
        from sparklog.connect.changes import advance
        from sparklog.connect.pgoutput import int_to_lsn

        with self._connection() as conn:
            advance(conn, self.config.slot, int_to_lsn(int(end["lsn"])))

    def stop(self) -> None:
        """The query stops: end the snapshot's transaction if one is open."""
        self._close_snapshot()

    # -- the snapshot -----------------------------------------------------------------------

    def _captured(self) -> tuple[list[SnapshotTable], ChangeDecoder]:
        """The tables in the order the snapshot reads them, and a decoder for their records."""
        if self._tables is None:
            source = self._source()
            found = source.check()
            self._tables = [found[t] for t in self.config.qualified_tables], source.decoder
        return self._tables

    def _close_snapshot(self) -> None:
        if self._snapshot is not None:
            snapshot, self._snapshot = self._snapshot, None
            snapshot.close()

    def _snapshot_at(self, lsn: int) -> Snapshot:
        """The transaction reading the snapshot of slot point ``lsn``; 0: create slot and snapshot.

        The exported snapshot lives in this planner process only: one started
        again (a restart, a failure) goes on in a new transaction
        (:func:`resume_snapshot`, docs/connect.md says what that gives).
        """
        from sparklog.connect.pg_snapshot import resume_snapshot

        if lsn == 0:
            self._close_snapshot()
            with self._connection() as conn:
                self._snapshot = self._source().start_snapshot(conn)
        elif self._snapshot is None or self._snapshot.lsn != lsn:
            self._close_snapshot()
            self._snapshot = resume_snapshot(self.config.dsn, lsn)
        assert self._snapshot is not None
        return self._snapshot

    def _snapshot_end(self, start: dict) -> dict:
        """The end of the next snapshot batch: up to ``snapshotMaxRows`` rows after ``start``.

        The end is the order key of the batch's last row (a range that reads the
        same rows again in the same transaction), or ``{"lsn": point}`` once every
        table is read: the next batches are the slot's changes after that point.
        """
        snapshot = self._snapshot_at(int(start["lsn"]))
        tables, _decoder = self._captured()
        index, after = _position(start)
        budget = self.config.snapshot_fetch_rows
        while index < len(tables):
            table = tables[index]
            sql, params = table.select(after=after, limit=budget, columns=False)
            keys = snapshot.conn.execute(sql, params).fetchall()
            if len(keys) == budget:
                return _snapshot_offset(snapshot.lsn, index, tuple(keys[-1]))
            budget -= len(keys)
            index, after = index + 1, None
        return {"lsn": snapshot.lsn}

    def _snapshot_records(self, start: dict, end: dict) -> list[ChangeRecord]:
        """The ``r`` records of the rows between two snapshot positions, in key order."""
        from sparklog.connect.pg_snapshot import Place, snapshot_records, tables_with_rows

        snapshot = self._snapshot_at(int(end["lsn"]))
        tables, decoder = self._captured()
        first, after = _position(start)
        last, upto = _position(end) if "snapshot" in end else (len(tables), None)
        records: list[ChangeRecord] = []
        with_rows: list[int] | None = None  # tables with rows: where first and last are
        for index in range(first, min(last, len(tables) - 1) + 1):
            low = after if index == first else None
            high = upto if index == last else None
            if index == last and high is None:
                break  # the end is the start of this table
            sql, params = tables[index].select(after=low, upto=high)
            rows = snapshot.conn.execute(sql, params).fetchall()
            if not rows:
                continue
            if with_rows is None:
                with_rows = tables_with_rows(snapshot, tables)
            place = Place(
                table_starts=low is None,
                table_ends=high is None or not _rows_after(snapshot, tables[index], high),
                first_table=index == with_rows[0],
                last_table=index == with_rows[-1],
            )
            records.extend(snapshot_records(decoder, tables[index], rows, snapshot, place=place))
        return records


def _rows_after(snapshot: Any, table: Any, key: tuple[str, ...]) -> bool:
    """Whether ``table`` has a row after order key ``key`` in the snapshot (a range that
    ends on a key may still end the table: then its last row is the table's last)."""
    sql, params = table.select(after=key, limit=1, columns=False)
    return bool(snapshot.conn.execute(sql, params).fetchall())
