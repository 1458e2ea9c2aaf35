"""A shard log's state and its encoding (docs/architecture.md, "Storage format 2").

:class:`ShardState` is what a shard log knows at one version (per partition: live
segments, high watermark, log start, producers, transactions; the shard's leader
epoch, Spark sink markers and mirror gaps); :class:`LogState` is one partition's
read-only view of it.  :class:`ShardCodec` applies commits to a state and
writes and reads snapshots (one Arrow file, segment tables in chunks read on
demand).  The log itself (:mod:`sparklog.storage.log`) appends and follows.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict, cast

import numpy as np
import pyarrow as pa

from sparklog.errors import (
    CorruptRecordError,
)
from sparklog.storage import txn_markers
from sparklog.storage.journal import JournalRef
from sparklog.storage.metalog import (
    Commit,
    IndexedSnapshot,
    LogStateBase,
    blob_refs,
    seal_indexed_snapshot,
)
from sparklog.storage.producer_state import apply_producer
from sparklog.storage.segment_index import ChunkDirectory, SegmentIndex
from sparklog.storage.segments import SEGMENT_ARROW_SCHEMA, Segment

#: Segments per chunk of a snapshot's segment table (the unit a reader reads on demand).
SNAPSHOT_CHUNK_ROWS = 1024
#: How a snapshot header describes a partition's chunks: one list per column.
CHUNK_COLUMNS = ("start", "end", "xxh3", "first", "stop", "rows", "max_ts")


class PartChange(TypedDict, total=False):
    """What one commit changes in one partition of a shard log (every key optional)."""

    #: segments appended at the head (their ``base_offset`` assigned), as ``Segment.to_json``
    append: list[dict[str, Any]]
    #: segments added below the head (a merge or compaction's output) and base offsets removed
    add: list[dict[str, Any]]
    remove: list[int]
    #: the log start offset moves up to this (retention, DeleteRecords)
    lso: int
    #: the high watermark moves up to this: offsets given up by ``sparklog log recover``
    skip_to: int
    #: the idempotent producer's batch (``producer_state.apply_producer``)
    producer: dict[str, Any]
    #: transactions: the records' transaction, its close, a control record
    txn: dict[str, Any]
    close: dict[str, Any]
    marker: dict[str, Any]


class ShardCommit(TypedDict, total=False):
    """A shard log commit's body, besides the log's own ``v``, ``id`` and ``ts``."""

    v: int
    id: str
    ts: int
    #: append, merge, retention, txn, marker, epoch, mirror, repair, ...: for people reading
    kind: str
    #: the writer's leader epoch (a commit from an older epoch is refused)
    epoch: int
    #: partition (as text) -> its change
    parts: dict[str, PartChange]
    #: a Spark sink's exactly-once marker: ``app_id``, ``version``
    txn: dict[str, Any]
    #: a mirror's link and the source ranges it found missing (``gaps``)
    mirror: dict[str, Any]
    #: idempotent producers and sink markers older than these (ms) are forgotten
    expire: dict[str, int]
    #: what a repair commit replaced and the offsets it gave up (``storage/log_recover.py``)
    repair: dict[str, Any]
    #: format 3: the journal steps folded in front of the commit's own change
    #: (``{"journal": [broker, id], "steps": [[version, change], ...]}``)
    fold: dict[str, Any]
    #: format 3: the journal the shard's newer changes are in (a ``lease``, beside
    #: ``"from"``: its first version that may hold them); None clears the lease
    journal: Any


@dataclass
class PartState:
    """One partition's part of a shard state."""

    log_start_offset: int = 0
    high_watermark: int = 0
    segments: SegmentIndex = field(default_factory=SegmentIndex)
    producers: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: transactions (see :mod:`sparklog.storage.txn_markers`): open, closed, controls, aborted
    txn: dict[str, Any] = field(default_factory=dict)
    #: when a repair last gave up offsets here (-1: never): producers may continue past a
    #: sequence gap once (``producer_state.duplicate_of``)
    repaired_ms: int = -1


@dataclass
class ShardState(LogStateBase):
    """Everything a shard log knows at one version."""

    version: int = -1
    leader_epoch: int = 0
    parts: dict[int, PartState] = field(default_factory=dict)
    markers: dict[str, dict[str, int]] = field(default_factory=dict)
    commits_since_snapshot: int = 0
    #: partition (as text) -> ``[first, end)`` offset ranges a mirror found missing at its
    #: source (retention or compaction there) and committed past: recorded, not papered over
    mirror_gaps: dict[str, list[list[int]]] = field(default_factory=dict)
    #: the mirror link whose commits fill this shard ('' if none ever did)
    mirror_link: str = ""
    #: format 3: the broker journal a lease names (None: no lease) and the last of its
    #: versions this state reflects (a fold's, or a reader's own read of the journal)
    journal: JournalRef | None = None
    folded: int = -1
    #: the last of the leased journal's versions folded into the log itself (a direct
    #: writer's fold carries the steps after it)
    log_folded: int = -1

    def part(self, partition: int) -> PartState:
        found = self.parts.get(partition)
        if found is None:
            found = self.parts[partition] = PartState()
        return found


class LogState:
    """A read-only view of one partition inside a shard state (what readers plan with)."""

    def __init__(self, shard: ShardState, partition: int) -> None:
        self._shard = shard
        self._partition = partition
        self._part = shard.parts.get(partition) or PartState()

    @property
    def version(self) -> int:
        return self._shard.version

    @property
    def leader_epoch(self) -> int:
        return self._shard.leader_epoch

    @property
    def log_start_offset(self) -> int:
        return self._part.log_start_offset

    @property
    def high_watermark(self) -> int:
        return self._part.high_watermark

    @property
    def segments(self) -> SegmentIndex:
        return self._part.segments

    @property
    def producers(self) -> dict[str, dict[str, Any]]:
        return self._part.producers

    @property
    def mirror_gaps(self) -> list[tuple[int, int]]:
        """``[first, end)`` ranges a mirror committed past (missing at its source)."""
        return [(a, b) for a, b in self._shard.mirror_gaps.get(str(self._partition), [])]

    @property
    def txn_versions(self) -> dict[str, int]:
        return {k: v["version"] for k, v in self._shard.markers.items()}

    @property
    def repaired_ms(self) -> int:
        """When a repair last gave up offsets of the partition (-1: never)."""
        return self._part.repaired_ms

    @property
    def transactions(self) -> dict[str, Any]:
        """The partition's transactions (:mod:`sparklog.storage.txn_markers`)."""
        return self._part.txn

    @property
    def last_stable_offset(self) -> int:
        """Below this offset no transaction is open (read_committed readers stop here)."""
        return txn_markers.last_stable_offset(self._part.txn, self._part.high_watermark)


class ShardCodec:
    """Applies shard commits; snapshots a shard state as one Arrow file."""

    def empty(self) -> ShardState:
        return ShardState()

    def apply(self, state: ShardState, raw_commit: Commit) -> None:
        fold = raw_commit.get("fold")
        if fold:  # the journal's changes up to here come first
            ref = JournalRef.from_json(fold["journal"])
            self.apply_steps(state, ref, fold["steps"])
            if ref is not None and ref == state.journal and fold["steps"]:
                state.log_folded = max(state.log_folded, int(fold["steps"][-1][0]))
        if "journal" in raw_commit:  # a lease (or a direct writer ending one)
            state.journal = JournalRef.from_json(raw_commit["journal"])
            state.folded = state.log_folded = int(raw_commit.get("from", 0)) - 1
        self.apply_change(state, raw_commit)

    def apply_steps(
        self, state: ShardState, journal: JournalRef | None, steps: Sequence[Sequence[Any]]
    ) -> None:
        """Journal ``steps`` (``[version, change]``, in order) of the leased journal past
        ``state.folded``: a fold repeated, or one of steps a reader already read from
        the journal, changes nothing."""
        if journal is None or journal != state.journal:
            return
        for version, change in steps:
            if int(version) > state.folded:
                self.apply_change(state, change)
                state.folded = int(version)

    def apply_change(self, state: ShardState, raw_commit: Commit) -> None:
        """One change: a commit's own, or a journal step (the same body)."""
        commit = cast(ShardCommit, raw_commit)
        state.leader_epoch = max(state.leader_epoch, int(commit.get("epoch", 0)))
        ts = int(commit.get("ts", 0))
        for key, change in (commit.get("parts") or {}).items():
            part = state.part(int(key))
            for base in change.get("remove", ()):
                part.segments.remove(base)
            for raw in change.get("add", ()):
                part.segments.add(Segment.from_json(raw))
            appended = [Segment.from_json(raw) for raw in change.get("append", ())]
            for seg in appended:
                part.segments.add(seg)
                part.high_watermark = max(part.high_watermark, seg.end_offset)
            if change.get("skip_to") is not None:  # a repair: offsets given up (log_recover)
                part.high_watermark = max(part.high_watermark, int(change["skip_to"]))
                part.repaired_ms = ts
            if change.get("lso") is not None:
                part.log_start_offset = max(part.log_start_offset, int(change["lso"]))
                if part.txn:
                    part.txn = dict(part.txn)
                    txn_markers.prune_below(part.txn, part.log_start_offset)
            producer = change.get("producer")
            if producer:
                base = appended[0].base_offset if appended else -1
                apply_producer(part.producers, producer, base, ts)
            _apply_txn(part, change, appended)
        mirror = commit.get("mirror")
        if mirror:
            state.mirror_link = str(mirror.get("link", ""))
            for key, ranges in (mirror.get("gaps") or {}).items():
                state.mirror_gaps = {
                    **state.mirror_gaps,
                    key: [*state.mirror_gaps.get(key, []), *([int(a), int(b)] for a, b in ranges)],
                }
        txn = commit.get("txn")
        if txn:
            old = state.markers.get(txn["app_id"], {}).get("version", -1)
            state.markers[txn["app_id"]] = {"version": max(old, int(txn["version"])), "ts": ts}
        expire = commit.get("expire") or {}
        if expire.get("producers_before") is not None:
            cut = int(expire["producers_before"])
            for part in state.parts.values():
                for pid in [k for k, v in part.producers.items() if v.get("ts", 0) < cut]:
                    del part.producers[pid]
        if expire.get("markers_before") is not None:
            cut = int(expire["markers_before"])
            for app in [k for k, v in state.markers.items() if v.get("ts", 0) < cut]:
                del state.markers[app]

    #: ``snapshot`` returns a sealed indexed snapshot, read on demand (see ``restore_indexed``)
    indexed = True

    def snapshot(self, state: ShardState) -> bytes:
        """The state as an indexed snapshot: per-partition segment chunks, then a header.

        Each partition's segments are cut into chunks of :data:`SNAPSHOT_CHUNK_ROWS`
        (counted from the newest, so the newest chunk is full), each one Arrow IPC
        record-batch message.  Every partition's newest chunk is laid out last,
        next to the header, so the one read that opens the snapshot usually holds
        it.  The writer's own view folds its overlay into the new tables.
        """
        older: list[tuple[int, pa.Table]] = []
        newest: list[tuple[int, pa.Table]] = []
        for p in sorted(state.parts):
            table = state.parts[p].segments.to_table()
            state.parts[p].segments = SegmentIndex(table)
            rows = table.num_rows
            cuts = list(range(rows, 0, -SNAPSHOT_CHUNK_ROWS))[::-1]  # chunk ends, oldest first
            starts = [0, *cuts[:-1]] if cuts else []  # a partition with no segments yet
            pieces = [(p, table.slice(a, b - a)) for a, b in zip(starts, cuts, strict=True)]
            older.extend(pieces[:-1])
            newest.extend(pieces[-1:])
        blobs, described = [], []
        for p, piece in [*older, *newest]:
            batch = piece.cast(SEGMENT_ARROW_SCHEMA).combine_chunks().to_batches()[0]
            blobs.append(batch.serialize().to_pybytes())
            bases = piece.column("base_offset").to_numpy()
            ends = bases + piece.column("offset_span").to_numpy()
            described.append(
                (
                    p,
                    int(bases[0]),
                    int(ends.max()),
                    piece.num_rows,
                    int(piece.column("max_timestamp_ms").to_numpy().max()),
                )
            )
        parts: dict[str, Any] = {
            str(p): {
                "lso": part.log_start_offset,
                "hwm": part.high_watermark,
                "producers": part.producers,
                "txn": part.txn,
                "chunks": {},
                **({"repaired_ms": part.repaired_ms} if part.repaired_ms >= 0 else {}),
            }
            for p, part in sorted(state.parts.items())
        }
        for (p, first, end, rows, max_ts), ref in zip(described, blob_refs(blobs), strict=True):
            chunks = parts[str(p)]["chunks"]
            for name, value in zip(CHUNK_COLUMNS, [*ref, first, end, rows, max_ts], strict=True):
                chunks.setdefault(name, []).append(value)
        for part in parts.values():  # oldest chunk first
            chunks = part["chunks"]
            if not chunks:  # a partition with no segments has no chunks
                continue
            order = sorted(range(len(chunks["first"])), key=chunks["first"].__getitem__)
            part["chunks"] = {name: [chunks[name][i] for i in order] for name in chunks}
        header = {
            "version": state.version,
            "leader_epoch": state.leader_epoch,
            "markers": state.markers,
            "parts": parts,
            "mirror_gaps": state.mirror_gaps,
            "mirror_link": state.mirror_link,
        }
        if state.journal is not None:
            header["journal"] = state.journal.to_json()
            header["folded"] = state.folded
            header["log_folded"] = state.log_folded
        return seal_indexed_snapshot(blobs, header)

    def restore_indexed(self, snapshot: IndexedSnapshot) -> ShardState:
        """The state an indexed snapshot holds; segment chunks stay unread until needed."""
        meta = snapshot.header
        where = snapshot.where
        try:
            state = ShardState(
                version=int(meta["version"]),
                leader_epoch=int(meta["leader_epoch"]),
                markers=dict(meta["markers"]),
                mirror_gaps=dict(meta.get("mirror_gaps") or {}),
                mirror_link=str(meta.get("mirror_link", "")),
                journal=JournalRef.from_json(meta.get("journal")),
                folded=int(meta.get("folded", -1)),
                log_folded=int(meta.get("log_folded", -1)),
            )
            for key, scalars in meta["parts"].items():
                chunks = scalars["chunks"]
                columns = [chunks.get(name, []) for name in CHUNK_COLUMNS]
                if any(len(c) != len(columns[0]) for c in columns):
                    raise ValueError("chunk columns of unequal length")
                start, end, digest, first, stop, rows, max_ts = columns
                state.parts[int(key)] = PartState(
                    log_start_offset=int(scalars["lso"]),
                    high_watermark=int(scalars["hwm"]),
                    segments=SegmentIndex(
                        directory=ChunkDirectory(
                            first,
                            stop,
                            rows,
                            max_ts,
                            functools.partial(_read_chunk, snapshot, start, end, digest, rows),
                        )
                    ),
                    producers=dict(scalars["producers"]),
                    txn=dict(scalars.get("txn") or {}),
                    repaired_ms=int(scalars.get("repaired_ms", -1)),
                )
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise CorruptRecordError(
                f"snapshot {where} cannot be decoded: {type(exc).__name__}: {exc}"
            ) from None
        return state

    def restore(self, payload: memoryview, where: str) -> ShardState:
        """A snapshot of the first layout (one Arrow file, read whole): still readable."""
        try:
            reader = pa.ipc.open_file(pa.BufferReader(pa.py_buffer(payload)))
            table = reader.read_all()
            meta = json.loads(reader.schema.metadata[b"state"])
            state = ShardState(
                version=int(meta["version"]),
                leader_epoch=int(meta["leader_epoch"]),
                markers=dict(meta["markers"]),
            )
            parts = table.column("partition").to_numpy()
            segments = table.drop_columns(["partition"])
            for key, scalars in meta["parts"].items():
                p = int(key)
                lo = int(np.searchsorted(parts, p, side="left"))
                hi = int(np.searchsorted(parts, p, side="right"))
                state.parts[p] = PartState(
                    log_start_offset=int(scalars["lso"]),
                    high_watermark=int(scalars["hwm"]),
                    segments=SegmentIndex(segments.slice(lo, hi - lo)),
                    producers=dict(scalars["producers"]),
                    txn=dict(scalars.get("txn") or {}),
                )
        except (pa.ArrowException, ValueError, KeyError, TypeError) as exc:
            raise CorruptRecordError(
                f"snapshot {where} cannot be decoded: {type(exc).__name__}: {exc}"
            ) from None
        return state


def _read_chunk(
    snapshot: IndexedSnapshot,
    starts: list[int],
    ends: list[int],
    digests: list[int],
    rows: list[int],
    i: int,
) -> pa.Table:
    """Chunk ``i`` of an indexed snapshot: read by range, checksum verified, decoded."""
    where = f"snapshot {snapshot.where} bytes {starts[i]}-{ends[i]}"
    data = snapshot.read([starts[i], ends[i], digests[i]])
    try:
        batch = pa.ipc.read_record_batch(pa.py_buffer(data), SEGMENT_ARROW_SCHEMA)
    except (pa.ArrowException, ValueError) as exc:
        raise CorruptRecordError(f"{where} cannot be decoded: {exc}") from None
    if batch.num_rows != rows[i]:
        raise CorruptRecordError(f"{where} hold {batch.num_rows} segments, not {rows[i]}")
    return pa.Table.from_batches([batch])


def _apply_txn(part: PartState, change: PartChange, appended: Sequence[Segment]) -> None:
    """A commit's transactional parts: a transaction's records, its end, a control record."""
    opened, close, marker = change.get("txn"), change.get("close"), change.get("marker")
    if not (opened or close or marker):
        return
    txn = dict(part.txn) if part.txn else txn_markers.empty()
    if opened and appended:
        start = appended[0].base_offset
        end = appended[-1].end_offset
        txn_markers.apply_txn_append(txn, int(opened["id"]), int(opened["n"]), start, end)
    if close:
        txn_markers.apply_close(txn, int(close["id"]), int(close["n"]))
    if marker:
        offset = int(marker["offset"])
        txn_markers.apply_marker(txn, marker, offset)
        part.high_watermark = max(part.high_watermark, offset + 1)
        # the marker raises the producer's epoch here: an older epoch is fenced
        pid = str(marker["id"])
        entry = part.producers.get(pid)
        if entry is not None and int(marker["epoch"]) > int(entry["epoch"]):
            part.producers[pid] = {
                **entry,
                "epoch": int(marker["epoch"]),
                "last_seq": -1,
                "recent": [],
            }
    part.txn = txn
