"""The set of live segments of one partition, cheap to open however long the log.

A snapshot holds the segments as an Arrow table (loaded without parsing per
segment); commits since the snapshot are an overlay of added and removed
segments.  Lookups binary-search the table's ``base_offset`` column and only
materialise the segments a read needs, so opening a log with 100,000 segments
costs about what opening one with ten does.
"""

from __future__ import annotations

import bisect

import numpy as np
import pyarrow as pa

from sparklog.storage.segments import Segment, segments_from_table, segments_to_table


class SegmentIndex:
    """Live segments ordered by base offset: a snapshot table plus an overlay."""

    def __init__(self, table: pa.Table | None = None) -> None:
        self._table = table if table is not None and table.num_rows else None
        self._bases = (
            self._table.column("base_offset").to_numpy() if self._table is not None else None
        )
        self._removed: set[int] = set()
        self._added: dict[int, Segment] = {}
        self._added_keys: list[int] = []

    # -- changes -----------------------------------------------------------
    def add(self, segment: Segment) -> None:
        base = segment.base_offset
        if self._in_table(base):
            self._removed.add(base)  # the overlay's version shadows the table's
        if base not in self._added:
            bisect.insort(self._added_keys, base)
        self._added[base] = segment

    def remove(self, base_offset: int) -> None:
        if base_offset in self._added:
            del self._added[base_offset]
            self._added_keys.remove(base_offset)
        if self._in_table(base_offset):
            self._removed.add(base_offset)

    def _in_table(self, base: int) -> bool:
        if self._bases is None:
            return False
        i = int(np.searchsorted(self._bases, base))
        return i < len(self._bases) and int(self._bases[i]) == base

    # -- queries -----------------------------------------------------------
    def _table_rows(self, lo: int, hi: int) -> list[Segment]:
        if self._table is None or hi <= lo:
            return []
        out = segments_from_table(self._table.slice(lo, hi - lo))
        return [s for s in out if s.base_offset not in self._removed]

    def overlapping(self, start: int, end: int) -> list[Segment]:
        """Live segments covering any offset in ``[start, end)``, in order."""
        out: list[Segment] = []
        if self._bases is not None:
            lo = max(int(np.searchsorted(self._bases, start, side="right")) - 1, 0)
            hi = int(np.searchsorted(self._bases, end, side="left"))
            out = [s for s in self._table_rows(lo, hi) if s.end_offset > start]
        i = max(bisect.bisect_right(self._added_keys, start) - 1, 0)
        j = bisect.bisect_left(self._added_keys, end)
        extra = [self._added[k] for k in self._added_keys[i:j]]
        out.extend(s for s in extra if s.end_offset > start and s.base_offset < end)
        out.sort(key=lambda s: s.base_offset)
        return out

    def all(self) -> list[Segment]:
        rows = self._table_rows(0, self._table.num_rows) if self._table is not None else []
        rows.extend(self._added[k] for k in self._added_keys)
        rows.sort(key=lambda s: s.base_offset)
        return rows

    def __len__(self) -> int:
        table_rows = len(self._bases) if self._bases is not None else 0
        return table_rows - len(self._removed) + len(self._added_keys)

    def first_with_max_timestamp_at_least(self, timestamp_ms: int) -> Segment | None:
        """The earliest live segment holding a record at or after ``timestamp_ms``."""
        if self._table is not None:
            maxes = self._table.column("max_timestamp_ms").to_numpy()
            for i in np.nonzero(maxes >= timestamp_ms)[0]:
                base = int(self._bases[i])  # type: ignore[index]
                if base not in self._removed:
                    table_hit: Segment | None = self._table_rows(int(i), int(i) + 1)[0]
                    break
            else:
                table_hit = None
        else:
            table_hit = None
        added = [
            self._added[k]
            for k in self._added_keys
            if self._added[k].max_timestamp_ms >= timestamp_ms
        ]
        hits = [h for h in (table_hit, added[0] if added else None) if h is not None]
        return min(hits, key=lambda s: s.base_offset) if hits else None

    def to_table(self) -> pa.Table:
        """All live segments as an Arrow table, built column-wise (no per-segment objects)."""
        parts = []
        if self._table is not None:
            table = self._table
            if self._removed:
                keep = ~np.isin(
                    self._bases,  # type: ignore[arg-type]
                    np.fromiter(self._removed, dtype=np.int64),
                )
                table = table.filter(pa.array(keep))
            parts.append(table)
        if self._added_keys:
            parts.append(segments_to_table([self._added[k] for k in self._added_keys]))
        if not parts:
            return segments_to_table([])
        table = pa.concat_tables(parts)
        if len(parts) > 1:
            table = table.sort_by("base_offset")
        return table
