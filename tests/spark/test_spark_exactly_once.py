"""End-to-end exactly-once: a topic->topic query killed at chosen points, restarted, complete.

The driver runs as a subprocess (tests/spark/spark_driver.py).  Faults are
injected through SPARKLOG_SPARK_FAULT: the driver process group is SIGKILLed
after executors wrote their objects but before the driver committed them,
between two partitions' commits, and after the commit but before Spark wrote
its checkpoint; task failures make Spark retry tasks.  After the restarts the
output topic must hold every input record exactly once.  The same kills hit
the foreachBatch recipe for update mode (tests/spark/spark_windows_driver.py):
every window's count must appear exactly once per batch version.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from sparklog.storage import make_batch, open_root
from tests.spark.spark_data import BASE_TS_MS
from tests.spark.spark_support import REPO, classic_env
from tests.support.spark_faults import FAULT_ENV

pytestmark = pytest.mark.slow

KILL_POINTS = (
    "sink.before_commit:1",  # objects written, driver dies before committing them
    "sink.after_commit:2",  # committed, driver dies before Spark's checkpoint
    "sink.mid_commit:3",  # one partition committed, the others not
)


def run_driver(
    root_url: str,
    checkpoint: Path,
    fault: str | None,
    module: str = "tests.spark.spark_driver",
    args: tuple[str, ...] = ("in", "out", "80"),
) -> int:
    env = classic_env()
    env.pop(FAULT_ENV, None)
    if fault:
        env[FAULT_ENV] = fault
    proc = subprocess.Popen(
        [sys.executable, "-m", module, root_url, str(checkpoint), *args],
        cwd=REPO,
        env=env,
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        output, _ = proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # leftovers of a killed driver, if any
    killed = proc.returncode == -signal.SIGKILL
    if fault is not None and fault.startswith("sink.") and "write" not in fault:
        assert killed, (
            f"driver was to be killed at {fault}, exit {proc.returncode}:\n{output[-4000:]}"
        )
    elif proc.returncode != 0:
        raise AssertionError(f"driver failed (exit {proc.returncode}):\n{output[-4000:]}")
    return proc.returncode


def produce(root, start: int, count: int) -> None:
    topic = root.topic("in")
    parts = {}
    for p in range(topic.partitions):
        ids = [i for i in range(start, start + count) if i % topic.partitions == p]
        parts[p] = make_batch([f"v{i}".encode() for i in ids], keys=[f"k{i}".encode() for i in ids])
    topic.produce(parts)


def output_values(root) -> Counter:
    topic = root.topic("out")
    values: Counter = Counter()
    for p in range(topic.partitions):
        values.update(topic.partition(p).read(0).column("value").to_pylist())
    return values


def test_killed_and_restarted_query_writes_every_record_once(tmp_path: Path) -> None:
    url = f"file://{tmp_path}/root"
    root = open_root(url)
    root.create_topic("in", 3)
    root.create_topic("out", 4)
    produce(root, 0, 200)
    checkpoint = tmp_path / "ck"
    for n, fault in enumerate(KILL_POINTS):
        run_driver(url, checkpoint, fault)  # asserts that it was killed there
        produce(root, 200 + 40 * n, 40)
    # Task failures (first attempts of every sink and source task) are retried by Spark.
    assert run_driver(url, checkpoint, "sink.write,source.read") == 0
    produce(root, 320, 30)
    assert run_driver(url, checkpoint, None) == 0
    got = output_values(root)
    expected = Counter(f"v{i}".encode() for i in range(350))
    assert got == expected, (
        f"missing {sorted(expected - got)[:5]}, duplicated {sorted(got - expected)[:5]}"
    )


def produce_events(root, start: int, count: int) -> None:
    """Events ``start..start+count-1``, one second apart: ten per 10-second window."""
    topic = root.topic("events")
    parts = {}
    for p in range(topic.partitions):
        ids = [i for i in range(start, start + count) if i % topic.partitions == p]
        parts[p] = make_batch(
            [f"e{i}".encode() for i in ids], timestamps_ms=[BASE_TS_MS + 1000 * i for i in ids]
        )
    topic.produce(parts)


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
