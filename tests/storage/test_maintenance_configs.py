"""Kafka's compaction and segment configs honoured by maintenance (issue 39):
``min.compaction.lag.ms`` bounds what compaction takes, ``min.cleanable.dirty.ratio`` and
``max.compaction.lag.ms`` decide when the cleaner compacts, ``segment.ms`` bounds the
record-time span of a merged segment."""

from __future__ import annotations

import pytest

from sparklog.storage import open_root
from sparklog.storage.maintenance import compact, merge_small_segments, run_maintenance
from tests.storage.test_maintenance import NOW, contents, fill

COMPACT = {"cleanup.policy": "compact", "segment.bytes": 1 << 20}


@pytest.fixture
def root(tmp_path):
    return open_root(str(tmp_path / "root"))


def test_min_compaction_lag_keeps_young_records_uncompacted(root) -> None:
    root.create_topic("c", 1, {**COMPACT, "min.compaction.lag.ms": 5000})
    topic = root.topic("c")
    fill(topic, [[(b"a", b"1", NOW - 9000), (b"a", b"2", NOW - 8000)]])  # old enough
    fill(topic, [[(b"a", b"3", NOW - 1000), (b"a", b"4", NOW - 500)]])  # younger than the lag
    report = compact(topic, 0, now=NOW)
    assert report.replaced_segments == 1
    assert [v for _, v, _ in contents(topic.partition(0)).values()] == [b"2", b"3", b"4"]
    # nothing dirty is old enough any more: the pass takes nothing and says why
    again = compact(topic, 0, now=NOW)
    assert again.replaced_segments == 0 and "min.compaction.lag.ms=5000" in again.skipped_reason
    # later, the young segment has aged past the lag and is compacted too
    assert compact(topic, 0, now=NOW + 10_000).replaced_segments == 2
    assert [v for _, v, _ in contents(topic.partition(0)).values()] == [b"4"]


def test_dirty_ratio_decides_when_the_cleaner_compacts(root) -> None:
    root.create_topic("c", 1, {**COMPACT, "min.cleanable.dirty.ratio": 0.5})
    topic = root.topic("c")
    fill(topic, [[(b"k%d" % i, b"x" * 200, NOW) for i in range(50)]])
    first = run_maintenance(topic, 0, now=NOW)
    assert first.compaction.replaced_segments == 1  # all dirty: ratio 1
    fill(topic, [[(b"k0", b"y", NOW)]])  # a small dirty tail: far below half the bytes
    skipped = run_maintenance(topic, 0, now=NOW).compaction
    assert skipped.replaced_segments == 0
    assert "min.cleanable.dirty.ratio=0.5" in skipped.skipped_reason
    assert len(contents(topic.partition(0))) == 51  # k0's old record is still there

    root.alter_topic_config("c", {"min.cleanable.dirty.ratio": 0.0})
    topic = root.topic("c")
    assert run_maintenance(topic, 0, now=NOW).compaction.replaced_segments == 2
    assert len(contents(topic.partition(0))) == 50


def test_max_compaction_lag_forces_compaction_below_the_ratio(root) -> None:
    root.create_topic(
        "c",
        1,
        {**COMPACT, "min.cleanable.dirty.ratio": 0.99, "max.compaction.lag.ms": 60_000},
    )
    topic = root.topic("c")
    fill(topic, [[(b"k%d" % i, b"x" * 200, NOW - 120_000) for i in range(50)]])
    run_maintenance(topic, 0, now=NOW - 120_000)  # all dirty, ratio 1: compacted
    fill(topic, [[(b"k0", b"y", NOW - 30_000)]])
    # the dirty record has waited 30 s, less than the lag: the ratio rules, and it is low
    assert run_maintenance(topic, 0, now=NOW).compaction.replaced_segments == 0
    # once it has waited longer than max.compaction.lag.ms it is compacted whatever the ratio
    assert run_maintenance(topic, 0, now=NOW + 60_000).compaction.replaced_segments == 2
    assert len(contents(topic.partition(0))) == 50


def test_segment_ms_bounds_the_time_a_merged_segment_spans(root) -> None:
    root.create_topic("t", 1, {"segment.bytes": 1 << 20, "segment.ms": 10_000})
    topic = root.topic("t")
    stamps = [NOW, NOW + 4000, NOW + 8000, NOW + 12_000, NOW + 16_000, NOW + 30_000]
    fill(topic, [[(None, b"v", ts)] for ts in stamps])
    merge_small_segments(topic, 0)
    spans = [
        (s.min_timestamp_ms - NOW, s.max_timestamp_ms - NOW)
        for s in topic.partition(0).refresh().segments.all()
    ]
    assert spans == [(0, 8000), (12_000, 16_000), (30_000, 30_000)]
    assert len(contents(topic.partition(0))) == len(stamps)
