"""``format("sparklog-postgres")``: PostgreSQL's change stream as a Spark streaming source.

The same capture as ``sparklog connect postgres-source`` (one
:class:`~sparklog.connect.changes.ChangeDecoder`, the same slot SQL), as rows
``(topic, key, value)`` that ``writeStream.format("sparklog")`` writes into the
topics exactly-once (the sink marks each batch):

* **offsets** are ``{"lsn": N}``, the commit end LSN of the last transaction in
  the batch; the start is the slot's confirmed LSN (slot and publication created
  if missing, every setting checked against the server first);
* ``latestOffset`` peeks the slot (nothing consumed) up to ``maxChanges``
  changes of whole transactions; ``partitions`` decodes exactly the
  transactions in ``(start, end]`` again, so a batch Spark replays after a crash
  is the same records;
* ``commit`` advances the slot to the batch's end only after Spark committed the
  batch: the server keeps the WAL of anything not yet in the topics.

No initial snapshot: the stream starts at the slot (run the plain connector with
``--once`` first for one; docs/connect.md). Options: ``dsn``, ``tables``
(comma-separated ``schema.table``), ``prefix``, and optionally ``name``,
``slot``, ``publication``, ``decimalHandling``, ``maxChanges``, ``partitions``;
``root`` is the storage root whose topics get the records (created if missing,
with ``partitions``), the one the sink writes to.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.types import BinaryType, StringType, StructField, StructType

from sparklog.errors import ConnectorConfigError

if TYPE_CHECKING:  # the connector (and the storage engine) load when a query starts
    from sparklog.connect.postgres import PostgresSourceConfig

NAME = "sparklog-postgres"
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
        max_changes=number("maxChanges", 10_000),
    )
    config.validate()
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
        return PostgresStreamReader(config, opts["root"])


class _Batch(InputPartition):
    """The records of one micro-batch (decoded on the driver, a few thousand at most)."""

    def __init__(self, rows: list[tuple[str, bytes | None, bytes | None]]) -> None:
        self.rows = rows


class PostgresStreamReader(DataSourceStreamReader):
    """Offsets are commit LSNs; the slot is confirmed in :meth:`commit`, after Spark's commit."""

    def __init__(self, config: PostgresSourceConfig, root_url: str) -> None:
        self.config = config
        self.root_url = root_url

    def _source(self) -> Any:
        """The plain connector's object: its checks, publication and decoder (no running)."""
        from sparklog.connect.postgres import PostgresSource
        from sparklog.spark.roots import cached_root

        return PostgresSource(cached_root(self.root_url, {}), self.config)

    def _connection(self) -> Any:
        from sparklog.connect.postgres import connection

        return connection(self.config.dsn)

    def initialOffset(self) -> dict:
        source = self._source()
        source.check()  # a wrong host, a missing permission, an unknown table: one line
        source.ensure_topics()
        with self._connection() as conn:
            source.ensure_slot(conn)
            lsn = conn.execute(
                "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s",
                (self.config.slot,),
            ).fetchone()[0]
        from sparklog.connect.pgoutput import lsn_to_int

        return {"lsn": lsn_to_int(lsn)}

    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict:
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
        """Spark committed the batch ending at ``end``: the slot may forget up to there."""
        from sparklog.connect.changes import advance
        from sparklog.connect.pgoutput import int_to_lsn

        with self._connection() as conn:
            advance(conn, self.config.slot, int_to_lsn(int(end["lsn"])))
