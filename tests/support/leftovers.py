"""Which child processes the test run started are still running (tracked by pid, never by name).

:func:`track` wraps ``subprocess.Popen`` so every child the run starts is recorded;
:func:`still_running` asks, per recorded pid, whether that child is alive
(``waitpid(pid, WNOHANG)``), and whether it is still the process recorded: a child
reaped by ``Popen.wait`` frees its pid, and a later child of ours (the Spark session's
JVM, which is not recorded) may be given it (pids wrap at ``pid_max``, 32,768 here, and
threads draw from the same numbers), so the start time ``/proc`` gives at launch must
match; :func:`stop` ends them by pid.
Grandchildren (a daemon a child forks off) are not seen: fixtures that start such
trees stop them themselves.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time

#: pid -> the command line (shortened), for every child started through subprocess.Popen
_started: dict[int, str] = {}
#: pid -> the child's start time (clock ticks since boot, /proc/PID/stat) at launch
_start_ticks: dict[int, int | None] = {}
_original_init = subprocess.Popen.__init__


def track() -> None:
    """Record every child process started from now on (idempotent)."""
    if getattr(subprocess.Popen.__init__, "_sparklog_tracked", False):
        return

    def init(self: subprocess.Popen, *args: object, **kwargs: object) -> None:
        _original_init(self, *args, **kwargs)  # type: ignore[arg-type]
        if _started_by_pyspark_gateway():
            return  # the Spark session's JVM: it lives as long as this process, by design
        command = args[0] if args else kwargs.get("args")
        text = " ".join(map(str, command)) if isinstance(command, list | tuple) else str(command)
        _started[self.pid] = text[:200]
        _start_ticks[self.pid] = _start_time(self.pid)

    init._sparklog_tracked = True  # type: ignore[attr-defined]
    subprocess.Popen.__init__ = init  # type: ignore[method-assign]


def _started_by_pyspark_gateway() -> bool:
    """True when the Popen being made comes from pyspark's own JVM launcher (known by the
    calling module, not by a command name): one JVM per Python process, shared by every
    session of the run, which pyspark ends when the process exits."""
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_globals.get("__name__") == "pyspark.java_gateway":
            return True
        frame = frame.f_back  # type: ignore[assignment]
    return False


def _start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot; None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            return int(stat.read().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def _alive(pid: int) -> bool:
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return False  # already reaped (by Popen.wait/poll): it has ended
    if done != 0:
        return False
    recorded = _start_ticks.get(pid)
    return recorded is None or _start_time(pid) == recorded  # else: its pid, reused


def still_running() -> dict[int, str]:
    """The children started by this run that are still running (pid -> command)."""
    return {pid: command for pid, command in list(_started.items()) if _alive(pid)}


def stop(pids: dict[int, str], grace_s: float = 10) -> None:
    """SIGTERM these children by pid, then SIGKILL those still running after ``grace_s``."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(_alive(pid) for pid in pids):
        time.sleep(0.1)
    for pid in pids:
        if _alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
