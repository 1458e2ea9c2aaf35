"""Running a Spark driver subprocess that is killed at a chosen point (exactly-once tests).

The driver runs as a subprocess (tests/spark/spark_driver.py or
tests/spark/spark_windows_driver.py).  Faults are injected through
SPARKLOG_SPARK_FAULT: the driver process group is SIGKILLed after executors
wrote their objects but before the driver committed them, between two
partitions' commits, and after the commit but before Spark wrote its
checkpoint; task failures make Spark retry tasks.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.spark.spark_support import REPO, classic_env
from tests.support.spark_faults import FAULT_ENV

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
    killing = fault is not None and (
        (fault.startswith("sink.") and "write" not in fault) or fault.startswith("delta.")
    )
    if killing:
        assert killed, (
            f"driver was to be killed at {fault}, exit {proc.returncode}:\n{output[-4000:]}"
        )
    elif proc.returncode != 0:
        raise AssertionError(f"driver failed (exit {proc.returncode}):\n{output[-4000:]}")
    return proc.returncode


def produce_spread(
    root: Any, topic_name: str, ids: range, batch_of: Callable[[list[int]], Any]
) -> None:
    """Records ``ids`` over the topic's partitions (id modulo partition count), one produce."""
    topic = root.topic(topic_name)
    parts = {}
    for p in range(topic.partitions):
        mine = [i for i in ids if i % topic.partitions == p]
        parts[p] = batch_of(mine)
    topic.produce(parts)
