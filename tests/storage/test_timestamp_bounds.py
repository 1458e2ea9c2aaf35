"""A flush's per-partition timestamp bounds, computed for all partitions in one pass,
agree with Arrow's ``min_max`` of each partition's batches (nulls skipped; 0 where
a partition has no timestamp)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import given, settings
from hypothesis import strategies as st

from sparklog.storage import make_batch
from sparklog.storage.segments import timestamp_bounds

stamps = st.lists(st.one_of(st.none(), st.integers(-(2**50), 2**50)), max_size=6)


def expected(batches: list[pa.RecordBatch]) -> tuple[int, int]:
    bounds = pc.min_max(pa.concat_arrays([b.column("timestamp") for b in batches]))
    lo, hi = bounds["min"].value, bounds["max"].value
    return (0 if lo is None else lo, 0 if hi is None else hi)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(stamps, min_size=1, max_size=3), min_size=1, max_size=8))
def test_bounds_match_min_max_of_each_partition(layout: list[list[list[int | None]]]) -> None:
    parts = {
        p: [make_batch([b"v"] * len(ts), timestamps_ms=ts) for ts in batches]
        for p, batches in enumerate(layout)
    }
    order = [p for p, batches in parts.items() if any(b.num_rows for b in batches)]
    got = timestamp_bounds(parts, order)
    assert got == {p: expected([b for b in parts[p] if b.num_rows]) for p in order}
