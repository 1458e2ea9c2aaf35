"""Log maintenance: retention, compaction, merging of small segments, garbage collection.

Each change to a partition is an ordinary commit (remove segments, add
segments, move the log start offset), so it races safely with writers: appends
only add above the high watermark, and a maintenance commit that lost its race
is rebuilt against the newer state or skipped.  Nothing is deleted from the
object store here except by :func:`collect_garbage`, which waits a grace
period, so readers holding an older segment list keep working.  Every function
has a dry run that reports what it would change and writes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import pyarrow as pa

from sparklog.clock import now_ms
from sparklog.errors import InvalidConfigurationError, OffsetOutOfRangeError
from sparklog.storage.catalog import LogRoot
from sparklog.storage.documents import encode_document, parse_document
from sparklog.storage.log import STAGED_OBJECT_MAX_AGE_MS, LogState, PartitionLog
from sparklog.storage.metalog import RELOAD_AFTER_MS, prune_log
from sparklog.storage.objectstore import ObjectInfo, ObjectStore
from sparklog.storage.records import OFFSET_FIELD
from sparklog.storage.segments import Segment, write_object
from sparklog.storage.topics import Topic
from sparklog.storage.txn_markers import aborted_between, drop_aborted

#: Objects unreferenced for this long (and older than it) are deleted by GC; at
#: least the staged-object age limit, so staged objects about to be committed survive.
DEFAULT_GC_GRACE_MS = STAGED_OBJECT_MAX_AGE_MS
#: Commit files and snapshots older than the newest snapshot by this are pruned.
DEFAULT_LOG_RETENTION_MS = 60 * 60 * 1000
#: Shortest accepted log retention: well above how long a reader may trust its view
#: without re-reading the snapshot hint (metalog.RELOAD_AFTER_MS).
MIN_LOG_RETENTION_MS = 2 * RELOAD_AFTER_MS
#: Merged and compacted segments are written as record batches of about this many
#: bytes (a read or lookup decodes few batches per segment) ...
REBATCH_TARGET_BYTES = 1 << 20
#: ... and at most this many rows each.
REBATCH_MAX_ROWS = 1 << 16


@dataclass
class RetentionReport:
    """Segments retention removes (or would remove) and the new log start offset."""

    removed_base_offsets: list[int] = field(default_factory=list)
    removed_records: int = 0
    removed_bytes: int = 0
    log_start_offset: int | None = None


@dataclass
class RewriteReport:
    """A compaction or merge: segments replaced, records kept and dropped."""

    replaced_segments: int = 0
    new_segments: int = 0
    records_before: int = 0
    records_after: int = 0
    tombstones_dropped: int = 0
    skipped_reason: str = ""


@dataclass
class MaintenanceReport:
    """What one maintenance pass over a partition did (or would do, in a dry run)."""

    topic: str
    partition: int
    dry_run: bool
    retention: RetentionReport = field(default_factory=RetentionReport)
    compaction: RewriteReport = field(default_factory=RewriteReport)
    merge: RewriteReport = field(default_factory=RewriteReport)

    @property
    def changed(self) -> bool:
        return bool(
            self.retention.removed_base_offsets
            or self.compaction.replaced_segments
            or self.merge.replaced_segments
        )


@dataclass
class GcReport:
    """Objects garbage collection deleted, newly marked, and kept."""

    deleted: list[str] = field(default_factory=list)
    marked: list[str] = field(default_factory=list)
    live_objects: int = 0
    dry_run: bool = False
    #: unreferenced objects marked and not yet deleted (a later pass has work to do)
    pending_marks: int = 0
    #: temp files a killed writer left (local roots), removed
    temp_files_removed: list[str] = field(default_factory=list)


# -- retention ----------------------------------------------------------------------------


def plan_retention(state: LogState, config: dict[str, Any], now: int) -> RetentionReport:
    """Oldest segments past ``retention.ms`` or beyond ``retention.bytes`` (Kafka's rules)."""
    report = RetentionReport()
    segments = state.segments.all()
    retention_ms, retention_bytes = config["retention.ms"], config["retention.bytes"]
    remaining_bytes = sum(s.size_bytes for s in segments)
    for seg in segments:
        too_old = retention_ms >= 0 and seg.max_timestamp_ms < now - retention_ms
        too_big = retention_bytes >= 0 and remaining_bytes - seg.size_bytes >= retention_bytes
        if not (too_old or too_big):
            break
        report.removed_base_offsets.append(seg.base_offset)
        report.removed_records += seg.record_count
        report.removed_bytes += seg.size_bytes
        remaining_bytes -= seg.size_bytes
    if report.removed_base_offsets:
        removed = set(report.removed_base_offsets)
        rest = [s for s in segments if s.base_offset not in removed]
        report.log_start_offset = rest[0].base_offset if rest else state.high_watermark
    return report


def apply_retention(
    log: PartitionLog,
    config: dict[str, Any],
    *,
    now: int | None = None,
    dry_run: bool = False,
    leader_epoch: int | None = None,
) -> RetentionReport:
    """Remove expired segments from the log (a commit); report what was removed."""
    now = now_ms() if now is None else now
    if dry_run:
        return plan_retention(log.refresh(), config, now)
    outcome: dict[str, RetentionReport] = {}

    def build(state: LogState) -> tuple[list[int], list[Segment], int | None] | None:
        report = plan_retention(state, config, now)
        outcome["report"] = report
        if not report.removed_base_offsets:
            return None
        return report.removed_base_offsets, [], report.log_start_offset

    log.refresh()
    log.replace_segments(build, "retention", leader_epoch)
    return outcome["report"]


def delete_records(
    log: PartitionLog, before_offset: int, *, leader_epoch: int | None = None
) -> int:
    """Kafka's DeleteRecords: move the log start to ``before_offset`` (-1: the high watermark).

    Segments wholly below it are removed (a commit); the rest stay and reads
    start at the new log start.  Returns the log start offset afterwards.
    """

    def build(state: LogState) -> tuple[list[int], list[Segment], int | None] | None:
        target = state.high_watermark if before_offset == -1 else before_offset
        if not 0 <= target <= state.high_watermark:
            raise OffsetOutOfRangeError(
                f"partition {log.name}: cannot delete records before offset {before_offset}; "
                f"accepted: -1 (the high watermark) or 0-{state.high_watermark}",
                state.log_start_offset,
                state.high_watermark,
            )
        if target <= state.log_start_offset:
            return None
        gone = [s.base_offset for s in state.segments.all() if s.end_offset <= target]
        return gone, [], target

    log.refresh()
    log.replace_segments(build, "delete_records", leader_epoch)
    return int(log.refresh().log_start_offset)


# -- compaction and merging -----------------------------------------------------------------


def _read_with_offsets(log: PartitionLog, segments: list[Segment]) -> pa.Table:
    batches: list[pa.RecordBatch] = []
    for seg in segments:
        batches.extend(log.segment_batches(seg, seg.base_offset, seg.end_offset))
    if not batches:
        return pa.schema([OFFSET_FIELD, *log.schema_for("")]).empty_table()
    return pa.Table.from_batches(batches)


def _chunk_rows(table: pa.Table, target_bytes: int) -> list[pa.Table]:
    """Split a table into pieces of about ``target_bytes`` each."""
    if table.num_rows == 0:
        return []
    per_row = max(table.nbytes / table.num_rows, 1.0)
    rows_per_piece = max(int(target_bytes / per_row), 1)
    return [table.slice(i, rows_per_piece) for i in range(0, table.num_rows, rows_per_piece)]


def rebatch(table: pa.Table) -> list[pa.RecordBatch]:
    """``table`` as record batches of about :data:`REBATCH_TARGET_BYTES` each.

    Merging reads many small segments, one IPC batch or more each; written as
    they came, a merged segment would keep every tiny batch, and every read or
    timestamp lookup in it would decode them one by one (2,000 merged one-record
    segments made a lookup 1,000x slower).  So the rows are gathered and cut
    again: at most :data:`REBATCH_MAX_ROWS` rows, about the target bytes.
    """
    if table.num_rows == 0:
        return []
    per_row = max(table.nbytes / table.num_rows, 1.0)
    rows = min(max(int(REBATCH_TARGET_BYTES / per_row), 1), REBATCH_MAX_ROWS)
    return table.combine_chunks().to_batches(max_chunksize=rows)


def _rewrite(
    topic: Topic,
    log: PartitionLog,
    old: list[Segment],
    table: pa.Table,
    *,
    keep_offsets: bool,
    segment_bytes: int,
) -> list[Segment]:
    """Write ``table`` as new segments that tile exactly the old segments' offset range."""
    range_start, range_end = old[0].base_offset, old[-1].end_offset
    pieces = _chunk_rows(table, segment_bytes)
    if not pieces:
        return []
    schema = topic.info.record_schema
    if keep_offsets:
        schema = pa.schema([OFFSET_FIELD, *schema])
    new: list[Segment] = []
    base = range_start
    for i, piece in enumerate(pieces):
        data = piece if keep_offsets else piece.drop_columns(["offset"])
        staged = write_object(
            topic.store,
            {log.partition: rebatch(data.cast(schema))},
            schema,
            schema_id=topic.info.value_schema_id,
            has_offsets=keep_offsets,
        )[log.partition]
        end = int(pieces[i + 1].column("offset")[0].as_py()) if i + 1 < len(pieces) else range_end
        new.append(replace(staged, base_offset=base, offset_span=end - base))
        base = end
    return new


def _commit_rewrite(
    log: PartitionLog,
    old: list[Segment],
    new: list[Segment],
    kind: str,
    report: RewriteReport,
    leader_epoch: int | None,
) -> None:
    wanted = {s.base_offset: s for s in old}

    def build(state: LogState) -> tuple[list[int], list[Segment], int | None] | None:
        live = {
            s.base_offset: s
            for s in state.segments.overlapping(old[0].base_offset, old[-1].end_offset)
        }
        if live != wanted:
            report.skipped_reason = "segments changed concurrently; will retry next pass"
            return None
        return list(wanted), new, None

    log.replace_segments(build, kind, leader_epoch)


#: The most bytes of keys one compaction pass holds in its key map (Kafka's
#: ``log.cleaner.dedupe.buffer.size``): a partition whose dirty part has more
#: distinct keys is compacted a prefix at a time, one prefix per pass.
COMPACTION_KEY_MAP_BYTES = 64 * 1024 * 1024


def _without_aborted(batch: pa.RecordBatch, aborted: list[tuple[int, int]]) -> pa.RecordBatch:
    """The batch without aborted transactions' records (an empty batch if none is left)."""
    kept = drop_aborted([batch], aborted)
    return kept[0] if kept else batch.slice(0, 0)


def _key_map(
    log: PartitionLog,
    segments: list[Segment],
    max_bytes: int,
    aborted: list[tuple[int, int]] | None = None,
) -> tuple[pa.Table | None, int]:
    """``(key, offset_max)`` of the keyed records in the longest prefix of ``segments``
    whose key map fits ``max_bytes`` (at least one segment), and the prefix's length.

    Read segment by segment, keys and offsets only: memory is the map plus one
    segment, never the partition.
    """
    import pyarrow.compute as pc

    key_map: pa.Table | None = None
    for i, seg in enumerate(segments):
        pieces = [
            (_without_aborted(b, aborted) if aborted else b).select(["key", "offset"])
            for b in log.segment_batches(seg, seg.base_offset, seg.end_offset)
        ]
        if not pieces:
            continue
        keys = pa.Table.from_batches(pieces)
        keys = keys.filter(pc.is_valid(keys.column("key"))).cast(
            pa.schema([keys.schema.field("key"), pa.field("offset", pa.int64())])
        )
        merged = keys if key_map is None else pa.concat_tables([key_map, keys])
        grown = (
            merged.group_by("key", use_threads=False)
            .aggregate([("offset", "max")])
            .rename_columns({"offset_max": "offset"})
            .select(["key", "offset"])
        )
        if i > 0 and grown.nbytes > max_bytes:
            return key_map, i  # this segment's keys do not fit: compact the ones before it
        key_map = grown
    return key_map, len(segments)


class _SegmentWriter:
    """Writes kept records as new segments of about ``segment_bytes`` that tile
    ``[range_start, range_end)`` exactly, holding at most one segment's rows."""

    def __init__(
        self, topic: Topic, log: PartitionLog, range_start: int, range_end: int, segment_bytes: int
    ) -> None:
        self.topic, self.log = topic, log
        self.range_start, self.range_end = range_start, range_end
        self.segment_bytes = segment_bytes
        self.schema = pa.schema([OFFSET_FIELD, *topic.info.record_schema])
        self._buffer: list[pa.RecordBatch] = []
        self._buffered_bytes = 0
        self._staged: list[tuple[Segment, int]] = []  # (segment, its first record's offset)

    def add(self, batch: pa.RecordBatch) -> None:
        if not batch.num_rows:
            return
        self._buffer.append(batch)
        self._buffered_bytes += batch.nbytes
        if self._buffered_bytes >= self.segment_bytes:
            self._flush()

    def _flush(self) -> None:
        if not self._buffer:
            return
        table = pa.Table.from_batches(self._buffer).cast(self.schema)
        first = int(table.column("offset")[0].as_py())
        staged = write_object(
            self.topic.store,
            {self.log.partition: rebatch(table)},
            self.schema,
            schema_id=self.topic.info.value_schema_id,
            has_offsets=True,
        )[self.log.partition]
        self._staged.append((staged, first))
        self._buffer, self._buffered_bytes = [], 0

    def finish(self) -> list[Segment]:
        """The new segments, each spanning up to the next one's first record."""
        self._flush()
        out = []
        for i, (staged, first) in enumerate(self._staged):
            base = self.range_start if i == 0 else first
            end = self._staged[i + 1][1] if i + 1 < len(self._staged) else self.range_end
            out.append(replace(staged, base_offset=base, offset_span=end - base))
        return out


def _cleanable_end(
    segments: list[Segment], dirty_from: int, config: dict[str, Any], now: int
) -> int:
    """How many of ``segments`` compaction may take: up to the first dirty one holding a
    record younger than ``min.compaction.lag.ms`` (Kafka's first uncleanable offset)."""
    lag = config["min.compaction.lag.ms"]
    if lag <= 0:
        return len(segments)
    for i in range(dirty_from, len(segments)):
        if segments[i].max_timestamp_ms > now - lag:
            return i
    return len(segments)


def compaction_due(state: LogState, config: dict[str, Any], now: int) -> str:
    """Whether the cleaner compacts this log now: "" if so, else why not.

    Kafka's choice of a log to clean: its cleanable dirty part (never compacted,
    below the last stable offset and ``min.compaction.lag.ms``) is more than
    ``min.cleanable.dirty.ratio`` of the cleanable log's bytes, or its oldest dirty
    record has waited ``max.compaction.lag.ms``.
    """
    segments = [s for s in state.segments.all() if s.end_offset <= state.last_stable_offset]
    dirty_from = next((i for i, s in enumerate(segments) if not s.has_offsets), None)
    if dirty_from is None:
        return "no dirty segment"
    max_lag = config["max.compaction.lag.ms"]
    oldest = min(s.min_timestamp_ms for s in segments[dirty_from:])
    if oldest < now - max_lag:
        return ""  # Kafka's needCompactionNow: the ratio does not matter
    end = _cleanable_end(segments, dirty_from, config, now)
    dirty = sum(s.size_bytes for s in segments[dirty_from:end])
    total = sum(s.size_bytes for s in segments[:end])
    ratio = dirty / total if total else 0.0
    if dirty and ratio > config["min.cleanable.dirty.ratio"]:
        return ""
    return (
        f"dirty ratio {ratio:.3f} is not above min.cleanable.dirty.ratio="
        f"{config['min.cleanable.dirty.ratio']} (and no dirty record is older than "
        f"max.compaction.lag.ms={max_lag})"
    )


def compact(
    topic: Topic,
    partition: int,
    *,
    now: int | None = None,
    dry_run: bool = False,
    leader_epoch: int | None = None,
    key_map_bytes_max: int = COMPACTION_KEY_MAP_BYTES,
) -> RewriteReport:
    """Keep the last record per key; drop tombstones older than ``delete.retention.ms``.

    Records without a key cannot be compacted and are kept as they are.

    Offsets are preserved (the new objects carry an offset column).  Runs only
    when some segment has not been compacted yet (the log has a dirty part), and
    takes the dirty segments only up to the first holding a record younger than
    ``min.compaction.lag.ms``.  Whether a log is worth compacting now
    (``min.cleanable.dirty.ratio``, ``max.compaction.lag.ms``) is the cleaner's
    choice: :func:`compaction_due`, asked by :func:`run_maintenance`.
    Memory is bounded as in Kafka's cleaner: a first pass builds the key map
    of the dirty segments (at most ``key_map_bytes_max`` of keys; beyond it,
    only a prefix of them is compacted this pass, the rest by the next), a
    second filters segment by segment and writes the kept records as they come.
    Kafka transactions: only segments below the last stable offset are compacted
    (an open transaction's records may yet be aborted), and aborted records are
    dropped first, so they never shadow a committed record of the same key.
    """
    import pyarrow.compute as pc

    now = now_ms() if now is None else now
    config = topic.info.effective_config
    log = topic.partition(partition)
    state = log.refresh()
    stable = state.last_stable_offset
    segments = [s for s in state.segments.all() if s.end_offset <= stable]
    aborted = aborted_between(state.transactions, 0, stable)
    report = RewriteReport()
    if not segments or all(s.has_offsets for s in segments):
        return report
    # As Kafka's cleaner: the key map covers the dirty segments (never compacted) that fit,
    # and the pass rewrites everything up to there, the clean part included (a key seen
    # again in the dirty part supersedes its older records there too).
    dirty_from = next(i for i, s in enumerate(segments) if not s.has_offsets)
    segments = segments[: _cleanable_end(segments, dirty_from, config, now)]
    if len(segments) == dirty_from:
        report.skipped_reason = (
            f"min.compaction.lag.ms={config['min.compaction.lag.ms']}: no dirty segment is "
            "that old yet"
        )
        return report
    key_map, count = _key_map(log, segments[dirty_from:], key_map_bytes_max, aborted)
    old = segments[: dirty_from + count]
    if key_map is None:
        key_map = pa.table({"key": pa.array([], pa.binary()), "offset": pa.array([], pa.int64())})
    latest = key_map.column("offset").combine_chunks()
    mapped_keys = key_map.column("key").combine_chunks()
    deletable_before_ms = now - config["delete.retention.ms"]
    writer = _SegmentWriter(
        topic, log, old[0].base_offset, old[-1].end_offset, config["segment.bytes"]
    )
    kept_bytes = 0
    for seg in old:
        for batch in log.segment_batches(seg, seg.base_offset, seg.end_offset):
            report.records_before += batch.num_rows
            if aborted:
                batch = _without_aborted(batch, aborted)
            key = batch.column("key")
            last = pc.or_(
                pc.or_(pc.is_null(key), pc.is_in(batch.column("offset"), value_set=latest)),
                pc.invert(pc.is_in(key, value_set=mapped_keys.cast(key.type))),
            )
            expired_tombstone = pc.and_(
                pc.and_(pc.is_null(batch.column("value")), pc.is_valid(key)),
                pc.less(batch.column("timestamp").cast(pa.int64()), deletable_before_ms),
            )
            report.tombstones_dropped += (
                pc.sum(pc.and_(last, expired_tombstone).cast(pa.int64())).as_py() or 0
            )
            kept = batch.filter(pc.and_(last, pc.invert(expired_tombstone)))
            report.records_after += kept.num_rows
            kept_bytes += kept.nbytes
            if not dry_run:
                writer.add(kept)
    report.replaced_segments = len(old)
    if dry_run:
        report.new_segments = -(-kept_bytes // config["segment.bytes"]) if kept_bytes else 0
        return report
    new = writer.finish()
    report.new_segments = len(new)
    _commit_rewrite(log, old, new, "compaction", report, leader_epoch)
    if report.skipped_reason:
        report.replaced_segments = report.new_segments = 0
    return report


def plan_merges(
    segments: list[Segment],
    segment_bytes: int,
    segment_ms: int | None = None,
    *,
    dirty_apart: bool = False,
) -> list[list[Segment]]:
    """Runs of adjacent small segments whose total stays within ``segment_bytes`` and
    whose records' timestamps span at most ``segment_ms`` (Kafka rolls a segment at
    ``segment.ms``: retention then drops records of about one age together).

    ``dirty_apart`` (compacted topics): a run never mixes compacted segments (with
    offsets) and dirty ones, since the merged segment would carry offsets and read as
    compacted, and its dirty records would never be compacted.
    """
    groups: list[list[Segment]] = []
    run: list[Segment] = []
    size = 0
    for seg in segments:
        contiguous = not run or run[-1].end_offset == seg.base_offset
        if dirty_apart and run:
            contiguous = contiguous and run[-1].has_offsets == seg.has_offsets
        if segment_ms is not None and run:
            first = min(min(s.min_timestamp_ms for s in run), seg.min_timestamp_ms)
            last = max(max(s.max_timestamp_ms for s in run), seg.max_timestamp_ms)
            contiguous = contiguous and last - first <= segment_ms
        if contiguous and size + seg.size_bytes <= segment_bytes:
            run.append(seg)
            size += seg.size_bytes
            continue
        if len(run) > 1:
            groups.append(run)
        run, size = ([seg], seg.size_bytes) if seg.size_bytes <= segment_bytes else ([], 0)
    if len(run) > 1:
        groups.append(run)
    return groups


def merge_small_segments(
    topic: Topic,
    partition: int,
    *,
    dry_run: bool = False,
    leader_epoch: int | None = None,
) -> RewriteReport:
    """Merge runs of small adjacent segments into segments near ``segment.bytes``
    (each spanning at most ``segment.ms`` of record time)."""
    config = topic.info.effective_config
    log = topic.partition(partition)
    groups = plan_merges(
        log.refresh().segments.all(),
        config["segment.bytes"],
        config["segment.ms"],
        dirty_apart="compact" in config["cleanup.policy"],
    )
    report = RewriteReport()
    for group in groups:
        report.replaced_segments += len(group)
        report.records_before += sum(s.record_count for s in group)
        report.records_after += sum(s.record_count for s in group)
        if dry_run:
            report.new_segments += 1
            continue
        table = _read_with_offsets(log, group)
        gaps = any(s.has_offsets for s in group)
        new = _rewrite(topic, log, group, table, keep_offsets=gaps, segment_bytes=1 << 62)
        part = RewriteReport()
        _commit_rewrite(log, group, new, "merge", part, leader_epoch)
        if part.skipped_reason:
            report.replaced_segments -= len(group)
            report.skipped_reason = part.skipped_reason
        else:
            report.new_segments += len(new)
    return report


def run_maintenance(
    topic: Topic,
    partition: int,
    *,
    now: int | None = None,
    dry_run: bool = False,
    leader_epoch: int | None = None,
) -> MaintenanceReport:
    """One pass of everything the topic's ``cleanup.policy`` asks for, then merging."""
    topic.reload()
    config = topic.info.effective_config
    policy = config["cleanup.policy"].split(",")
    report = MaintenanceReport(topic.name, partition, dry_run)
    log = topic.partition(partition)
    if "delete" in policy:
        report.retention = apply_retention(
            log, config, now=now, dry_run=dry_run, leader_epoch=leader_epoch
        )
    if "compact" in policy:
        why_not = compaction_due(
            log.refresh(), config, now_ms() if now is None else now
        )  # the cleaner's choice; compact() itself compacts whatever is dirty
        if why_not:
            report.compaction = RewriteReport(skipped_reason=why_not)
        else:
            report.compaction = compact(
                topic, partition, now=now, dry_run=dry_run, leader_epoch=leader_epoch
            )
    report.merge = merge_small_segments(
        topic, partition, dry_run=dry_run, leader_epoch=leader_epoch
    )
    return report


#: a time no partition's maintenance falls due by itself (only a write brings it closer)
NEVER_DUE_MS = 1 << 62


def maintenance_due_ms(state: LogState, config: dict[str, Any], now: int) -> int:
    """When :func:`run_maintenance` next has work on a partition found in ``state``, if
    nothing is written to it: ``now`` if it has work now (or the topic's rules need a look
    every pass: dirty records of a compacted topic), the oldest segment's expiry by
    ``retention.ms``, or :data:`NEVER_DUE_MS`.  Lets a cleaner skip an idle partition
    without reading its log (issue 37)."""
    segments = state.segments.all()
    policy = config["cleanup.policy"].split(",")
    compacted = "compact" in policy
    if plan_merges(segments, config["segment.bytes"], config["segment.ms"], dirty_apart=compacted):
        return now
    if compacted and any(not s.has_offsets for s in segments):
        return now
    due = NEVER_DUE_MS
    if "delete" in policy and segments:
        if plan_retention(state, config, now).removed_base_offsets:
            return now
        if config["retention.ms"] >= 0:
            due = segments[0].max_timestamp_ms + config["retention.ms"] + 1
    return due


# -- garbage collection ---------------------------------------------------------------------

MARKS_KEY = "gc/marks.json"


def collect_garbage(
    topic: Topic,
    grace_ms: int = DEFAULT_GC_GRACE_MS,
    *,
    now: int | None = None,
    dry_run: bool = False,
) -> GcReport:
    """Mark-and-sweep the topic's objects.

    An object no live segment references is first *marked*; it is deleted by a
    later pass once it has been unreferenced for ``grace_ms`` and is itself
    older than ``grace_ms`` (so staged objects of writers about to commit, and
    objects readers may still hold in older segment lists, survive).
    """
    if grace_ms < STAGED_OBJECT_MAX_AGE_MS and grace_ms != 0:
        raise InvalidConfigurationError(
            f"gc grace {grace_ms} ms is shorter than the staged-object limit "
            f"{STAGED_OBJECT_MAX_AGE_MS} ms; accepted: 0 (tests only) or >= that limit"
        )
    now = now_ms() if now is None else now
    topic.reload()
    referenced = _referenced_objects(topic)
    marks = read_gc_marks(topic.store, MARKS_KEY)
    report = GcReport(dry_run=dry_run)
    new_marks: dict[str, int] = {}
    for obj in topic.store.list_objects("objects"):
        if obj.key in referenced:
            report.live_objects += 1
            continue
        verdict = mark_or_sweep(obj, marks, new_marks, now, grace_ms)
        if verdict == "marked":
            report.marked.append(obj.key)
        elif verdict == "due":
            report.deleted.append(obj.key)
    if dry_run:
        return report
    # Re-check references just before deleting: a writer may have committed meanwhile.
    referenced |= _referenced_objects(topic)
    report.deleted = [k for k in report.deleted if k not in referenced]
    for key in report.deleted:
        topic.store.delete(key)
    report.pending_marks = len(new_marks)
    if new_marks != marks:  # an idle topic's pass writes nothing
        topic.store.put(MARKS_KEY, encode_document(dict(new_marks)))
    # a temp file younger than a staged object's limit may be a live write's: never cut short
    report.temp_files_removed = topic.store.remove_stale_temp_files(
        "", max(grace_ms, STAGED_OBJECT_MAX_AGE_MS), now
    )
    return report


def read_gc_marks(store: ObjectStore, key: str) -> dict[str, int]:
    """A collector's marks: object key -> when it was first seen unreferenced (ms)."""
    raw = store.get_or_none(key)
    if not raw:
        return {}
    return {k: int(v) for k, v in parse_document(raw, f"{store.url}/{key}").items()}


def mark_or_sweep(
    obj: ObjectInfo, marks: Mapping[str, int], new_marks: dict[str, int], now: int, grace_ms: int
) -> str:
    """The fate of an object nothing references: ``marked`` (first seen now), ``due`` (it
    has been unreferenced for ``grace_ms`` and is itself that old) or ``kept`` (not yet);
    the marks the next pass keeps go into ``new_marks``."""
    marked_at = marks.get(obj.key)
    if marked_at is None:
        new_marks[obj.key] = now
        return "marked"
    if now - marked_at >= grace_ms and now - obj.modified_ms >= grace_ms:
        return "due"
    new_marks[obj.key] = marked_at
    return "kept"


def _referenced_objects(topic: Topic) -> set[str]:
    """Every object a live segment of any partition references (one refresh per shard)."""
    referenced: set[str] = set()
    for s in range(topic.shards):
        state = topic.shard(s).refresh()
        for part in state.parts.values():
            referenced.update(seg.object_key for seg in part.segments.all())
    return referenced


@dataclass
class PruneReport:
    """Metadata files (commits, snapshots) pruning deleted, or would delete in a dry run."""

    deleted: list[str] = field(default_factory=list)
    dry_run: bool = False
    #: files below the newest snapshot kept only because they are younger than the
    #: retention (a later pass has work to do even if the log does not change)
    waiting: int = 0
    #: when the first of them comes of age (ms; None: nothing waits): a pass before then
    #: over an unchanged log would find nothing to delete
    waiting_until_ms: int | None = None

    def note_waiting(self, waiting: list[tuple[str, int]]) -> PruneReport:
        """Record ``waiting`` (key, comes of age ms) as :func:`metalog.prune_log` gave it."""
        self.waiting = len(waiting)
        self.waiting_until_ms = min((due for _, due in waiting), default=None)
        return self


def _check_log_retention(retention_ms: int) -> None:
    if retention_ms < MIN_LOG_RETENTION_MS:
        raise InvalidConfigurationError(
            f"log retention {retention_ms} ms is not accepted; accepted: >= "
            f"{MIN_LOG_RETENTION_MS} ms (readers trust their view that long)"
        )


def prune_topic_logs(
    topic: Topic,
    retention_ms: int = DEFAULT_LOG_RETENTION_MS,
    *,
    now: int | None = None,
    dry_run: bool = False,
) -> PruneReport:
    """Delete each shard log's commits and snapshots older than its newest snapshot.

    Only files older than ``retention_ms`` go, so a reader that opened the log
    recently still finds the commits after its snapshot; the file count of a
    log stays bounded by about ``snapshot_interval`` plus what the window holds.
    """
    _check_log_retention(retention_ms)
    report = PruneReport(dry_run=dry_run)
    waiting: list[tuple[str, int]] = []
    for s in range(topic.shards):
        prefix = topic.shard(s).prefix
        report.deleted.extend(
            prune_log(
                topic.store,
                prefix,
                retention_ms=retention_ms,
                now=now,
                dry_run=dry_run,
                waiting=waiting,
            )
        )
    return report.note_waiting(waiting)


def prune_group_log(
    root: LogRoot,
    group: str,
    retention_ms: int = DEFAULT_LOG_RETENTION_MS,
    *,
    now: int | None = None,
    dry_run: bool = False,
) -> PruneReport:
    """:func:`prune_topic_logs` for a consumer group's log."""
    log, _ = root.groups.log(group)
    return _prune_one_log(root, log.prefix, retention_ms, now=now, dry_run=dry_run)


def prune_transaction_log(
    root: LogRoot,
    transactional_id: str,
    retention_ms: int = DEFAULT_LOG_RETENTION_MS,
    *,
    now: int | None = None,
    dry_run: bool = False,
) -> PruneReport:
    """:func:`prune_topic_logs` for a transactional id's log (one fold commit per fold
    interval while the id is busy: without pruning, about 1,440 files a day)."""
    log, _ = root.transactions.log(transactional_id)
    return _prune_one_log(root, log.prefix, retention_ms, now=now, dry_run=dry_run)


def _prune_one_log(
    root: LogRoot, prefix: str, retention_ms: int, *, now: int | None, dry_run: bool
) -> PruneReport:
    """Prune the log at ``prefix`` (a group's, a transactional id's) below its retention."""
    _check_log_retention(retention_ms)
    waiting: list[tuple[str, int]] = []
    deleted = prune_log(
        root.store, prefix, retention_ms=retention_ms, now=now, dry_run=dry_run, waiting=waiting
    )
    return PruneReport(deleted, dry_run).note_waiting(waiting)


def prune_metadata_log(
    root: LogRoot,
    retention_ms: int = DEFAULT_LOG_RETENTION_MS,
    *,
    now: int | None = None,
    dry_run: bool = False,
) -> PruneReport:
    """:func:`prune_topic_logs` for the cluster metadata log (issue 37: 10,000 topic
    creations and deletions left 19,994 files in it).  Its snapshots hold the whole
    image, so nothing before the newest one is ever read again once every reader has
    moved past it, which the retention window guarantees as it does for shard logs."""
    _check_log_retention(retention_ms)
    log = root.metadata.log
    waiting: list[tuple[str, int]] = []
    deleted = prune_log(
        root.store, log.prefix, retention_ms=retention_ms, now=now, dry_run=dry_run, waiting=waiting
    )
    return PruneReport(deleted, dry_run).note_waiting(waiting)
