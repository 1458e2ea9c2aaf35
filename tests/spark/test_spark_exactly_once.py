"""End-to-end exactly-once: a topic->topic query killed at chosen points, restarted, complete.

The driver runs as a subprocess (tests/spark/spark_driver.py).  Faults are
injected through SPARKLOG_SPARK_FAULT: the driver process group is SIGKILLed
after executors wrote their objects but before the driver committed them,
between two partitions' commits, and after the commit but before Spark wrote
its checkpoint; task failures make Spark retry tasks.  After the restarts the
output topic must hold every input record exactly once.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from sparklog.storage import make_batch, open_root
from tests.spark.spark_support import REPO, classic_env
from tests.support.spark_faults import FAULT_ENV

pytestmark = pytest.mark.slow


def run_driver(root_url: str, checkpoint: Path, fault: str | None) -> int:
    env = classic_env()
    env.pop(FAULT_ENV, None)
    if fault:
        env[FAULT_ENV] = fault
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.spark.spark_driver",
            root_url,
            str(checkpoint),
            "in",
            "out",
            "80",
        ],
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
    faults = [
        "sink.before_commit:1",  # objects written, driver dies before committing them
        "sink.after_commit:2",  # committed, driver dies before Spark's checkpoint
        "sink.mid_commit:3",  # one partition committed, the others not
    ]
    for n, fault in enumerate(faults):
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
