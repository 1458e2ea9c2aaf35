"""The sink (``df.write`` / ``df.writeStream`` ``.format("sparklog")``), exactly-once.

Columns are those of Spark's Kafka sink.  The DataFrame schema is checked on
the driver, before any task runs.  Executors partition rows (explicit
``partition``, else Kafka's murmur2 of ``key``, else round-robin), write Arrow
objects with ``Topic.write`` and return the *staged* segments in their commit
messages; nothing is visible yet.  The driver's ``commit`` appends each
partition's segments in one log commit marked ``(app id, batch id)`` (handed, marker
included, to the broker whose journal leases the shard, if one does:
:mod:`sparklog.client.handover`); a batch
that Spark replays after a failure finds its marker and is skipped, so each
record lands exactly once.  Batch writes with Delta's ``txnAppId`` and
``txnVersion`` options get the same marker ``(txnAppId, txnVersion)``: a
version a partition already holds (or an older one) is skipped, which makes
``foreachBatch`` exactly-once in every output mode.  ``abort`` deletes nothing: a commit may already
have published some objects, and unreferenced ones are collected by GC.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    ByteType,
    DataType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructType,
    TimestampType,
)

from sparklog.client import handover
from sparklog.client.partitioner import partitions_for_keys
from sparklog.errors import (
    InvalidRecordError,
    SinkColumnError,
    SparkSourceError,
    UnknownTopicOrPartitionError,
)
from sparklog.spark.compat import DataSourceStreamArrowWriter
from sparklog.spark.options import SinkOptions
from sparklog.spark.roots import cached_root
from sparklog.storage import Segment, Topic
from sparklog.topic_partition import TopicPartition

log = logging.getLogger(__name__)

#: Buffered bytes per task after which an object is written (bounded executor memory).
FLUSH_BYTES = 64 << 20
RECORD_COLUMNS = ("key", "value", "timestamp", "headers")
QUERY_ID_PROPERTY = "sql.streaming.queryId"
BATCH_ID_PROPERTY = "streaming.sql.batchId"


def _is_headers(t: DataType) -> bool:
    if not isinstance(t, ArrayType) or not isinstance(t.elementType, StructType):
        return False
    fields = {f.name: f.dataType for f in t.elementType.fields}
    return (
        set(fields) == {"key", "value"}
        and isinstance(fields["key"], StringType)
        and isinstance(fields["value"], BinaryType | StringType)
    )


ACCEPTED: dict[str, tuple[str, Any]] = {
    "value": ("binary, string (or the topic's struct on a typed topic)", None),
    "key": ("binary, string", (BinaryType, StringType)),
    "topic": ("string", (StringType,)),
    "partition": ("int", (IntegerType, ShortType, ByteType, LongType)),
    "timestamp": ("timestamp", (TimestampType,)),
    "headers": ("array<struct<key: string, value: binary>>", _is_headers),
}


def validate_sink_schema(schema: StructType, options: SinkOptions) -> None:
    """Refuse a DataFrame the sink cannot write, naming the column and accepted types.

    Runs on the driver before any task, so nothing is written.  Columns other
    than Kafka's are ignored, as Spark's Kafka sink does.
    """
    columns = {f.name.lower(): f.dataType for f in schema.fields}
    if "value" not in columns:
        raise SinkColumnError(
            "the DataFrame has no 'value' column, which is required; accepted types: "
            + ACCEPTED["value"][0]
        )
    value_type = columns["value"]
    if not isinstance(value_type, BinaryType | StringType | StructType):
        raise SinkColumnError(
            f"column 'value' has type {value_type.simpleString()}; accepted: "
            + ACCEPTED["value"][0]
        )
    for name, (accepted, check) in ACCEPTED.items():
        if name == "value" or name not in columns:
            continue
        dtype = columns[name]
        ok = (
            check(dtype)
            if callable(check) and not isinstance(check, tuple)
            else (isinstance(dtype, check))
        )
        if not ok:
            raise SinkColumnError(
                f"column {name!r} has type {dtype.simpleString()}; accepted: {accepted}"
            )
    if options.topic is None and "topic" not in columns:
        raise SinkColumnError(
            "no topic to write to: the DataFrame has no 'topic' column and the 'topic' option "
            "is not set"
        )
    if options.topic is not None:
        root = cached_root(options.root, options.storage_options)
        try:
            info = root.describe_topic(options.topic)
        except UnknownTopicOrPartitionError:
            raise SinkColumnError(
                f"topic {options.topic!r} does not exist in {options.root}; create it first "
                "(sparklog topics create)"
            ) from None
        if isinstance(value_type, StructType) and info.value_type is None:
            raise SinkColumnError(
                f"column 'value' has type {value_type.simpleString()}; topic {options.topic!r} "
                "is not typed and accepts: binary, string"
            )


@dataclass
class SinkCommitMessage(WriterCommitMessage):
    """Staged segments of one task: (topic, topic id, partition, segment) in write order."""

    segments: list[tuple[str, str, int, dict[str, Any]]] = field(default_factory=list)
    query_id: str | None = None
    batch_id: int | None = None
    records: int = 0


class _TaskWriter:
    """One task's buffered output, flushed as one object per topic."""

    def __init__(self, options: SinkOptions, task_index: int) -> None:
        self.options = options
        self.root = cached_root(options.root, options.storage_options)
        self.topics: dict[str, Topic] = {}
        self.buffers: dict[str, dict[int, list[pa.RecordBatch]]] = {}
        self.buffered_bytes: dict[str, int] = {}
        self.next_partition = task_index  # round-robin for keyless rows, deterministic per task
        self.message = SinkCommitMessage()

    def topic(self, name: str) -> Topic:
        handle = self.topics.get(name)
        if handle is None:
            try:
                handle = self.topics[name] = self.root.topic(name)
            except UnknownTopicOrPartitionError:
                raise SparkSourceError(
                    f"topic {name!r} (from the 'topic' column) does not exist in "
                    f"{self.options.root}; create it first"
                ) from None
        return handle

    def add(self, batch: pa.RecordBatch) -> None:
        import pyarrow.compute as pc

        if not batch.num_rows:
            return
        names = {n.lower(): n for n in batch.schema.names}
        if self.options.topic is not None:
            self._add_topic(self.options.topic, batch, names)
            return
        topics = batch.column(names["topic"])
        if topics.null_count:
            raise SparkSourceError(
                "column 'topic' is null in some rows and the 'topic' option is not set; "
                "every row needs a topic"
            )
        for name in pc.unique(topics).to_pylist():
            self._add_topic(name, batch.filter(pc.equal(topics, name)), names)

    def _partitions(self, batch: pa.RecordBatch, names: dict[str, str], count: int) -> np.ndarray:
        import pyarrow.compute as pc

        n = batch.num_rows
        parts = np.full(n, -1, dtype=np.int64)
        if "partition" in names:
            given = batch.column(names["partition"])
            parts = pc.fill_null(given.cast(pa.int64()), -1).to_numpy(zero_copy_only=False).copy()
        todo = parts < 0
        if "partition" in names:
            bad = (parts >= count) | (
                (parts < 0)
                & batch.column(names["partition"]).is_valid().to_numpy(zero_copy_only=False)
            )
            if bad.any():
                value = int(parts[np.nonzero(bad)[0][0]])
                raise SparkSourceError(
                    f"column 'partition' has value {value}; accepted: 0-{count - 1} for this "
                    "topic (or null to partition by key)"
                )
        if "key" in names and todo.any():
            keyed = partitions_for_keys(batch.column(names["key"]), count).astype(np.int64)
            use = todo & (keyed >= 0)
            parts[use] = keyed[use]
            todo &= ~use
        spread = int(todo.sum())
        if spread:
            parts[todo] = (self.next_partition + np.arange(spread)) % count
            self.next_partition = (self.next_partition + spread) % count
        return parts

    def _add_topic(self, name: str, batch: pa.RecordBatch, names: dict[str, str]) -> None:
        topic = self.topic(name)
        parts = self._partitions(batch, names, topic.partitions)
        present = {c: batch.column(names[c]) for c in RECORD_COLUMNS if c in names}
        try:
            records = topic.normalize(pa.table(present))
        except InvalidRecordError as exc:
            raise SparkSourceError(f"cannot write to topic {name!r}: {exc}") from exc
        table = pa.Table.from_batches(records)
        buffer = self.buffers.setdefault(name, {})
        present_partitions = np.unique(parts)
        added = 0
        for p in present_partitions:
            chosen = table if len(present_partitions) == 1 else table.filter(pa.array(parts == p))
            buffer.setdefault(int(p), []).extend(chosen.to_batches())
            added += chosen.nbytes
        self.message.records += batch.num_rows
        self.buffered_bytes[name] = self.buffered_bytes.get(name, 0) + added
        if self.buffered_bytes[name] >= FLUSH_BYTES:
            self.flush(name)

    def flush(self, name: str) -> None:
        parts = self.buffers.pop(name, {})
        self.buffered_bytes.pop(name, None)
        if not parts:
            return
        topic = self.topics[name]
        staged = topic.write(parts, self.options.compression, validated=True)
        for p in sorted(staged):
            self.message.segments.append((name, topic.info.topic_id, p, staged[p].to_json()))

    def finish(self) -> SinkCommitMessage:
        for name in sorted(self.buffers):
            self.flush(name)
        return self.message


def write_task(
    options: SinkOptions, batches: Iterator[pa.RecordBatch], *, streaming: bool
) -> SinkCommitMessage:
    """Executor side: write the task's rows as staged objects; return their segments."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    task_index = ctx.partitionId() if ctx is not None else 0
    query_id = batch_id = None
    if streaming and ctx is not None:
        query_id = ctx.getLocalProperty(QUERY_ID_PROPERTY)
        raw = ctx.getLocalProperty(BATCH_ID_PROPERTY)
        batch_id = int(raw) if raw is not None else None
    writer = _TaskWriter(options, task_index)
    for batch in batches:
        writer.add(batch)
    message = writer.finish()
    message.query_id = query_id
    message.batch_id = batch_id
    return message


def commit_segments(
    options: SinkOptions,
    messages: list[WriterCommitMessage | None],
    txn: tuple[str, int] | None,
) -> None:
    """Driver side: append each partition's staged segments in one commit (txn-marked)."""
    root = cached_root(options.root, options.storage_options)
    by_partition: dict[TopicPartition, list[Segment]] = {}
    topic_ids: dict[str, str] = {}
    for message in messages:
        if not isinstance(message, SinkCommitMessage):
            continue
        for name, topic_id, p, raw in message.segments:
            if topic_ids.setdefault(name, topic_id) != topic_id:
                raise SparkSourceError(f"topic {name!r} was deleted and created during the write")
            by_partition.setdefault(TopicPartition(name, p), []).append(Segment.from_json(raw))
    by_topic: dict[str, dict[int, list[Segment]]] = {}
    for (name, p), segments in sorted(by_partition.items()):
        by_topic.setdefault(name, {})[p] = segments
    for name, parts in sorted(by_topic.items()):
        topic: Topic = root.topic(name)
        if topic.info.topic_id != topic_ids[name]:
            raise SparkSourceError(
                f"topic {name!r} was deleted and created again during the write; "
                "its records were not committed"
            )
        # one atomic commit per shard: the batch lands in all its partitions or none
        # handed to the leader where a broker's journal leases the shard
        results = handover.commit(root, topic, parts, txn=txn)
        skipped = sorted(p for p, r in results.items() if r.duplicate)
        if skipped:
            log.info("%s partitions %s already have %s: skipped (replay)", name, skipped, txn)


class SparklogBatchWriter(DataSourceArrowWriter):
    """``df.write.format("sparklog")``: each task stages objects, the driver commits them."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
        return write_task(self.options, iterator, streaming=False)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        opts = self.options
        txn = None
        if opts.txn_app_id is not None and opts.txn_version is not None:
            txn = (opts.txn_app_id, opts.txn_version)
        commit_segments(opts, messages, txn=txn)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        staged = sum(len(m.segments) for m in messages if isinstance(m, SinkCommitMessage))
        log.warning("write aborted; %d staged segments left for garbage collection", staged)


class SparklogStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("sparklog")``: exactly-once via (app id, batch id) markers."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
        return write_task(self.options, iterator, streaming=True)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        if not any(isinstance(m, SinkCommitMessage) and m.segments for m in messages):
            return
        query_ids = {m.query_id for m in messages if isinstance(m, SinkCommitMessage)}
        query_ids.discard(None)
        app_id = self.options.txn_app_id
        if app_id is None:
            if len(query_ids) != 1:
                raise SparkSourceError(
                    f"cannot identify the streaming query of batch {batchId} (query ids "
                    f"{sorted(str(q) for q in query_ids)}); set option 'txnAppId'"
                )
            app_id = f"spark-{query_ids.pop()}"
        commit_segments(self.options, messages, txn=(app_id, batchId))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        staged = sum(len(m.segments) for m in messages if isinstance(m, SinkCommitMessage))
        log.warning(
            "batch %d aborted; %d staged segments left for garbage collection", batchId, staged
        )
