"""One small thread pool for work the storage engine moves off a writer's thread.

A writer's hot path (``Topic.append``, a broker flush) makes calls that release
the GIL: file writes, checksums, Arrow kernels, file creation.  Two of those
can run at once on two cores, so a writer hands an object's checksums, a large
batch's size check and the commit's spare file to this pool and writes the
object meanwhile; what the pool has not started when the writer needs it, the
writer does itself (:func:`outcome`).  The pool's threads start on first use (a
process that never writes starts none) and are daemons; a forked child (Spark's
Python workers are forked) builds its own pool, since the parent's threads do
not exist in it.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")

#: several writers of one process (a broker's flushes) share the pool
BACKGROUND_THREADS = 2

_lock = threading.Lock()
_pool: tuple[int, ThreadPoolExecutor] | None = None


def background_pool() -> ThreadPoolExecutor:
    """This process's pool (built on first use, shared by every writer)."""
    global _pool
    found = _pool
    if found is not None and found[0] == os.getpid():
        return found[1]
    with _lock:
        if _pool is None or _pool[0] != os.getpid():
            pool = ThreadPoolExecutor(
                max_workers=BACKGROUND_THREADS, thread_name_prefix="sparklog-io"
            )
            _pool = (os.getpid(), pool)
        return _pool[1]


def outcome(future: Future[T], here: Callable[[], T]) -> T:
    """``future``'s result; if no pool thread has started it yet, cancel it and run ``here``.

    A writer never waits for a busy pool: every thread may be taken by other
    writers' work, so what has not started is done on the writer's own thread.
    """
    if future.cancel():
        return here()
    return future.result()


def _forget_parent_pool() -> None:
    """In a forked child: the parent's threads are gone, and the lock may have been held."""
    global _lock, _pool
    _lock = threading.Lock()
    _pool = None


os.register_at_fork(after_in_child=_forget_parent_pool)
