"""The set of live segments of one partition, cheap to open however long the log.

A snapshot holds a partition's segments as Arrow tables in *chunks* of
consecutive segments; a chunk read from an indexed snapshot stays on the
object store until a lookup needs it (see :class:`LazyChunk`), so opening a
partition with 100,000 segments reads only the chunk its reads touch.
Commits since the snapshot are an overlay of added and removed segments.
Lookups find the chunk by its first base offset, binary-search its
``base_offset`` column and only materialise the segments a read needs.
Applying a commit never loads a chunk.
"""

from __future__ import annotations

import bisect
import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from sparklog.storage.records import int64_values
from sparklog.storage.segments import Segment, segments_from_table, segments_to_table


@dataclass
class LazyChunk:
    """Consecutive segments of one partition, described before they are read.

    ``first_base`` is the first segment's base offset, ``end_offset`` one past
    the last offset any of them covers, ``max_timestamp_ms`` their largest
    timestamp; ``load`` reads (and verifies) the table when a lookup needs it.
    """

    first_base: int
    end_offset: int
    rows: int
    max_timestamp_ms: int
    load: Callable[[], pa.Table]
    table: pa.Table | None = None
    bases: np.ndarray | None = None

    @classmethod
    def of(cls, table: pa.Table) -> LazyChunk:
        """A chunk already in memory."""
        bases = int64_values(table.column("base_offset"))
        ends = bases + int64_values(table.column("offset_span"))
        chunk = cls(
            first_base=int(bases[0]),
            end_offset=int(ends.max()),
            rows=table.num_rows,
            max_timestamp_ms=int(int64_values(table.column("max_timestamp_ms")).max()),
            load=lambda: table,
        )
        chunk.table, chunk.bases = table, bases
        return chunk

    def loaded(self) -> tuple[pa.Table, np.ndarray]:
        if self.table is None or self.bases is None:
            table = self.load()
            self.bases = int64_values(table.column("base_offset"))
            self.table = table
        return self.table, self.bases


@dataclass(frozen=True)
class ChunkDirectory:
    """A snapshot's description of one partition's chunks, column by column, oldest first
    (what opening reads; a :class:`LazyChunk` is made only for a chunk a lookup reaches)."""

    first_bases: list[int]
    end_offsets: list[int]
    rows: list[int]
    max_timestamps_ms: list[int]
    load: Callable[[int], pa.Table]

    def chunk(self, i: int) -> LazyChunk:
        return LazyChunk(
            self.first_bases[i],
            self.end_offsets[i],
            self.rows[i],
            self.max_timestamps_ms[i],
            functools.partial(self.load, i),
        )


class SegmentIndex:
    """Live segments ordered by base offset: snapshot chunks plus an overlay."""

    def __init__(
        self,
        table: pa.Table | None = None,
        chunks: list[LazyChunk] | None = None,
        directory: ChunkDirectory | None = None,
    ) -> None:
        self._directory = directory
        self._made: dict[int, LazyChunk] = {}
        if directory is not None:
            self._firsts = directory.first_bases
            self._chunks_end = max(directory.end_offsets, default=0)
        else:
            found = list(chunks or [])
            if table is not None and table.num_rows:
                found.append(LazyChunk.of(table))
            found.sort(key=lambda c: c.first_base)
            self._made = dict(enumerate(found))
            self._firsts = [c.first_base for c in found]
            self._chunks_end = max((c.end_offset for c in found), default=0)
        # bases hidden from the chunks: removed, or shadowed by the overlay's version
        self._removed: set[int] = set()
        self._added: dict[int, Segment] = {}
        self._added_keys: list[int] = []

    def _chunk(self, i: int) -> LazyChunk:
        made = self._made.get(i)
        if made is None:
            assert self._directory is not None
            made = self._made[i] = self._directory.chunk(i)
        return made

    @property
    def _chunks(self) -> list[LazyChunk]:
        return [self._chunk(i) for i in range(len(self._firsts))]

    # -- changes (never load a chunk) --------------------------------------
    def add(self, segment: Segment) -> None:
        base = segment.base_offset
        if base < self._chunks_end:
            self._removed.add(base)  # the overlay's version shadows a chunk's
        if base not in self._added:
            bisect.insort(self._added_keys, base)
        self._added[base] = segment

    def remove(self, base_offset: int) -> None:
        if base_offset in self._added:
            del self._added[base_offset]
            self._added_keys.remove(base_offset)
        if base_offset < self._chunks_end:
            self._removed.add(base_offset)

    # -- queries -----------------------------------------------------------
    def _chunk_rows(self, chunk: LazyChunk, lo: int = 0, hi: int | None = None) -> list[Segment]:
        table, _ = chunk.loaded()
        hi = table.num_rows if hi is None else hi
        if hi <= lo:
            return []
        out = segments_from_table(table.slice(lo, hi - lo))
        return [s for s in out if s.base_offset not in self._removed]

    def overlapping(self, start: int, end: int) -> list[Segment]:
        """Live segments covering any offset in ``[start, end)``, in order."""
        out: list[Segment] = []
        first = max(bisect.bisect_right(self._firsts, start) - 1, 0)
        last = bisect.bisect_left(self._firsts, end)
        for chunk in (self._chunk(i) for i in range(first, last)):
            if chunk.end_offset <= start:
                continue
            _, bases = chunk.loaded()
            lo = max(int(np.searchsorted(bases, start, side="right")) - 1, 0)
            hi = int(np.searchsorted(bases, end, side="left"))
            out.extend(s for s in self._chunk_rows(chunk, lo, hi) if s.end_offset > start)
        i = max(bisect.bisect_right(self._added_keys, start) - 1, 0)
        j = bisect.bisect_left(self._added_keys, end)
        extra = [self._added[k] for k in self._added_keys[i:j]]
        out.extend(s for s in extra if s.end_offset > start and s.base_offset < end)
        out.sort(key=lambda s: s.base_offset)
        return out

    def all(self) -> list[Segment]:
        rows = [s for chunk in self._chunks for s in self._chunk_rows(chunk)]
        rows.extend(self._added[k] for k in self._added_keys)
        rows.sort(key=lambda s: s.base_offset)
        return rows

    def __len__(self) -> int:
        hidden = 0
        if self._removed:
            for chunk in self._chunks:
                _, bases = chunk.loaded()
                hidden += int(np.isin(bases, np.fromiter(self._removed, dtype=np.int64)).sum())
        return sum(c.rows for c in self._chunks) - hidden + len(self._added_keys)

    def first_with_max_timestamp_at_least(self, timestamp_ms: int) -> Segment | None:
        """The earliest live segment holding a record at or after ``timestamp_ms``."""
        chunk_hit: Segment | None = None
        for chunk in self._chunks:
            if chunk.max_timestamp_ms < timestamp_ms:
                continue  # skipped without reading it
            table, bases = chunk.loaded()
            maxes = int64_values(table.column("max_timestamp_ms"))
            for i in np.nonzero(maxes >= timestamp_ms)[0]:
                if int(bases[i]) not in self._removed:
                    chunk_hit = self._chunk_rows(chunk, int(i), int(i) + 1)[0]
                    break
            if chunk_hit is not None:
                break
        added = [
            self._added[k]
            for k in self._added_keys
            if self._added[k].max_timestamp_ms >= timestamp_ms
        ]
        hits = [h for h in (chunk_hit, added[0] if added else None) if h is not None]
        return min(hits, key=lambda s: s.base_offset) if hits else None

    def to_table(self) -> pa.Table:
        """All live segments as an Arrow table, built column-wise (no per-segment objects)."""
        parts = []
        removed = np.fromiter(self._removed, dtype=np.int64) if self._removed else None
        for chunk in self._chunks:
            table, bases = chunk.loaded()
            if removed is not None:
                table = table.filter(pa.array(~np.isin(bases, removed)))
            parts.append(table)
        if self._added_keys:
            parts.append(segments_to_table([self._added[k] for k in self._added_keys]))
        if not parts:
            return segments_to_table([])
        table = pa.concat_tables(parts)
        if len(parts) > 1:
            table = table.sort_by("base_offset")
        return table
