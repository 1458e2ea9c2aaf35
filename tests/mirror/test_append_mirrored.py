"""The storage layer's mirror commit: segments at their own offsets, position-checked,
gaps recorded (and kept by snapshots)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sparklog.storage import open_root
from sparklog.storage.log import MirrorPositionMovedError
from tests.mirror.support import records


def _staged(root, topic: str, partition: int, base: int, count: int):
    """A staged segment of ``count`` records, placed at offset ``base``."""
    seg = root.topic(topic).write({partition: records(partition, base, count)})[partition]
    return replace(seg, base_offset=base)


def test_segments_keep_their_offsets_and_the_position_is_checked(tmp_path):
    root = open_root(f"file://{tmp_path}/r", {}, snapshot_interval=2)
    root.create_topic("t", partitions=2)
    topic = root.topic("t")
    first = _staged(root, "t", 0, 0, 5)
    result = topic.append_mirrored({0: [first]}, link="l", expected={0: 0})[0]
    assert (result.base_offset, result.record_count, result.duplicate) == (0, 5, False)
    # planned from a stale position: refused, not retried
    late = _staged(root, "t", 0, 5, 5)
    with pytest.raises(MirrorPositionMovedError, match="at offset 5, not 0"):
        root.topic("t").append_mirrored({0: [late]}, link="l", expected={0: 0})
    # another copy of the same range (planned from the same position) landed first:
    # answered as a duplicate, nothing written
    again = root.topic("t").append_mirrored({0: [first]}, link="l", expected={0: 0})[0]
    assert again.duplicate and root.topic("t").partition(0).refresh().high_watermark == 5
    # offsets the source no longer has: committed past, recorded as a gap, over snapshots
    for base in (10, 20, 30):
        seg = _staged(root, "t", 0, base, 5)
        end = root.topic("t").partition(0).refresh().high_watermark
        root.topic("t").append_mirrored({0: [seg]}, link="l", expected={0: end})
    fresh = open_root(f"file://{tmp_path}/r", {}).topic("t").partition(0).refresh()
    assert fresh.high_watermark == 35 and fresh.log_start_offset == 0
    assert fresh.mirror_gaps == [(5, 10), (15, 20), (25, 30)]
    offsets = open_root(f"file://{tmp_path}/r").topic("t").partition(0).read(0)
    assert offsets.column("offset").to_pylist() == [
        *range(5),
        *range(10, 15),
        *range(20, 25),
        *range(30, 35),
    ]
    # an empty partition whose first copied offset is past 0: its log starts there
    seg = _staged(root, "t", 1, 7, 3)
    root.topic("t").append_mirrored({1: [seg]}, link="l", expected={1: 0})
    p1 = root.topic("t").partition(1).refresh()
    assert (p1.log_start_offset, p1.high_watermark, p1.mirror_gaps) == (7, 10, [(0, 7)])
