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

import json
from dataclasses import dataclass, field, replace
from typing import Any

import pyarrow as pa

from sparklog.errors import InvalidConfigurationError, OffsetOutOfRangeError, SparklogError
from sparklog.storage.catalog import LogRoot
from sparklog.storage.clock import now_ms
from sparklog.storage.log import STAGED_OBJECT_MAX_AGE_MS, LogState, PartitionLog
from sparklog.storage.metalog import RELOAD_AFTER_MS, prune_log
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
        batches.extend(log._segment_batches(seg, seg.base_offset, seg.end_offset))
    if not batches:
        return pa.schema([OFFSET_FIELD, *log.schema_for("")]).empty_table()
    return pa.Table.from_batches(batches)


def _last_per_key(table: pa.Table) -> pa.Table:
    """Keep the last record of each key (null keys are kept), in offset order."""
    import pyarrow.compute as pc

    if table.num_rows == 0:
        return table
    indices = pa.array(range(table.num_rows), pa.int64())
    keyed = table.append_column("__row", indices)
    null_key = pc.is_null(keyed.column("key"))
    with_key = keyed.filter(pc.invert(null_key))
    last = with_key.group_by("key", use_threads=False).aggregate([("__row", "max")])
    keep = pa.concat_arrays(
        [
            last.column("__row_max").combine_chunks(),
            keyed.filter(null_key).column("__row").combine_chunks(),
        ]
    )
    rows = keep.take(pc.sort_indices(keep))
    return table.take(rows)


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


def compact(
    topic: Topic,
    partition: int,
    *,
    now: int | None = None,
    dry_run: bool = False,
    leader_epoch: int | None = None,
) -> RewriteReport:
    """Keep the last record per key; drop tombstones older than ``delete.retention.ms``.

    Records without a key cannot be compacted and are kept as they are.

    Offsets are preserved (the new objects carry an offset column).  Runs only
    when some segment has not been compacted yet (the log has a dirty part).
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
    old = [s for s in state.segments.all() if s.end_offset <= stable]
    report = RewriteReport()
    if not old or all(s.has_offsets for s in old):
        return report
    table = _read_with_offsets(log, old)
    aborted = aborted_between(state.transactions, 0, stable)
    if aborted:
        table = pa.Table.from_batches(
            drop_aborted(table.to_batches(), aborted), schema=table.schema
        )
    report.records_before = table.num_rows
    kept = _last_per_key(table)
    tombstone = pc.and_(pc.is_null(kept.column("value")), pc.is_valid(kept.column("key")))
    expired = pc.less(
        kept.column("timestamp").cast(pa.int64()), now - config["delete.retention.ms"]
    )
    drop = pc.and_(tombstone, expired)
    report.tombstones_dropped = pc.sum(drop.cast(pa.int64())).as_py() or 0
    kept = kept.filter(pc.invert(drop))
    report.records_after = kept.num_rows
    report.replaced_segments = len(old)
    if dry_run:
        report.new_segments = len(_chunk_rows(kept, config["segment.bytes"]))
        return report
    new = _rewrite(topic, log, old, kept, keep_offsets=True, segment_bytes=config["segment.bytes"])
    report.new_segments = len(new)
    _commit_rewrite(log, old, new, "compaction", report, leader_epoch)
    if report.skipped_reason:
        report.replaced_segments = report.new_segments = 0
    return report


def plan_merges(segments: list[Segment], segment_bytes: int) -> list[list[Segment]]:
    """Runs of adjacent small segments whose total stays within ``segment_bytes``."""
    groups: list[list[Segment]] = []
    run: list[Segment] = []
    size = 0
    for seg in segments:
        contiguous = not run or run[-1].end_offset == seg.base_offset
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
    """Merge runs of small adjacent segments into segments near ``segment.bytes``."""
    segment_bytes = topic.info.effective_config["segment.bytes"]
    log = topic.partition(partition)
    groups = plan_merges(log.refresh().segments.all(), segment_bytes)
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
        report.compaction = compact(
            topic, partition, now=now, dry_run=dry_run, leader_epoch=leader_epoch
        )
    report.merge = merge_small_segments(
        topic, partition, dry_run=dry_run, leader_epoch=leader_epoch
    )
    return report


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
        raise SparklogError(
            f"gc grace {grace_ms} ms is shorter than the staged-object limit "
            f"{STAGED_OBJECT_MAX_AGE_MS} ms; accepted: 0 (tests only) or >= that limit"
        )
    now = now_ms() if now is None else now
    topic.reload()
    referenced = _referenced_objects(topic)
    raw = topic.store.get_or_none(MARKS_KEY)
    marks: dict[str, int] = json.loads(raw) if raw else {}
    report = GcReport(dry_run=dry_run)
    new_marks: dict[str, int] = {}
    for obj in topic.store.list_objects("objects"):
        if obj.key in referenced:
            report.live_objects += 1
            continue
        marked_at = marks.get(obj.key)
        if marked_at is None:
            report.marked.append(obj.key)
            new_marks[obj.key] = now
        elif now - marked_at >= grace_ms and now - obj.modified_ms >= grace_ms:
            report.deleted.append(obj.key)
        else:
            new_marks[obj.key] = marked_at
    if dry_run:
        return report
    # Re-check references just before deleting: a writer may have committed meanwhile.
    referenced |= _referenced_objects(topic)
    report.deleted = [k for k in report.deleted if k not in referenced]
    for key in report.deleted:
        topic.store.delete(key)
    topic.store.put(MARKS_KEY, json.dumps(new_marks, sort_keys=True).encode())
    return report


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
    for s in range(topic.shards):
        prefix = topic.shard(s).prefix
        report.deleted.extend(
            prune_log(topic.store, prefix, retention_ms=retention_ms, now=now, dry_run=dry_run)
        )
    return report


def prune_group_log(
    root: LogRoot,
    group: str,
    retention_ms: int = DEFAULT_LOG_RETENTION_MS,
    *,
    now: int | None = None,
    dry_run: bool = False,
) -> PruneReport:
    """:func:`prune_topic_logs` for a consumer group's log."""
    _check_log_retention(retention_ms)
    log, _ = root.groups.log(group)
    return PruneReport(
        prune_log(root.store, log.prefix, retention_ms=retention_ms, now=now, dry_run=dry_run),
        dry_run,
    )
