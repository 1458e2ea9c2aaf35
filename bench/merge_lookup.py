"""Reads after merging: lookups in a segment merged from many one-record segments.

Run:  .venv/bin/python bench/merge_lookup.py [--segments N] [--repeat K]

On a local root, appends ``--segments`` one-record segments to one partition
(timestamps rising by 1 ms), then times, before and after
``merge_small_segments`` (same run, same records): a timestamp lookup of the
middle record (``offset_for_timestamp``) and a 100-record read from the middle
(``read``), best of ``--repeat``.  Prints milliseconds, the ratio after/before,
and the merged segments' record-batch count.  Issue #22 found, before merges
re-batched: 1.4 -> 1,658 ms for the lookup and 155 -> 661 ms for the read
with 2,000 segments (on S3).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from sparklog.storage import make_batch, open_root  # noqa: E402
from sparklog.storage.maintenance import merge_small_segments  # noqa: E402


def best_ms(call: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        call()
        times.append((time.perf_counter() - started) * 1000)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--segments", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--dir", default=None, help="where the local root goes (default: $TMPDIR)")
    args = parser.parse_args()
    n = args.segments
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        root = open_root(f"file://{tmp}/root")
        root.create_topic("t", 1, {"segment.bytes": 1 << 30})
        topic = root.topic("t")
        for i in range(n):
            topic.append(0, make_batch([b"v" * 100], timestamps_ms=[1_000_000 + i]))
        log = topic.partition(0)
        middle = n // 2

        def lookup() -> object:
            assert log.offset_for_timestamp(1_000_000 + middle) == middle
            return None

        def read() -> object:
            assert log.read(middle, middle + 100).num_rows == min(100, n - middle)
            return None

        before = {"lookup": best_ms(lookup, args.repeat), "read": best_ms(read, args.repeat)}
        report = merge_small_segments(topic, 0)
        merged = log.refresh().segments.all()
        after = {"lookup": best_ms(lookup, args.repeat), "read": best_ms(read, args.repeat)}
        print(
            f"{n} one-record segments merged into {report.new_segments} segment(s) of "
            f"{sum(s.batch_count for s in merged)} record batch(es)"
        )
        print("  operation                   before ms  after ms  after/before")
        for name, label in (("lookup", "offset_for_timestamp"), ("read", "read of 100 records")):
            print(
                f"  {label:<26}  {before[name]:>9.2f}  {after[name]:>8.2f}  "
                f"{after[name] / before[name]:>12.2f}"
            )


if __name__ == "__main__":
    main()
