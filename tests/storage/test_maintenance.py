"""Retention, compaction, merging and GC against reference models, with concurrent readers.

Runs on every backend (file, memory, s3).
"""

from __future__ import annotations

import os
import pathlib
import random
import subprocess
import sys
import threading
from collections.abc import Callable

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparklog.clock import now_ms
from sparklog.errors import OffsetOutOfRangeError, StoreUnavailableError
from sparklog.storage import make_batch, open_root
from sparklog.storage.log import STAGED_OBJECT_MAX_AGE_MS
from sparklog.storage.maintenance import (
    DEFAULT_GC_GRACE_MS,
    REBATCH_MAX_ROWS,
    REBATCH_TARGET_BYTES,
    collect_garbage,
    compact,
    merge_small_segments,
    rebatch,
    run_maintenance,
)
from sparklog.storage.objectstore import ObjectStore

NOW = 10_000_000


@pytest.fixture
def root(root_spec):
    url, options = root_spec
    return open_root(url, options, snapshot_interval=8)


def fill(topic, batches: list[list[tuple[bytes | None, bytes | None, int]]]) -> dict[int, tuple]:
    """Append batches of (key, value, ts); return the model {offset: (key, value, ts)}."""
    model = {}
    for batch in batches:
        result = topic.append(
            0,
            make_batch(
                [v for _, v, _ in batch],
                keys=[k for k, _, _ in batch],
                timestamps_ms=[t for _, _, t in batch],
            ),
        )
        for i, rec in enumerate(batch):
            model[result.base_offset + i] = rec
    return model


def contents(log, start: int | None = None) -> dict[int, tuple]:
    log.refresh()
    table = log.read(log.log_start_offset if start is None else start)
    return {
        r["offset"]: (r["key"], r["value"], int(r["timestamp"].timestamp() * 1000))
        for r in table.to_pylist()
    }


class ConcurrentReader:
    """Reads the partition in a loop on its own handle while maintenance runs.

    Every read must return records that agree with the model (maintenance never
    changes what an offset holds) in increasing offset order.  Offsets past the
    model (appended while the reader runs) are checked by the test itself.
    """

    def __init__(self, url: str, options: dict, topic: str, model: dict[int, tuple]):
        self.log = open_root(url, options).topic(topic).partition(0)
        self.model = model
        self.errors: list[str] = []
        self.reads = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.log.refresh()
                got = self.log.read(self.log.log_start_offset)
            except OffsetOutOfRangeError:
                continue  # retention moved the start between refresh and read
            offsets = got.column("offset").to_pylist()
            if offsets != sorted(set(offsets)):
                self.errors.append(f"offsets out of order: {offsets}")
            for row in got.select(["offset", "key", "value"]).to_pylist():
                if row["offset"] > max(self.model):
                    continue
                want = self.model.get(row["offset"])
                if want is None or (want[0], want[1]) != (row["key"], row["value"]):
                    self.errors.append(f"offset {row['offset']}: {row} != {want}")
            self.reads += 1

    def __enter__(self) -> ConcurrentReader:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        while self.reads < 2 and self._thread.is_alive():
            self._stop.wait(0.01)
        self._stop.set()
        self._thread.join()
        assert not self.errors, self.errors[:3]


def test_retention_by_time_matches_model(root):
    root.create_topic("t", 1, {"retention.ms": 1000})
    topic = root.topic("t")
    stamps = [NOW - 5000, NOW - 3000, NOW - 999, NOW - 2000, NOW]
    model = fill(topic, [[(None, f"v{i}".encode(), ts)] * 3 for i, ts in enumerate(stamps)])
    log = topic.partition(0)
    with ConcurrentReader(root.url, root.store.storage_options, "t", model):
        dry = run_maintenance(topic, 0, now=NOW, dry_run=True)
        assert log.refresh().log_start_offset == 0
        report = run_maintenance(topic, 0, now=NOW)
    # Kafka's rule: delete oldest segments while expired; stop at the first that is not.
    assert report.retention.removed_base_offsets == dry.retention.removed_base_offsets == [0, 3]
    assert log.log_start_offset == 6
    assert contents(log) == {o: r for o, r in model.items() if o >= 6}
    with pytest.raises(OffsetOutOfRangeError, match=r"valid: \[6, 15\]"):
        log.read(2)


def test_retention_by_bytes_matches_model(root):
    root.create_topic("t", 1, {"retention.bytes": 1})
    topic = root.topic("t")
    model = fill(topic, [[(None, bytes([i]) * 100, NOW)] for i in range(6)])
    log = topic.partition(0)
    sizes = [s.size_bytes for s in log.segments()]
    limit = sum(sizes[-2:])
    root.alter_topic_config("t", {"retention.bytes": limit})
    report = run_maintenance(topic, 0, now=NOW)
    # Kafka keeps at least retention.bytes: remove while the rest stays >= the limit.
    assert len(report.retention.removed_base_offsets) == 4
    assert contents(log) == {o: r for o, r in model.items() if o >= 4}


def compaction_model(model: dict[int, tuple], now: int, delete_retention_ms: int) -> dict:
    last: dict[bytes | None, int] = {}
    keep = {}
    for offset in sorted(model):
        key = model[offset][0]
        if key is None:
            keep[offset] = model[offset]
        else:
            last[key] = offset
    for offset in last.values():
        key, value, ts = model[offset]
        if value is None and ts < now - delete_retention_ms:
            continue
        keep[offset] = model[offset]
    return dict(sorted(keep.items()))


@pytest.mark.parametrize("seed", [1, 2])
def test_compaction_matches_model(root, seed):
    rng = random.Random(seed)
    root.create_topic(
        "c", 1, {"cleanup.policy": "compact", "delete.retention.ms": 1000, "segment.bytes": 2048}
    )
    topic = root.topic("c")
    batches = []
    for _ in range(12):
        batch = []
        for _ in range(rng.randint(1, 6)):
            key = rng.choice([b"a", b"b", b"c", b"d", None])
            value = None if rng.random() < 0.2 else rng.randbytes(rng.randint(0, 40))
            batch.append((key, value, NOW - rng.choice([0, 500, 5000])))
        batches.append(batch)
    model = fill(topic, batches)
    log = topic.partition(0)
    with ConcurrentReader(root.url, root.store.storage_options, "c", model):
        report = compact(topic, 0, now=NOW)
        # writers keep appending while compaction runs; their records are untouched
        more = fill(topic, [[(b"a", b"late", NOW)]])
    model.update(more)
    expected = compaction_model({o: r for o, r in model.items() if o < min(more)}, NOW, 1000)
    expected.update(more)
    assert contents(log, 0) == expected
    assert report.records_after == len(expected) - 1
    assert log.high_watermark == max(model) + 1
    # the next pass compacts the late record too; a pass over a clean log changes nothing
    compact(topic, 0, now=NOW)
    assert contents(log, 0) == compaction_model(model, NOW, 1000)
    assert compact(topic, 0, now=NOW).replaced_segments == 0


def test_merging_small_segments_keeps_every_record(root):
    root.create_topic("t", 1, {"segment.bytes": 4096})
    topic = root.topic("t")
    model = fill(topic, [[(b"k", f"value-{i}".encode(), NOW)] for i in range(20)])
    log = topic.partition(0)
    before = len(log.segments())
    with ConcurrentReader(root.url, root.store.storage_options, "t", model):
        dry = merge_small_segments(topic, 0, dry_run=True)
        assert len(log.refresh().segments.all()) == before
        report = merge_small_segments(topic, 0)
    assert report.replaced_segments == dry.replaced_segments == before
    assert len(log.segments()) == report.new_segments < before
    assert contents(log) == model
    assert log.read(7, 9).column("value").to_pylist() == [b"value-7", b"value-8"]


def test_gc_collects_only_unreferenced_objects_after_grace(root):
    root.create_topic("t", 1, {"retention.ms": 1000})
    topic = root.topic("t")
    fill(topic, [[(None, b"old", NOW - 5000)], [(None, b"new", NOW)]])
    orphan = topic.write({0: make_batch([b"never committed"])})[0]  # a writer that died
    run_maintenance(topic, 0, now=NOW)
    live = {s.object_key for s in topic.partition(0).segments()}
    all_objects = {o.key for o in topic.store.list_objects("objects")}
    assert len(all_objects) == 3 and orphan.object_key in all_objects
    first = collect_garbage(topic, 0, dry_run=True)
    assert set(first.marked) == all_objects - live and not first.deleted
    collect_garbage(topic, 0)
    second = collect_garbage(topic, 0)
    assert set(second.deleted) == all_objects - live
    assert {o.key for o in topic.store.list_objects("objects")} == live
    assert topic.partition(0).read(1).column("value").to_pylist() == [b"new"]


def test_gc_grace_protects_readers_with_old_segment_lists(root):
    root.create_topic("t", 1, {"retention.ms": 1000})
    topic = root.topic("t")
    fill(topic, [[(None, b"old", NOW - 5000)], [(None, b"new", NOW)]])
    stale_reader = open_root(root.url, root.store.storage_options).topic("t").partition(0)
    stale_reader.refresh()  # holds the segment list before retention
    run_maintenance(topic, 0, now=NOW)
    grace = DEFAULT_GC_GRACE_MS
    collect_garbage(topic, grace)
    report = collect_garbage(topic, grace)
    assert report.deleted == []
    assert stale_reader.read(0).column("value").to_pylist() == [b"old", b"new"]


def _interleave(actions: list[Callable[[], object]]) -> None:
    threads = [threading.Thread(target=a) for a in actions]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def test_maintenance_races_with_appends_lose_nothing(root):
    root.create_topic("t", 1, {"segment.bytes": 1 << 20})
    topic = root.topic("t")
    fill(topic, [[(None, f"a{i}".encode(), NOW)] for i in range(6)])
    writer_topic = open_root(root.url, root.store.storage_options).topic("t")
    acked: list[int] = []

    def write() -> None:
        for i in range(6):
            r = writer_topic.append(0, make_batch([f"b{i}".encode()]))
            acked.append(r.base_offset)

    _interleave([write, lambda: merge_small_segments(topic, 0)])
    log = topic.partition(0)
    values = contents(log)
    assert sorted(values) == list(range(12))
    assert [values[o][1] for o in acked] == [f"b{i}".encode() for i in range(6)]
    assert pa.array([values[o][1] for o in range(6)]).to_pylist() == [
        f"a{i}".encode() for i in range(6)
    ]


def test_merged_segments_are_rebatched_and_lookups_keep_their_answers(root):
    """Merging many one-record segments leaves few record batches (issue #22 item 7),
    and reads and timestamp lookups answer as before the merge."""
    root.create_topic("t", 1, {"segment.bytes": 1 << 30})
    topic = root.topic("t")
    rng = random.Random(7)
    stamps = [NOW + rng.randrange(0, 5_000) for _ in range(120)]
    model = fill(topic, [[(None, f"v{i}".encode(), ts)] for i, ts in enumerate(stamps)])
    log = topic.partition(0)
    before_segments = log.segments()
    assert sum(s.batch_count for s in before_segments) == 120
    targets = [NOW - 1, NOW + 5_001, *rng.sample(range(NOW, NOW + 5_000), 30)]
    lookups = {t: log.offset_for_timestamp(t) for t in targets}
    report = merge_small_segments(topic, 0)
    assert report.replaced_segments == 120 and report.new_segments == 1
    merged = log.refresh().segments.all()
    # one batch, not 120 (a batch per merged segment before): no lookup walks them
    assert [s.batch_count for s in merged] == [1]
    assert contents(log) == model
    assert {t: log.offset_for_timestamp(t) for t in targets} == lookups
    for t, offset in lookups.items():
        assert offset == next((o for o in sorted(model) if model[o][2] >= t), 120)
    assert log.read(37, 41).column("value").to_pylist() == [f"v{i}".encode() for i in range(37, 41)]


@given(rows=st.lists(st.integers(1, 400), min_size=1, max_size=30), seed=st.integers(0, 99))
@settings(max_examples=40, deadline=None)
def test_rebatch_keeps_rows_in_order_in_bounded_batches(rows, seed):
    """:func:`rebatch` returns the same rows in order, in batches within its bounds."""
    rng = random.Random(seed)
    pieces = [
        make_batch([bytes(rng.randrange(0, 50)) for _ in range(n)], timestamps_ms=[NOW] * n)
        for n in rows
    ]
    table = pa.Table.from_batches(pieces)
    out = rebatch(table)
    assert pa.Table.from_batches(out).equals(table.combine_chunks())
    per_row = max(table.nbytes / table.num_rows, 1.0)
    bound = min(max(int(REBATCH_TARGET_BYTES / per_row), 1), REBATCH_MAX_ROWS)
    assert all(b.num_rows <= bound for b in out)
    assert len(out) == -(-table.num_rows // bound)


def test_gc_removes_temp_files_a_killed_writer_left_and_only_old_ones(tmp_path):
    root = open_root(f"file://{tmp_path}/root")
    root.create_topic("t", 1)
    topic = root.topic("t")
    objects = pathlib.Path(topic.store.url.removeprefix("file://")) / "objects"
    objects.mkdir(parents=True)
    stale, fresh = objects / "a.arrow.tmp-dead", objects / "b.arrow.tmp-live"
    stale.write_bytes(b"half")
    fresh.write_bytes(b"half")
    now = now_ms()
    old_s = (now - STAGED_OBJECT_MAX_AGE_MS - 60_000) / 1000
    os.utime(stale, (old_s, old_s))
    report = collect_garbage(topic, 0, now=now)
    assert [k.rsplit("/", 1)[-1] for k in report.temp_files_removed] == [stale.name]
    assert not stale.exists() and fresh.exists()


def test_a_failed_overwrite_leaves_no_temp_file(tmp_path):
    """A write that fails (a full disk; here: the target is a folder) removes its temp file."""
    store = ObjectStore(f"file://{tmp_path}/root")
    (tmp_path / "root" / "hints" / "lease.json").mkdir(parents=True)
    (tmp_path / "root" / "hints" / "lease.json" / "inside").write_bytes(b"x")
    with pytest.raises(StoreUnavailableError):
        store.put("hints/lease.json", b"{}")
    assert [p.name for p in (tmp_path / "root" / "hints").iterdir()] == ["lease.json"]


def test_a_key_map_too_small_for_the_dirty_part_compacts_it_a_prefix_per_pass(root):
    """Kafka's cleaner with a full dedupe buffer: each pass compacts the dirty segments
    whose keys fit, the next pass the rest; the end result is the full compaction."""
    rng = random.Random(7)
    root.create_topic("c", 1, {"cleanup.policy": "compact", "segment.bytes": 1024})
    topic = root.topic("c")
    keys = [b"key-%03d" % i for i in range(60)]
    batches = [
        [(rng.choice(keys), rng.randbytes(20), NOW) for _ in range(rng.randint(5, 15))]
        for _ in range(10)
    ]
    model = fill(topic, batches)
    passes = []
    while True:
        report = compact(topic, 0, now=NOW, key_map_bytes_max=600)  # ~ a segment's keys
        if not report.replaced_segments:
            break
        passes.append(report)
    assert len(passes) > 1  # bounded: it could not take the dirty part at once
    assert contents(topic.partition(0), 0) == compaction_model(model, NOW, 86_400_000)


_MEASURE_COMPACTION = """
import resource, sys
from sparklog.storage import open_root
from sparklog.storage.maintenance import compact
topic = open_root(sys.argv[1]).topic("big")
topic.partition(0).refresh()
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
report = compact(topic, 0, now=int(sys.argv[2]))
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(after - before, report.records_before, report.records_after)
"""


@pytest.mark.slow
def test_compaction_memory_is_bounded_by_segments_not_the_partition(tmp_path):
    """A 64 MB partition whose 1,000 keys survive: compaction's peak memory stays a
    fraction of the partition (it read the whole partition at once: +128 MB for 40 MB)."""
    url = f"file://{tmp_path}/root"
    root = open_root(url)
    root.create_topic("big", 1, {"cleanup.policy": "compact", "segment.bytes": 4 << 20})
    topic = root.topic("big")
    rng = random.Random(3)
    value_bytes, per_batch = 4096, 1024
    for _ in range(16):  # 16 x 4 MiB, incompressible
        keys = [b"k%04d" % rng.randrange(1000) for _ in range(per_batch)]
        topic.append(
            0,
            make_batch(
                [rng.randbytes(value_bytes) for _ in keys],
                keys=keys,
                timestamps_ms=[NOW] * per_batch,
            ),
        )
    done = subprocess.run(
        [sys.executable, "-c", _MEASURE_COMPACTION, url, str(NOW)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    grown_kib, before, after = (int(x) for x in done.stdout.split())
    assert before == 16 * per_batch and after <= 1000
    partition_kib = 16 * per_batch * value_bytes // 1024
    assert grown_kib < partition_kib // 3, (grown_kib, partition_kib)  # was 160 MB for 64
