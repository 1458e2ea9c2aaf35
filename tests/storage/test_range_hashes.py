"""Checksums of a segment object's ranges, hashed on a background thread from gathered
pieces, equal xxh3-64 of each range's bytes however the writer cut them."""

from __future__ import annotations

import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st

from sparklog.storage.segments import _RangeHashes, _signed

# (True, size): a range begins; (False, size): ``size`` bytes written to the current range
steps = st.lists(
    st.tuples(st.booleans(), st.sampled_from([0, 1, 7, 300, 70_000, 140_000])),
    max_size=40,
)


@settings(max_examples=100, deadline=None)
@given(steps)
def test_each_ranges_checksum_is_xxh3_of_its_bytes(plan: list[tuple[bool, int]]) -> None:
    hashes = _RangeHashes()
    ranges: list[bytearray] = []
    for i, (begins, size) in enumerate(plan):
        if begins:
            hashes.begin()
            ranges.append(bytearray())
        data = bytes([i % 251]) * size
        if size:
            hashes.add(memoryview(data))
            if ranges:
                ranges[-1] += data
    got = hashes.finish()
    assert got == [_signed(xxhash.xxh3_64_intdigest(bytes(r))) for r in ranges]
