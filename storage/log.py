"""The partition log: a sequence of create-only commit files (DESIGN.md §3).

Commit ``v`` is ``partitions/<p:05d>/log/<v:020d>.json``.  Whoever creates the
next version wins; a loser re-reads the commits it missed, re-validates (leader
epoch, producer sequence, transaction marker) and retries with a new base
offset.  Objects hold no offsets, so a retry never rewrites data.  Every
``snapshot_interval`` commits a snapshot of the full state is written as an
Arrow file and a ``_latest.json`` hint points at it, so opening a log reads one
hint, one snapshot and at most ``snapshot_interval`` commits.
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparklog.storage.documents import version_key
from sparklog.storage.errors import (
    CommitConflictError,
    FencedError,
    OffsetOutOfRangeError,
    ProducerSequenceError,
    StorageError,
)
from sparklog.storage.objectstore import ObjectStore
from sparklog.storage.records import OFFSET_FIELD, now_ms
from sparklog.storage.segment_index import SegmentIndex
from sparklog.storage.segments import Segment, read_segment

log = logging.getLogger(__name__)

PRODUCER_RECENT_BATCHES = 5
DEFAULT_SNAPSHOT_INTERVAL = 32
DEFAULT_COMMIT_ATTEMPTS = 200
#: A staged object older than this is never committed: GC may be collecting it.
STAGED_OBJECT_MAX_AGE_MS = 10 * 60 * 1000

SchemaResolver = Callable[[str], pa.Schema]


@dataclass(frozen=True)
class ProducerBatch:
    """Identity of an idempotent producer's batch (Kafka's pid/epoch/sequence)."""

    producer_id: int
    producer_epoch: int
    first_sequence: int
    record_count: int

    @property
    def last_sequence(self) -> int:
        return self.first_sequence + self.record_count - 1


@dataclass(frozen=True)
class AppendResult:
    """Where an append landed.  ``duplicate`` means it had been committed before."""

    base_offset: int
    record_count: int
    version: int
    duplicate: bool = False

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.record_count - 1


@dataclass
class LogState:
    """Everything a partition log knows at one version."""

    version: int = -1
    leader_epoch: int = 0
    log_start_offset: int = 0
    high_watermark: int = 0
    segments: SegmentIndex = field(default_factory=SegmentIndex)
    producers: dict[str, dict[str, Any]] = field(default_factory=dict)
    txn_versions: dict[str, int] = field(default_factory=dict)
    commits_since_snapshot: int = 0

    def scalars(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "leader_epoch": self.leader_epoch,
            "log_start_offset": self.log_start_offset,
            "high_watermark": self.high_watermark,
            "producers": self.producers,
            "txn_versions": self.txn_versions,
        }

    def apply(self, commit: dict[str, Any]) -> None:
        """Advance the state by one commit (pure function of the commit's contents)."""
        self.version = commit["v"]
        self.leader_epoch = max(self.leader_epoch, commit.get("epoch", 0))
        for base in commit.get("remove", ()):
            self.segments.remove(base)
        for raw in commit.get("add", ()):
            self.segments.add(Segment.from_json(raw))
        for raw in commit.get("append", ()):
            seg = Segment.from_json(raw)
            self.segments.add(seg)
            self.high_watermark = max(self.high_watermark, seg.end_offset)
        if commit.get("log_start_offset") is not None:
            self.log_start_offset = max(self.log_start_offset, commit["log_start_offset"])
        producer = commit.get("producer")
        if producer:
            self._apply_producer(producer, commit)
        txn = commit.get("txn")
        if txn:
            self.txn_versions[txn["app_id"]] = max(
                self.txn_versions.get(txn["app_id"], -1), txn["version"]
            )
        self.commits_since_snapshot += 1

    def _apply_producer(self, producer: dict[str, Any], commit: dict[str, Any]) -> None:
        pid = str(producer["id"])
        entry = self.producers.get(pid)
        if entry is None or producer["epoch"] > entry["epoch"]:
            entry = {"epoch": producer["epoch"], "last_seq": -1, "recent": []}
        base = commit["append"][0]["base_offset"] if commit.get("append") else -1
        entry["last_seq"] = producer["last_seq"]
        entry["recent"] = [*entry["recent"], [producer["first_seq"], producer["last_seq"], base]][
            -PRODUCER_RECENT_BATCHES:
        ]
        entry["ts"] = commit.get("ts", 0)
        self.producers[pid] = entry


class PartitionLog:
    """One partition's log.  Not thread-safe; create one per thread or lock around it."""

    def __init__(
        self,
        store: ObjectStore,
        partition: int,
        schema_for: SchemaResolver,
        *,
        topic: str = "",
        snapshot_interval: int = DEFAULT_SNAPSHOT_INTERVAL,
        commit_attempts: int = DEFAULT_COMMIT_ATTEMPTS,
    ) -> None:
        self.store = store
        self.partition = partition
        self.topic = topic
        self.schema_for = schema_for
        self.snapshot_interval = snapshot_interval
        self.commit_attempts = commit_attempts
        self.prefix = f"partitions/{partition:05d}/log"
        self._state: LogState | None = None

    def __repr__(self) -> str:
        return f"PartitionLog({self.topic!r}, {self.partition})"

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    # -- state -------------------------------------------------------------
    @property
    def state(self) -> LogState:
        if self._state is None:
            self._state = self._load()
        return self._state

    def refresh(self) -> LogState:
        """Catch up with commits made by other writers since the last look."""
        if self._state is None:
            return self.state
        self._read_forward(self._state)
        return self._state

    @property
    def high_watermark(self) -> int:
        return self.state.high_watermark

    @property
    def log_start_offset(self) -> int:
        return self.state.log_start_offset

    @property
    def leader_epoch(self) -> int:
        return self.state.leader_epoch

    def segments(self) -> list[Segment]:
        return self.state.segments.all()

    def _load(self) -> LogState:
        state = LogState()
        hint = self.store.get_or_none(f"{self.prefix}/_latest.json")
        snapshot_version = json.loads(hint)["snapshot"] if hint else None
        if snapshot_version is None:
            snapshots = [
                int(n.split(".")[0])
                for n in self.store.list_names(self.prefix)
                if n.endswith(".snapshot") and n.split(".")[0].isdigit()
            ]
            snapshot_version = max(snapshots) if snapshots else None
        if snapshot_version is not None:
            loaded = self._load_snapshot(snapshot_version)
            if loaded is not None:
                state = loaded
        self._read_forward(state)
        return state

    def _load_snapshot(self, version: int) -> LogState | None:
        try:
            raw = self.store.get_buffer(version_key(self.prefix, version, ".snapshot"))
        except FileNotFoundError:
            return None
        reader = pa.ipc.open_file(raw)
        table = reader.read_all()
        meta = json.loads(reader.schema.metadata[b"state"])
        return LogState(
            version=meta["version"],
            leader_epoch=meta["leader_epoch"],
            log_start_offset=meta["log_start_offset"],
            high_watermark=meta["high_watermark"],
            segments=SegmentIndex(table),
            producers=meta["producers"],
            txn_versions=meta["txn_versions"],
        )

    def _read_forward(self, state: LogState) -> None:
        chunk = 4  # a writer that lost a race usually missed one or two commits
        while True:
            keys = [version_key(self.prefix, state.version + i) for i in range(1, chunk + 1)]
            found = self.store.get_many(keys)
            applied = 0
            for key in keys:
                raw = found.get(key)
                if raw is None:
                    break
                state.apply(json.loads(raw))
                applied += 1
            if applied < chunk:
                return
            chunk = min(chunk * 4, 256)

    # -- commits -----------------------------------------------------------
    def _commit(self, build: Callable[[LogState], dict[str, Any] | None]) -> dict[str, Any] | None:
        """Create the next commit from ``build(state)``; re-read and rebuild on a lost race.

        ``build`` returns None when nothing must be written (e.g. a duplicate).
        """
        delay = 0.001
        for _ in range(self.commit_attempts):
            state = self.state
            commit = build(state)
            if commit is None:
                return None
            commit["v"] = state.version + 1
            commit.setdefault("epoch", state.leader_epoch)
            commit.setdefault("ts", now_ms())
            data = json.dumps(commit, separators=(",", ":")).encode()
            if self.store.create(version_key(self.prefix, commit["v"]), data):
                state.apply(commit)
                if state.commits_since_snapshot >= self.snapshot_interval:
                    self._write_snapshot(state)
                return commit
            self.refresh()
            time.sleep(delay * random.random())
            delay = min(delay * 2, 1.0)
        raise CommitConflictError(
            f"partition {self.name}: gave up after {self.commit_attempts} lost commit races"
        )

    def _write_snapshot(self, state: LogState) -> None:
        table = state.segments.to_table()
        schema = table.schema.with_metadata({b"state": json.dumps(state.scalars()).encode()})
        sink = pa.BufferOutputStream()
        with pa.ipc.new_file(sink, schema) as writer:
            writer.write_table(table.cast(schema))
        try:
            self.store.create(version_key(self.prefix, state.version, ".snapshot"), sink.getvalue())
            self.store.put(
                f"{self.prefix}/_latest.json", json.dumps({"snapshot": state.version}).encode()
            )
            state.commits_since_snapshot = 0
        except StorageError as exc:  # a snapshot is an optimisation; the commit stands
            log.warning(
                "partition %s: snapshot at version %d failed: %s", self.name, state.version, exc
            )

    def append(
        self,
        segments: Sequence[Segment],
        *,
        leader_epoch: int | None = None,
        producer: ProducerBatch | None = None,
        txn: tuple[str, int] | None = None,
    ) -> AppendResult:
        """Commit staged segments at the high watermark; return the assigned offsets.

        ``leader_epoch`` fences: a writer whose epoch is older than the log's
        gets FencedError.  ``producer`` deduplicates retries of an idempotent
        producer.  ``txn=(app_id, version)`` makes a repeated commit of the
        same marker a no-op (the Spark sink's exactly-once).
        """
        now = now_ms()
        for seg in segments:
            if now - seg.created_ms > STAGED_OBJECT_MAX_AGE_MS:
                raise StorageError(
                    f"staged object {seg.object_key} is older than "
                    f"{STAGED_OBJECT_MAX_AGE_MS} ms and may be garbage-collected; write it again"
                )
        count = sum(s.offset_span for s in segments)
        outcome: dict[str, Any] = {}

        def build(state: LogState) -> dict[str, Any] | None:
            if leader_epoch is not None and leader_epoch < state.leader_epoch:
                raise FencedError(
                    f"partition {self.name}: leader epoch {leader_epoch} is fenced by epoch "
                    f"{state.leader_epoch}"
                )
            if txn is not None and state.txn_versions.get(txn[0], -1) >= txn[1]:
                outcome["duplicate"] = AppendResult(-1, count, state.version, duplicate=True)
                return None
            commit: dict[str, Any] = {"kind": "append"}
            if leader_epoch is not None:
                commit["epoch"] = max(leader_epoch, state.leader_epoch)
            if producer is not None:
                dup = self._check_producer(state, producer)
                if dup is not None:
                    outcome["duplicate"] = AppendResult(dup, count, state.version, duplicate=True)
                    return None
                commit["producer"] = {
                    "id": producer.producer_id,
                    "epoch": producer.producer_epoch,
                    "first_seq": producer.first_sequence,
                    "last_seq": producer.last_sequence,
                }
            if txn is not None:
                commit["txn"] = {"app_id": txn[0], "version": txn[1]}
            base = state.high_watermark
            placed = []
            for seg in segments:
                placed.append(seg.at(base).to_json())
                base += seg.offset_span
            commit["append"] = placed
            return commit

        commit = self._commit(build)
        if commit is None:
            return outcome["duplicate"]
        base = commit["append"][0]["base_offset"] if commit["append"] else self.high_watermark
        return AppendResult(base, count, commit["v"])

    def _check_producer(self, state: LogState, producer: ProducerBatch) -> int | None:
        """None if the batch is next in sequence; its base offset if a duplicate."""
        entry = state.producers.get(str(producer.producer_id))
        if entry is not None:
            if producer.producer_epoch < entry["epoch"]:
                raise FencedError(
                    f"producer {producer.producer_id} epoch {producer.producer_epoch} is fenced "
                    f"by epoch {entry['epoch']}"
                )
            if producer.producer_epoch == entry["epoch"]:
                for first, last, base in entry["recent"]:
                    if first == producer.first_sequence and last == producer.last_sequence:
                        return int(base)
                expected = entry["last_seq"] + 1
                if producer.first_sequence != expected:
                    raise ProducerSequenceError(
                        f"producer {producer.producer_id} sent sequence "
                        f"{producer.first_sequence} to partition {self.name}; expected {expected}"
                    )
                return None
        if producer.first_sequence != 0:
            raise ProducerSequenceError(
                f"producer {producer.producer_id} epoch {producer.producer_epoch} is unknown to "
                f"partition {self.name}; its first sequence must be 0, got "
                f"{producer.first_sequence}"
            )
        return None

    def bump_epoch(self, new_epoch: int | None = None) -> int:
        """Write an epoch-bump commit (a leader taking over); return the new epoch."""

        def build(state: LogState) -> dict[str, Any]:
            epoch = state.leader_epoch + 1 if new_epoch is None else new_epoch
            if epoch <= state.leader_epoch:
                raise FencedError(
                    f"partition {self.name}: epoch {epoch} is not above current "
                    f"{state.leader_epoch}"
                )
            return {"kind": "epoch", "epoch": epoch}

        commit = self._commit(build)
        assert commit is not None
        return int(commit["epoch"])

    def replace_segments(
        self,
        build: Callable[[LogState], tuple[list[int], list[Segment], int | None] | None],
        kind: str,
        leader_epoch: int | None = None,
    ) -> dict[str, Any] | None:
        """Commit a maintenance change: remove segments (by base offset), add others.

        ``build(state)`` returns ``(remove, add, new_log_start_offset)`` or None
        for no change; it runs again on a lost race, against the newer state.
        """

        def commit_for(state: LogState) -> dict[str, Any] | None:
            if leader_epoch is not None and leader_epoch < state.leader_epoch:
                raise FencedError(
                    f"partition {self.name}: leader epoch {leader_epoch} is fenced by epoch "
                    f"{state.leader_epoch}"
                )
            change = build(state)
            if change is None:
                return None
            remove, add, log_start = change
            commit: dict[str, Any] = {
                "kind": kind,
                "remove": remove,
                "add": [s.to_json() for s in add],
            }
            if log_start is not None:
                commit["log_start_offset"] = log_start
            return commit

        return self._commit(commit_for)

    # -- reads -------------------------------------------------------------
    def iter_batches(
        self, start: int, end: int | None = None, *, max_bytes: int | None = None
    ) -> Iterator[pa.RecordBatch]:
        """Records with offsets in ``[start, end)`` as batches with an ``offset`` column.

        Raises OffsetOutOfRangeError if ``start`` is below the log start offset
        or above the high watermark.  ``max_bytes`` stops after the segment
        that crosses it (always returning at least one segment's records).
        """
        state = self.state
        hwm = state.high_watermark
        stop = hwm if end is None else min(end, hwm)
        if start < state.log_start_offset or start > hwm:
            raise OffsetOutOfRangeError(
                f"offset {start} is out of range for partition {self.name}; valid: "
                f"[{state.log_start_offset}, {hwm}]",
                state.log_start_offset,
                hwm,
            )
        read_bytes = 0
        for seg in state.segments.overlapping(start, stop):
            yield from self._segment_batches(seg, start, stop)
            read_bytes += seg.size_bytes
            if max_bytes is not None and read_bytes >= max_bytes:
                return

    def read(self, start: int, end: int | None = None, *, max_bytes: int | None = None) -> pa.Table:
        """Offsets ``[start, end)`` as one table (schema: offset + the topic's record schema)."""
        batches = list(self.iter_batches(start, end, max_bytes=max_bytes))
        schema = pa.schema([OFFSET_FIELD, *self.schema_for("")])
        if not batches:
            return schema.empty_table()
        return pa.Table.from_batches(batches)

    def _segment_batches(self, seg: Segment, start: int, stop: int) -> Iterator[pa.RecordBatch]:
        schema = self.schema_for(seg.schema_id)
        target = self.schema_for("")
        offset = seg.base_offset
        for batch in read_segment(self.store, seg, schema):
            if seg.has_offsets:
                offsets = batch.column("offset")
                mask = pc.and_(pc.greater_equal(offsets, start), pc.less(offsets, stop))
                chosen = batch.filter(mask)
                if chosen.num_rows:
                    yield _conform(chosen, target)
                continue
            rows = batch.num_rows
            lo, hi = max(start - offset, 0), min(stop - offset, rows)
            if hi > lo:
                piece = batch.slice(lo, hi - lo)
                offsets = pa.array(np.arange(offset + lo, offset + hi, dtype=np.int64))
                yield _conform(
                    pa.RecordBatch.from_arrays(
                        [offsets, *piece.columns], schema=pa.schema([OFFSET_FIELD, *piece.schema])
                    ),
                    target,
                )
            offset += rows
            if offset >= stop:
                return

    def offset_for_timestamp(self, timestamp_ms: int) -> int:
        """The first offset whose timestamp is at or after ``timestamp_ms``; HWM if none."""
        state = self.state
        seg = state.segments.first_with_max_timestamp_at_least(timestamp_ms)
        while seg is not None:
            for batch in self._segment_batches(seg, seg.base_offset, seg.end_offset):
                ts = batch.column("timestamp").cast(pa.int64())
                hits = pc.indices_nonzero(pc.greater_equal(ts, timestamp_ms))
                if len(hits):
                    return max(
                        int(batch.column("offset")[hits[0].as_py()].as_py()), state.log_start_offset
                    )
            later = state.segments.overlapping(seg.end_offset, state.high_watermark)
            seg = next((s for s in later if s.max_timestamp_ms >= timestamp_ms), None)
        return state.high_watermark


def _conform(batch: pa.RecordBatch, target: pa.Schema) -> pa.RecordBatch:
    """Bring a batch written under an older typed schema to the current one."""
    schema = pa.schema([OFFSET_FIELD, *target])
    if batch.schema.equals(schema):
        return batch
    columns = []
    for f in schema:
        column = batch.column(f.name)
        if not column.type.equals(f.type) and pa.types.is_struct(f.type):
            present = {column.type.field(i).name for i in range(column.type.num_fields)}
            children = [
                column.field(c.name).cast(c.type)
                if c.name in present
                else pa.nulls(len(column), c.type)
                for c in f.type
            ]
            column = pa.StructArray.from_arrays(
                children, fields=list(f.type), mask=column.is_null()
            )
        elif not column.type.equals(f.type):
            column = column.cast(f.type)
        columns.append(column)
    return pa.RecordBatch.from_arrays(columns, schema=schema)
