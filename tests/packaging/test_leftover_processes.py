"""The suite's own check that no process it started is left running (tests/support/leftovers.py)."""

from __future__ import annotations

import subprocess
import sys

from tests.support import leftovers


def test_a_child_the_suite_started_is_seen_until_it_is_stopped_by_pid() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert proc.pid in leftovers.still_running()
        leftovers.stop({proc.pid: "sleeper"}, grace_s=5)
        assert proc.pid not in leftovers.still_running()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_child_that_was_waited_for_is_not_a_leftover() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    assert proc.pid not in leftovers.still_running()


def test_a_pid_given_again_to_a_later_child_is_not_the_recorded_leftover() -> None:
    """Once a child is reaped its pid is free, and pids wrap (threads use them up too): a
    later child of this process (the Spark session's JVM, not recorded) given that pid was
    reported as the earlier child still running (CI: a Spark driver long since waited for)."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert proc.pid in leftovers.still_running()
        leftovers._start_ticks[proc.pid] -= 1  # the record of an earlier process with this pid
        assert proc.pid not in leftovers.still_running()
    finally:
        proc.kill()
        proc.wait()
