"""Storage benchmark: append and read throughput against plain pyarrow IPC, and open cost.

Run:  .venv/bin/python bench/storage_bench.py [--records N] [--commits N]

Prints, from one run on a local root:
* append throughput (records/s, MB/s; 100-byte values, 16-byte keys) of
  ``Topic.append`` vs writing the same Arrow batches as IPC files with pyarrow;
* full-partition read throughput of ``PartitionLog.read`` vs reading those files;
* time to open a partition log and read its newest 1,000 records with 10 commits
  and with many (default 100,000) commits, as a ratio.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sparklog.storage import make_batch, open_root
from sparklog.storage.log import PartitionLog

VALUE_BYTES, KEY_BYTES = 100, 16


def make_records(n: int, seed: int) -> pa.RecordBatch:
    values = [os.urandom(VALUE_BYTES) for _ in range(min(n, 1000))]
    keys = [os.urandom(KEY_BYTES) for _ in range(min(n, 1000))]
    reps = n // len(values) + 1
    return make_batch(
        (values * reps)[:n], keys=(keys * reps)[:n], timestamps_ms=[1_700_000_000_000 + seed] * n
    )


def payload_mb(records: int) -> float:
    return records * (VALUE_BYTES + KEY_BYTES) / 1e6


def best_of(runs: int, fn: Callable[[], object]) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return min(times)


def best_of_alternating(
    runs: int,
    first: Callable[[], object],
    second: Callable[[], object],
    setup_first: Callable[[], object] = lambda: None,
    setup_second: Callable[[], object] = lambda: None,
) -> tuple[float, float]:
    """Best times of two contenders run in turns; each one's setup runs untimed before it."""
    a, b = [], []
    for _ in range(runs):
        setup_first()
        a.append(best_of(1, first))
        setup_second()
        b.append(best_of(1, second))
    return min(a), min(b)


def bench_throughput(workdir: Path, records: int, batch_records: int) -> None:
    batches = [make_records(batch_records, i) for i in range(records // batch_records)]
    total = sum(b.num_rows for b in batches)

    raw_dir = workdir / "raw"
    raw_dir.mkdir()

    # Each writer's previous files go first (untimed), so both write new files into
    # recycled page-cache pages (fresh pages cost ~5x more on this VM).
    def clean_raw() -> None:
        for old in raw_dir.iterdir():
            old.unlink()

    def clean_log() -> None:
        shutil.rmtree(workdir / "log", ignore_errors=True)
        root = open_root(str(workdir / "log"))
        root.create_topic("bench", 1)

    def raw_write() -> None:
        for i, batch in enumerate(batches):
            with (
                pa.OSFile(str(raw_dir / f"{i}.arrow"), "wb") as sink,
                pa.ipc.new_file(sink, batch.schema) as writer,
            ):
                writer.write_batch(batch)

    def raw_read() -> int:
        rows = 0
        for i in range(len(batches)):
            with pa.OSFile(str(raw_dir / f"{i}.arrow")) as source:
                rows += pa.ipc.open_file(source).read_all().num_rows
        return rows

    def raw_read_mmap() -> int:
        rows = 0
        for i in range(len(batches)):
            with pa.memory_map(str(raw_dir / f"{i}.arrow")) as source:
                rows += pa.ipc.open_file(source).read_all().num_rows
        return rows

    def log_write() -> None:
        topic = open_root(str(workdir / "log")).topic("bench")
        for batch in batches:
            topic.append(0, batch)

    def log_read() -> int:
        log = open_root(str(workdir / "log")).topic("bench").partition(0)
        return log.read(0).num_rows

    # Alternate the contenders so page-cache and allocator noise hits both alike.
    raw_w, log_w = best_of_alternating(5, raw_write, log_write, clean_raw, clean_log)
    assert raw_read() == log_read() == total
    raw_r, log_r = best_of_alternating(5, raw_read, log_read)
    raw_m = best_of(3, raw_read_mmap)
    mb = payload_mb(total)
    print(f"records: {total:,} in {len(batches)} appends of {batch_records:,}")
    print(
        f"append  sparklog {total / log_w:>12,.0f} rec/s {mb / log_w:8.1f} MB/s | pyarrow IPC "
        f"{total / raw_w:>12,.0f} rec/s {mb / raw_w:8.1f} MB/s | ratio {raw_w / log_w:.2f}"
    )
    print(
        f"read    sparklog {total / log_r:>12,.0f} rec/s {mb / log_r:8.1f} MB/s | pyarrow IPC "
        f"{total / raw_r:>12,.0f} rec/s {mb / raw_r:8.1f} MB/s | ratio {raw_r / log_r:.2f}"
    )
    print(
        f"        (pyarrow IPC memory-mapped, zero-copy, bytes never touched: "
        f"{total / raw_m:,.0f} rec/s; sparklog verifies every byte's checksum; "
        f"ratio {raw_m / log_r:.2f})"
    )


def build_log(url: str, commits: int, snapshot_interval: int) -> None:
    """A partition with ``commits`` commits of 1,000 records each.

    Every commit references the same uploaded object (segments are byte-range
    references), so building 100,000 commits does not write 100,000 objects.
    """
    root = open_root(url, snapshot_interval=snapshot_interval)
    root.create_topic("open", 1)
    topic = root.topic("open")
    staged = topic.write({0: make_records(1000, 0)})[0]
    log = topic.partition(0)
    for _ in range(commits):
        log.append([staged])


def open_and_read_newest(url: str) -> int:
    log: PartitionLog = open_root(url).topic("open").partition(0)
    hwm = log.high_watermark
    return log.read(hwm - 1000).num_rows


def bench_open(workdir: Path, many: int) -> None:
    few_url, many_url = str(workdir / "few"), str(workdir / "many")
    started = time.perf_counter()
    build_log(few_url, 10, snapshot_interval=32)
    # Setup only: a large interval keeps building 100,000 commits cheap; ``many`` is a
    # multiple of it, so the log ends on a snapshot as a long-lived log usually does.
    build_log(many_url, many, snapshot_interval=1000 if many % 1000 == 0 else 32)
    print(f"open: built logs in {time.perf_counter() - started:.1f} s")

    def median_of(url: str) -> float:
        times = []
        for _ in range(30):
            t0 = time.perf_counter()
            assert open_and_read_newest(url) == 1000
            times.append(time.perf_counter() - t0)
        return statistics.median(times)

    few, lots = median_of(few_url), median_of(many_url)
    print(
        f"open + read newest 1,000: 10 commits {few * 1000:.2f} ms | {many:,} commits "
        f"{lots * 1000:.2f} ms | ratio {lots / few:.2f}"
    )
    # The worst case between snapshots: 31 commits after the newest snapshot.
    root = open_root(many_url, snapshot_interval=1_000_000)
    topic = root.topic("open")
    staged = topic.write({0: make_records(1000, 1)})[0]
    for _ in range(31):
        topic.partition(0).append([staged])
    worst = median_of(many_url)
    print(
        f"open + read newest 1,000 with 31 commits past the snapshot: {worst * 1000:.2f} ms | "
        f"ratio to 10 commits {worst / few:.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--batch-records", type=int, default=50_000)
    parser.add_argument("--commits", type=int, default=100_000)
    parser.add_argument("--dir", default=None, help="where the local roots go (default: $TMPDIR)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sparklog-bench-", dir=args.dir) as tmp:
        bench_throughput(Path(tmp), args.records, args.batch_records)
        bench_open(Path(tmp), args.commits)


if __name__ == "__main__":
    main()
