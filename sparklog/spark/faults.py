"""Fault injection for the exactly-once tests: fail or kill the driver at a chosen point.

The end-to-end tests run a streaming query in a driver subprocess and need it
to die at precise moments (after the sink wrote its objects but before the
driver committed them; after the commit but before Spark's checkpoint).  Code
on those paths calls :func:`maybe_fault`; it does nothing unless the
environment variable ``SPARKLOG_SPARK_FAULT`` names the point, e.g.
``sink.before_commit:2`` (point, and optionally the batch id).  A ``kill``
point SIGKILLs the process group in ``SPARKLOG_SPARK_FAULT_PGID`` (the driver
and its JVM and Python workers); ``sink.write`` and ``source.read`` raise on a
task's first attempt, so Spark retries the task.
"""

from __future__ import annotations

import os
import signal

FAULT_ENV = "SPARKLOG_SPARK_FAULT"
PGID_ENV = "SPARKLOG_SPARK_FAULT_PGID"
TASK_POINTS = ("sink.write", "source.read")


class InjectedFault(RuntimeError):
    """A task failure injected by a test (Spark retries the task)."""


def _wanted(point: str, batch_id: int | None) -> bool:
    for item in os.environ.get(FAULT_ENV, "").split(","):
        name, _, when = item.strip().partition(":")
        if name == point and (not when or batch_id is None or when == str(batch_id)):
            return True
    return False


def maybe_fault(point: str, batch_id: int | None, attempt: int | None = None) -> None:
    """Inject the fault configured for ``point`` (no-op unless a test asked for it)."""
    if FAULT_ENV not in os.environ or not _wanted(point, batch_id):
        return
    if point in TASK_POINTS:
        if attempt is None:
            from pyspark import TaskContext

            ctx = TaskContext.get()
            attempt = ctx.attemptNumber() if ctx is not None else 0
        if attempt == 0:
            raise InjectedFault(f"injected task failure at {point} (batch {batch_id})")
        return
    pgid = int(os.environ.get(PGID_ENV, "0"))
    if pgid > 1:
        os.killpg(pgid, signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)
