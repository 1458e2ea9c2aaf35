"""A topic's data handle: staged writes, commits and partition views over its shard logs.

The catalog (names, ids, configs, the root: :mod:`sparklog.storage.catalog`) stays
free of pyarrow; this handle is what loads the record model and the logs, when
:meth:`LogRoot.topic` first opens a topic for data.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from typing import NamedTuple, Protocol

import pyarrow as pa

from sparklog.clock import now_ms
from sparklog.errors import (
    InvalidRecordError,
    PolicyViolationError,
    SparklogError,
    UnknownTopicOrPartitionError,
)
from sparklog.settings import KAFKA_CODECS
from sparklog.storage.background import background_pool, outcome
from sparklog.storage.config import LONG_MAX, timestamp_window
from sparklog.storage.log import (
    STAGED_OBJECT_MAX_AGE_MS,
    AppendResult,
    PartitionLog,
    ProducerBatch,
    ShardLog,
)
from sparklog.storage.objectstore import ObjectStore
from sparklog.storage.records import check_sizes, check_timestamps, normalize, record_schema
from sparklog.storage.segments import Section, Segment, write_object
from sparklog.storage.topic_info import TopicInfo

#: input at least this large has its ``max.message.bytes`` check run beside its
#: object's write; for smaller input the hand-off costs more than it saves
BACKGROUND_CHECK_BYTES = 1 << 20


class Normalized(NamedTuple):
    """One input's records conformed to its topic (see :meth:`Topic.normalize_many`)."""

    batches: list[pa.RecordBatch]
    size_bytes: int


class TopicRoot(Protocol):
    """What a topic handle needs of the root that opened it (a
    :class:`~sparklog.storage.catalog.LogRoot`): its store, its snapshot interval, and the
    topic's current metadata.  A Protocol, so that this module and the catalog, which
    imports it to open topics, do not import each other."""

    @property
    def store(self) -> ObjectStore: ...

    @property
    def snapshot_interval(self) -> int: ...

    def describe_topic(self, name: str) -> TopicInfo: ...


class Topic:
    """A handle on one incarnation of a topic: writes objects, opens shard and partition logs."""

    def __init__(self, root: TopicRoot, info: TopicInfo) -> None:
        self.root = root
        self.info = info
        self.store = root.store.child(f"topics/{info.name}/{info.topic_id}")
        self._shards: dict[int, ShardLog] = {}

    def __repr__(self) -> str:
        return f"Topic({self.info.name!r}, partitions={self.info.partitions})"

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def partitions(self) -> int:
        return self.info.partitions

    @property
    def shards(self) -> int:
        return self.info.shards

    def schema_for(self, schema_id: str) -> pa.Schema:
        """Record schema of objects written under ``schema_id`` ('' = the current one)."""
        if not schema_id:
            return self.info.record_schema
        value_type = self.info.value_types.get(schema_id)
        if value_type is None:
            self.reload()
            value_type = self.info.value_types.get(schema_id)
        return record_schema(value_type)

    def reload(self) -> TopicInfo:
        """Re-read metadata (partitions added, config altered); fail if deleted."""
        info = self.root.describe_topic(self.name)
        if info is self.info:
            return info  # unchanged (the root describes each version of a topic once)
        if info.topic_id != self.info.topic_id:
            raise UnknownTopicOrPartitionError(
                f"topic {self.name!r} (id {self.info.topic_id}) was deleted; a new topic of that "
                f"name has id {info.topic_id}"
            )
        self.info = info
        for shard in self._shards.values():
            self._configure(shard)
        return info

    def _check_partition(self, partition: int) -> None:
        if not 0 <= partition < self.info.partitions:
            self.reload()
            if not 0 <= partition < self.info.partitions:
                raise UnknownTopicOrPartitionError(
                    f"topic {self.name!r} has no partition {partition}; accepted: 0-"
                    f"{self.info.partitions - 1}"
                )

    def _configure(self, shard: ShardLog) -> ShardLog:
        config = self.info.effective_config
        shard.producer_expiration_ms = config["producer.id.expiration.ms"]
        shard.marker_retention_ms = config["marker.retention.ms"]
        return shard

    def open_shard(self, shard: int) -> ShardLog:
        """A new, unshared handle on shard ``shard``'s log (e.g. a broker's separate reader)."""
        return self._configure(
            ShardLog(
                self.store,
                shard,
                topic=self.name,
                topic_id=self.info.topic_id,
                snapshot_interval=self.root.snapshot_interval,
            )
        )

    def shard(self, shard: int) -> ShardLog:
        """This handle's (cached) log of shard ``shard``."""
        log = self._shards.get(shard)
        if log is None:
            if not 0 <= shard < self.info.shards:
                raise UnknownTopicOrPartitionError(
                    f"topic {self.name!r} has no shard {shard}; accepted: 0-{self.info.shards - 1}"
                )
            log = self._shards[shard] = self.open_shard(shard)
        return log

    def partition(self, partition: int) -> PartitionLog:
        """A view of ``partition`` over this handle's log of its shard."""
        self._check_partition(partition)
        return PartitionLog(
            self.shard(self.info.shard_of(partition)), partition, self.schema_for, topic=self.name
        )

    def view(self, shard: ShardLog, partition: int) -> PartitionLog:
        """A view of ``partition`` over a given handle on its shard (see :meth:`open_shard`)."""
        self._check_partition(partition)
        return PartitionLog(shard, partition, self.schema_for, topic=self.name)

    def normalize(
        self, data: pa.RecordBatch | pa.Table, *, check_sizes: bool = True
    ) -> list[pa.RecordBatch]:
        """Validate and conform producer input to this topic's schema and limits.

        ``check_sizes=False`` leaves the ``max.message.bytes`` check to the
        caller (:meth:`write` runs it beside the object's write).
        """
        config = self.info.effective_config
        log_append_time = config["message.timestamp.type"] == "LogAppendTime"
        batches = normalize(
            data,
            self.info.record_schema,
            log_append_time=log_append_time,
            max_message_bytes=config["max.message.bytes"] if check_sizes else None,
        )
        if not log_append_time:  # LogAppendTime stamps the write time: always in the window
            before, after = timestamp_window(self.info.config)
            if before < LONG_MAX or after < LONG_MAX:
                check_timestamps(batches, before, after, now_ms())
        return batches

    def normalize_many(self, inputs: Sequence[pa.RecordBatch | pa.Table]) -> list[Normalized]:
        """:meth:`normalize` of many inputs (a request's partitions), once per input schema.

        Inputs of one schema are normalised as one table (cast, conform, stamp,
        size check: a fixed cost of milliseconds per call) and cut back into
        zero-copy slices, one per input, in order: a request over 1,024
        partitions pays that cost once, not 1,024 times.  Each input's size is
        its share (by rows) of the whole's bytes, which costs nothing per input
        (a slice's ``nbytes`` walks its buffers: tens of µs).  If the whole
        fails, the inputs are normalised one by one so the error names its
        input's record.
        """
        out: list[Normalized] = [Normalized([], 0) for _ in inputs]
        groups: list[tuple[pa.Schema, list[int]]] = []
        for i, data in enumerate(inputs):
            for schema, members in groups:
                if schema.equals(data.schema):
                    members.append(i)
                    break
            else:
                groups.append((data.schema, [i]))
        for _, members in groups:
            if len(members) == 1:
                batches = self.normalize(inputs[members[0]])
                out[members[0]] = Normalized(batches, sum(b.nbytes for b in batches))
                continue
            tables = [
                pa.Table.from_batches([d]) if isinstance(d, pa.RecordBatch) else d
                for d in (inputs[i] for i in members)
            ]
            try:
                # one chunk per column: the size bound then looks at one array, not one per input
                whole = self.normalize(pa.concat_tables(tables).combine_chunks())
            except InvalidRecordError:
                for i in members:
                    self.normalize(inputs[i])  # raises, naming the input's own record
                raise
            single = whole[0] if len(whole) == 1 else _one_batch(whole)
            per_row = single.nbytes / max(single.num_rows, 1)
            start = 0
            for i, table in zip(members, tables, strict=True):
                rows = table.num_rows
                out[i] = Normalized([single.slice(start, rows)], round(per_row * rows))
                start += rows
        return out

    def write(
        self,
        parts: Mapping[int, pa.RecordBatch | pa.Table | Sequence[pa.RecordBatch]],
        compression: str = "none",
        *,
        validated: bool = False,
    ) -> dict[int, Segment]:
        """Upload one object holding every partition's records; return staged segments.

        Large input's ``max.message.bytes`` check runs on the background pool
        beside the object's write (both release the GIL); if it fails, the
        object, which nothing refers to yet, is deleted and the error raised.
        """
        self.check_writable()
        ready: dict[int, list[pa.RecordBatch]] = {}
        unchecked: list[list[pa.RecordBatch]] = []
        for p, data in parts.items():
            if not 0 <= p < self.info.partitions:
                self.partition(p)  # raises with the accepted range
            if validated:
                batches = [data] if isinstance(data, pa.RecordBatch) else list(data)
            elif isinstance(data, pa.RecordBatch | pa.Table):
                defer = data.nbytes >= BACKGROUND_CHECK_BYTES
                batches = self.normalize(data, check_sizes=not defer)
                if defer:
                    unchecked.append(batches)
            else:
                batches = [b for d in data for b in self.normalize(d)]
            ready[p] = batches
        codec = self.codec_for(compression)
        checking = None
        if unchecked:
            limit = self.info.effective_config["max.message.bytes"]
            checking = background_pool().submit(_check_all_sizes, unchecked, limit)
        staged = write_object(
            self.store,
            ready,
            self.info.record_schema,
            compression=codec,
            schema_id=self.info.value_schema_id,
        )
        if checking is not None:
            try:
                outcome(checking, lambda: _check_all_sizes(unchecked, limit))
            except InvalidRecordError:
                for key in {seg.object_key for seg in staged.values()}:
                    with contextlib.suppress(SparklogError):
                        self.store.delete(key)
                raise
        return staged

    def codec_for(self, compression: str) -> str:
        """The codec an object of this topic is written with: the topic's
        ``compression.type``, or the producer's (``compression``) when it says ``producer``."""
        topic_codec = self.info.effective_config["compression.type"]
        return compression if topic_codec == "producer" else KAFKA_CODECS[topic_codec]

    def section(
        self, parts: Mapping[int, Sequence[pa.RecordBatch]], compression: str = "none"
    ) -> Section:
        """This topic's section of an object shared with other topics (validated batches).

        The same checks as :meth:`write` (a producible topic, partitions in range)
        and the same codec; the caller writes the object
        (:func:`sparklog.storage.shared_objects.write_shared_object`).
        """
        self.check_writable()
        for p in parts:
            if not 0 <= p < self.info.partitions:
                self.partition(p)  # raises with the accepted range
        return Section(
            parts,
            self.info.record_schema,
            self.codec_for(compression),
            self.info.value_schema_id,
        )

    def check_writable(self) -> None:
        """Refuse producers on a mirror topic (POLICY_VIOLATION), naming its link."""
        mirror = self.info.mirror
        if self.info.mirrored and mirror is not None:
            raise PolicyViolationError(
                f"topic {self.name!r} is a mirror topic of link {mirror.get('link')!r} (source "
                f"{mirror.get('source')!r}); it is read-only to producers until promoted: "
                f"sparklog mirror promote {self.name}"
            )

    def append_mirrored(
        self, appends: Mapping[int, Sequence[Segment]], *, link: str, expected: Mapping[int, int]
    ) -> dict[int, AppendResult]:
        """Commit segments copied from a mirror link's source at their own offsets, one
        commit per shard touched (see :meth:`ShardLog.append_mirrored`)."""
        by_shard: dict[int, dict[int, Sequence[Segment]]] = {}
        for p, segs in appends.items():
            self._check_partition(p)
            by_shard.setdefault(self.info.shard_of(p), {})[p] = segs
        out: dict[int, AppendResult] = {}
        for s, parts in sorted(by_shard.items()):
            out.update(
                self.shard(s).append_mirrored(
                    parts, link=link, expected={p: expected[p] for p in parts}
                )
            )
        return out

    def commit(
        self,
        staged: Mapping[int, Segment | Sequence[Segment]],
        *,
        producers: Mapping[int, ProducerBatch] | None = None,
        txn: tuple[str, int] | None = None,
        leader_epoch: int | None = None,
        staged_max_age_ms: int = STAGED_OBJECT_MAX_AGE_MS,
    ) -> dict[int, AppendResult]:
        """Commit staged segments of many partitions: ONE commit per shard touched.

        Within a shard the commit is atomic: every partition's segments land or
        none do.  ``txn`` is checked and recorded per shard, so a replayed Spark
        batch is skipped in the shards that have it and lands in the others.
        """
        self.check_writable()
        by_shard: dict[int, dict[int, list[Segment]]] = {}
        for p, segs in staged.items():
            self._check_partition(p)
            listed = [segs] if isinstance(segs, Segment) else list(segs)
            by_shard.setdefault(self.info.shard_of(p), {})[p] = listed
        out: dict[int, AppendResult] = {}
        for s, appends in sorted(by_shard.items()):
            out.update(
                self.shard(s).append(
                    appends,
                    producers={p: b for p, b in (producers or {}).items() if p in appends},
                    txn=txn,
                    leader_epoch=leader_epoch,
                    staged_max_age_ms=staged_max_age_ms,
                )
            )
        return out

    def append(
        self,
        partition: int,
        data: pa.RecordBatch | pa.Table,
        *,
        compression: str = "none",
        producer: ProducerBatch | None = None,
        txn: tuple[str, int] | None = None,
        leader_epoch: int | None = None,
    ) -> AppendResult:
        """Write and commit records to one partition (the embedded, brokerless path)."""
        self._check_partition(partition)
        with self.shard(self.info.shard_of(partition)).preparing_commit():
            staged = self.write({partition: data}, compression)
            if partition not in staged:
                log = self.partition(partition)
                return AppendResult(log.high_watermark, 0, log.state.version)
            return self.commit(
                {partition: staged[partition]},
                producers={partition: producer} if producer is not None else None,
                txn=txn,
                leader_epoch=leader_epoch,
            )[partition]

    def produce(
        self,
        parts: Mapping[int, pa.RecordBatch | pa.Table],
        *,
        compression: str = "none",
        txn: tuple[str, int] | None = None,
    ) -> dict[int, AppendResult]:
        """Write one object for many partitions, then one atomic commit per shard."""
        with contextlib.ExitStack() as preparing:
            for s in sorted({self.info.shard_of(p) for p in parts if 0 <= p < self.partitions}):
                preparing.enter_context(self.shard(s).preparing_commit())
            staged = self.write(parts, compression)
            return self.commit(staged, txn=txn)


def _one_batch(batches: Sequence[pa.RecordBatch]) -> pa.RecordBatch:
    return pa.Table.from_batches(batches).combine_chunks().to_batches()[0]


def _check_all_sizes(parts: Sequence[Sequence[pa.RecordBatch]], max_message_bytes: int) -> None:
    for batches in parts:
        check_sizes(batches, max_message_bytes)


__all__ = ["Normalized", "Topic"]
