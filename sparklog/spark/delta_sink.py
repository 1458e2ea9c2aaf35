"""Topic -> Delta table: the ``foreachBatch`` function and the ``delta-sink`` query.

Spark with delta-spark's jars writes Delta itself; where they are missing (no Maven,
as here) this module writes through delta-rs from ``foreachBatch``, exactly-once by
Delta's app transaction ids (:mod:`sparklog.connect.delta`): ``txnAppId`` is the
connector's id, ``txnVersion`` the batch id, so a batch Spark replays after a
crash is found in the table and skipped.

Rows: the value's columns (a typed topic's fields, or a bytes topic's JSON parsed
with a given schema, or the raw ``value`` bytes), then the record's ``_key``,
``_topic``, ``_partition``, ``_offset`` and ``_timestamp``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sparklog.connect.delta import METADATA_COLUMNS, MODES, DeltaTarget, Mode
from sparklog.errors import ConnectorConfigError
from sparklog.spark.delta_writers import resolve_writer, validate_writer, write_with_delta_spark

log = logging.getLogger(__name__)

VALUE_FORMATS = ("auto", "typed", "json", "raw", "debezium")


@dataclass
class DeltaForeachBatch:
    """``writeStream.foreachBatch(DeltaForeachBatch(table, app_id=...))``: exactly-once Delta.

    ``value_format``: ``auto`` (typed topics as their fields, bytes topics raw),
    ``typed``, ``json`` (needs ``value_schema``, a DDL string such as
    ``"id INT, name STRING"``), ``raw`` (one ``value`` column as the topic has it) or
    ``debezium`` (a Debezium envelope's ``after`` row, ``value_schema`` being the
    row's columns: with ``mode="upsert"`` a delete removes the row, so the Delta
    table mirrors the source table).
    """

    table: str
    app_id: str
    value_format: str = "auto"
    value_schema: str | None = None
    mode: Mode = "append"
    partition_by: Sequence[str] = ()
    storage_options: Mapping[str, str] = field(default_factory=dict)
    #: ``auto`` (delta-spark where its jars are loaded, else delta-rs), ``delta-rs``,
    #: ``delta-spark`` (sparklog/spark/delta_writers.py)
    writer: str = "auto"
    #: called with (batch id, the batch's rows) after each batch is committed to the table
    on_progress: Callable[[int, Any], None] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.value_format not in VALUE_FORMATS:
            raise ConnectorConfigError(
                f"value format {self.value_format!r} not accepted; accepted: "
                f"{', '.join(VALUE_FORMATS)}"
            )
        if self.value_format in ("json", "debezium") and not self.value_schema:
            raise ConnectorConfigError(
                f"value format {self.value_format!r} needs a value schema (DDL, e.g. "
                "'id INT, name STRING')"
            )
        if self.mode not in MODES:
            raise ConnectorConfigError(
                f"Delta sink mode {self.mode!r} not accepted; accepted: {', '.join(MODES)}"
            )
        self.partition_by = tuple(self.partition_by)
        validate_writer(self.writer)
        self._resolved: str | None = None

    @property
    def target(self) -> DeltaTarget:
        return DeltaTarget(
            self.table, self.app_id, self.mode, self.partition_by, dict(self.storage_options)
        )

    def resolved_writer(self, spark: Any) -> str:
        """The writer this sink uses in ``spark``'s session (looked up once)."""
        if self._resolved is None:
            self._resolved = resolve_writer(spark, self.writer)
            log.info("%s: Delta writer %s", self.table, self._resolved)
        return self._resolved

    def __call__(self, df: Any, batch_id: int) -> None:
        if self.resolved_writer(df.sparkSession) == "delta-spark":
            rows = delta_rows(df, self.value_format, self.value_schema)
            write_with_delta_spark(
                rows,
                self.table,
                app_id=self.app_id,
                batch_id=batch_id,
                mode=self.mode,
                partition_by=tuple(self.partition_by),
                value_columns=[c for c in rows.columns if c not in METADATA_COLUMNS],
            )
            if self.on_progress is not None:
                self.on_progress(batch_id, rows.select(*METADATA_COLUMNS).toArrow())
            return
        target = self.target
        done = target.committed_version()
        if done is not None and done >= batch_id:
            log.info(
                "%s: batch %d already in the table (app %s)", self.table, batch_id, self.app_id
            )
            return
        rows = delta_rows(df, self.value_format, self.value_schema).toArrow()
        target.write(rows, batch_id)
        if self.on_progress is not None:
            self.on_progress(batch_id, rows)


def delta_rows(df: Any, value_format: str = "auto", value_schema: str | None = None) -> Any:
    """The rows a topic's DataFrame lands as: value columns, then the record's metadata."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import BinaryType, StructField, StructType

    meta = [F.col(name[1:]).alias(name) for name in METADATA_COLUMNS]
    value_type = df.schema["value"].dataType
    fmt = value_format
    if fmt == "auto":
        fmt = "typed" if isinstance(value_type, StructType) else "raw"
    if fmt == "raw":
        return df.select(F.col("value"), *meta)
    if fmt == "typed":
        if not isinstance(value_type, StructType):
            raise ConnectorConfigError(
                f"value format 'typed' needs a typed topic; this topic's value is "
                f"{value_type.simpleString()} (use 'json' with a schema, or 'raw')"
            )
        fields = [f.name for f in value_type.fields]
        value = F.col("value")
    else:
        if not isinstance(value_type, BinaryType):
            raise ConnectorConfigError(
                f"value format {fmt!r} reads bytes values; this topic's value is "
                f"{value_type.simpleString()} (use 'typed')"
            )
        schema = StructType.fromDDL(value_schema or "")
        if not isinstance(schema, StructType):
            raise ConnectorConfigError(
                f"value schema {value_schema!r} is not a list of fields ('id INT, name STRING')"
            )
        fields = [f.name for f in schema.fields]
        text = F.col("value").cast("string")
        if fmt == "debezium":
            envelope = StructType([StructField("after", schema)])
            value = F.from_json(text, envelope).getField("after")
        else:
            value = F.from_json(text, schema)
    clash = sorted(set(fields) & set(METADATA_COLUMNS))
    if clash:
        raise ConnectorConfigError(
            f"value field(s) {clash} clash with the metadata columns {list(METADATA_COLUMNS)}"
        )
    return df.select(*(value.getField(name).alias(name) for name in fields), *meta)


def delta_sink_session(app_name: str, log_path: str) -> Any:
    """The Spark session ``sparklog connect delta-sink`` runs in (spark-submit's, or local).

    A local one logs to ``log_path`` and binds to loopback
    (:func:`sparklog.spark.local_session.start_session`).
    """
    from pyspark.sql import SparkSession

    from sparklog.spark.local_session import start_session

    return start_session(SparkSession.builder.appName(app_name), log_path)


def start_delta_sink(
    spark: Any,
    sink: DeltaForeachBatch,
    *,
    topic: str,
    source_options: Mapping[str, str],
    checkpoint: str,
    once: bool = False,
    max_offsets_per_trigger: int | None = None,
) -> Any:
    """Start ``readStream(topic) -> foreachBatch(sink)``; ``once`` is Trigger.AvailableNow."""
    reader = spark.readStream.format("sparklog").options(**source_options)
    reader = reader.option("subscribe", topic).option("startingOffsets", "earliest")
    if max_offsets_per_trigger is not None:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
    writer = reader.load().writeStream.foreachBatch(sink).option("checkpointLocation", checkpoint)
    writer = (
        writer.trigger(availableNow=True) if once else writer.trigger(processingTime="1 second")
    )
    return writer.queryName(f"sparklog-delta-sink-{topic}").start()
