"""Planning reads: offset ranges -> Spark tasks sized by bytes, and per-trigger rate limits.

Each Spark task costs tens of milliseconds of fixed executor time, so tasks are
planned by bytes, not one per partition or segment: a backlog becomes about one
task per core (``minPartitions`` asks for more, splitting big ranges), and many
small ranges are packed into one task.  The rate limits split a budget of
offsets (``maxOffsetsPerTrigger``) or bytes (``maxBytesPerTrigger``) across
partitions in proportion to their backlog, as Spark's Kafka source does.
Everything here is deterministic: the same ranges and segments give the same plan.
"""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from pyspark.sql.datasource import InputPartition

from sparklog.storage import Segment, TopicInfo
from sparklog.topic_partition import TopicPartition

#: Below this many bytes per task, another task costs more than it saves: a task
#: has ~55 ms of fixed cost here, about what reading 8 MiB takes on one core.
MIN_TASK_BYTES = 8 << 20


@dataclass(frozen=True)
class ReadRange:
    """Offsets ``[start, end)`` of one partition, with the layout to size and split it.

    ``bounds``/``cum_bytes`` are cumulative byte counts at segment boundaries
    (offset -> bytes before it), used to prorate bytes within the range.
    """

    topic: str
    partition: int
    start: int
    end: int
    bounds: tuple[int, ...] = ()
    cum_bytes: tuple[int, ...] = ()

    @property
    def size_bytes(self) -> int:
        return int(self.bytes_at(self.end) - self.bytes_at(self.start))

    def bytes_at(self, offset: int) -> float:
        if not self.bounds:
            return float(offset)  # no layout known: one byte per offset
        return float(np.interp(offset, self.bounds, self.cum_bytes))

    def offset_at_bytes(self, position: float, *, floor: bool = False) -> int:
        """The offset before which about ``position`` bytes of the layout lie.

        Bytes are prorated evenly over a segment's records (the layout knows no
        finer); ``floor`` rounds down, for budgets that must not be exceeded.
        """
        exact = (
            position if not self.bounds else float(np.interp(position, self.cum_bytes, self.bounds))
        )
        return math.floor(exact) if floor else round(exact)

    def piece(self, start: int, end: int) -> ReadRange:
        return ReadRange(self.topic, self.partition, start, end, self.bounds, self.cum_bytes)


def layout_of(segments: Sequence[Segment], start: int, end: int) -> tuple[tuple, tuple]:
    """Cumulative bytes at the boundaries of the segments overlapping ``[start, end)``."""
    bounds: list[int] = []
    cum: list[int] = []
    total = 0
    for seg in segments:
        if seg.end_offset <= start or seg.base_offset >= end:
            continue
        if not bounds or bounds[-1] != seg.base_offset:
            bounds.append(seg.base_offset)
            cum.append(total)
        total += seg.size_bytes
        bounds.append(seg.end_offset)
        cum.append(total)
    return tuple(bounds), tuple(cum)


@dataclass
class ReadTask(InputPartition):
    """One Spark task: the ranges it reads and all it needs to read them on an executor.

    Executors get a pickled copy of this, never the driver's reader state.
    """

    index: int
    root_url: str
    storage_options: dict[str, Any]
    topics: dict[str, TopicInfo]
    ranges: list[ReadRange]
    fail_on_data_loss: bool = True
    #: leave out aborted transactions' records (the ranges end at last stable offsets)
    read_committed: bool = False


def default_parallelism() -> int:
    """Cores available to the executors, as seen by the planner (local mode: this host)."""
    return max(1, os.cpu_count() or 1)


def plan_tasks(
    ranges: Sequence[ReadRange],
    *,
    min_partitions: int | None,
    cores: int,
    max_records: int | None = None,
) -> list[list[ReadRange]]:
    """Group ranges into tasks of about equal bytes; split big ranges, pack small ones.

    ``max_records`` (Kafka's maxRecordsPerPartition) caps the records of every
    task: ranges are cut into pieces of at most that many offsets, each its own
    task, as Kafka's connector does.
    """
    ranges = [r for r in ranges if r.end > r.start]
    if not ranges:
        return []
    if max_records:
        return [[piece] for piece in split_by_records(ranges, max_records)]
    total = sum(max(r.size_bytes, 1) for r in ranges)
    tasks = max(1, min(cores, math.ceil(total / MIN_TASK_BYTES)))
    if min_partitions:
        tasks = max(tasks, min_partitions)
    target = total / tasks
    pieces: list[ReadRange] = []
    for r in ranges:
        size = max(r.size_bytes, 1)
        count = min(max(1, math.ceil(size / target - 1e-9)), r.end - r.start)
        if count == 1:
            pieces.append(r)
            continue
        lo = r.bytes_at(r.start)
        cuts = [r.start]
        for k in range(1, count):
            cut = r.offset_at_bytes(lo + size * k / count)
            cuts.append(min(max(cut, cuts[-1] + 1), r.end - (count - k)))
        cuts.append(r.end)
        pieces.extend(r.piece(a, b) for a, b in itertools.pairwise(cuts) if b > a)
    # Longest-processing-time packing; ties broken by position for determinism.
    order = sorted(range(len(pieces)), key=lambda i: (-max(pieces[i].size_bytes, 1), i))
    bins: list[list[ReadRange]] = [[] for _ in range(min(tasks, len(pieces)))]
    loads = [0] * len(bins)
    for i in order:
        j = min(range(len(bins)), key=lambda j: (loads[j], j))
        bins[j].append(pieces[i])
        loads[j] += max(pieces[i].size_bytes, 1)
    for chosen in bins:
        chosen.sort(key=lambda r: (r.topic, r.partition, r.start))
    return [b for b in bins if b]


def split_by_records(ranges: Sequence[ReadRange], max_records: int) -> list[ReadRange]:
    """Each range cut into equal pieces of at most ``max_records`` offsets."""
    pieces: list[ReadRange] = []
    for r in ranges:
        count = math.ceil((r.end - r.start) / max_records)
        cuts = [r.start + (r.end - r.start) * k // count for k in range(count + 1)]
        pieces.extend(r.piece(a, b) for a, b in itertools.pairwise(cuts) if b > a)
    return pieces


def split_budget(backlogs: Mapping[TopicPartition, int], budget: int) -> dict[TopicPartition, int]:
    """Share ``budget`` across partitions in proportion to their backlog (largest remainder).

    Never gives a partition more than its backlog; the shares sum to
    ``min(budget, total backlog)``.
    """
    keys = sorted(tp for tp, n in backlogs.items() if n > 0)
    total = sum(backlogs[tp] for tp in keys)
    if total <= budget:
        return {tp: backlogs[tp] for tp in keys}
    exact = {tp: budget * backlogs[tp] / total for tp in keys}
    share = {tp: min(math.floor(exact[tp]), backlogs[tp]) for tp in keys}
    left = budget - sum(share.values())
    for tp in sorted(keys, key=lambda tp: (-(exact[tp] - share[tp]), tp)):
        if left <= 0:
            break
        if share[tp] < backlogs[tp]:
            share[tp] += 1
            left -= 1
    return share


def limit_by_offsets(
    start: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int], max_offsets: int
) -> dict[TopicPartition, int]:
    """End offsets reading at most ``max_offsets`` records in all, split by backlog."""
    backlogs = {tp: max(latest[tp] - start.get(tp, 0), 0) for tp in latest}
    share = split_budget(backlogs, max_offsets)
    out: dict[TopicPartition, int] = {}
    for tp, end in latest.items():
        out[tp] = start.get(tp, 0) + share.get(tp, 0) if backlogs[tp] > 0 else end
    return out


def limit_by_bytes(
    ranges: Mapping[TopicPartition, ReadRange], max_bytes: int
) -> dict[TopicPartition, int]:
    """End offsets reading about ``max_bytes`` in all (at least one record), split by backlog."""
    sizes = {tp: r.size_bytes for tp, r in ranges.items() if r.end > r.start}
    share = split_budget(sizes, max_bytes)
    out: dict[TopicPartition, int] = {}
    for tp, r in ranges.items():
        if tp not in share or share[tp] >= sizes.get(tp, 0):
            out[tp] = r.end
            continue
        end = r.offset_at_bytes(r.bytes_at(r.start) + share[tp], floor=True)
        out[tp] = min(max(end, r.start), r.end)
    if sizes and all(out[tp] == ranges[tp].start for tp in sizes):
        first = min(sizes)  # always progress by one record so a big record cannot stall
        out[first] = ranges[first].start + 1
    return out
