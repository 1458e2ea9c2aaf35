"""End-to-end exactly-once for update mode: the foreachBatch recipe killed at chosen points.

tests/spark/spark_windows_driver.py counts events per 10-second window and
writes each batch's changed counts through the exactly-once sink; the driver
is killed at tests/spark/exactly_once_support.py's points and restarted.
Every window's count must appear exactly once per batch version.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from sparklog.storage import make_batch, open_root
from tests.spark.exactly_once_support import KILL_POINTS, produce_spread, run_driver
from tests.spark.spark_data import BASE_TS_MS

pytestmark = pytest.mark.slow


def produce_events(root, start: int, count: int) -> None:
    """Events ``start..start+count-1``, one second apart: ten per 10-second window."""
    produce_spread(
        root,
        "events",
        range(start, start + count),
        lambda ids: make_batch(
            [f"e{i}".encode() for i in ids], timestamps_ms=[BASE_TS_MS + 1000 * i for i in ids]
        ),
    )


def test_killed_foreach_batch_update_query_writes_each_window_count_once(tmp_path: Path) -> None:
    url = f"file://{tmp_path}/root"
    root = open_root(url)
    root.create_topic("events", 3)
    root.create_topic("counts", 2)
    produce_events(root, 0, 100)
    checkpoint = tmp_path / "ck"
    windows_driver = "tests.spark.spark_windows_driver"
    for n, fault in enumerate(KILL_POINTS):
        run_driver(url, checkpoint, fault, module=windows_driver, args=())
        produce_events(root, 100 + 20 * n, 20)
    assert run_driver(url, checkpoint, None, module=windows_driver, args=()) == 0
    topic = root.topic("counts")
    records = [
        json.loads(value)
        for p in range(topic.partitions)
        for value in topic.partition(p).read(0).column("value").to_pylist()
    ]
    versions = Counter((r["batch"], r["window"]) for r in records)
    assert max(versions.values()) == 1, [k for k, n in versions.items() if n > 1][:5]
    final: dict[str, tuple[int, int]] = {}
    for r in records:
        if r["window"] not in final or final[r["window"]][0] < r["batch"]:
            final[r["window"]] = (r["batch"], r["count"])
    assert len(final) == 16  # events 0-159: sixteen windows of ten
    assert {count for _, count in final.values()} == {10}
    assert len({batch for batch, _ in versions}) >= 5  # 160 events, 40 per batch
