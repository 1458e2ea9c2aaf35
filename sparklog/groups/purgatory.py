"""Waiting group requests without a thread each: Kafka's purgatory for joins and syncs.

A JoinGroup waits until its group's rebalance completes, a follower's SyncGroup
until the leader has synced: seconds, up to the rebalance timeout.  Kafka parks
such a request (``DelayedJoin``/``DelayedSync`` in its purgatory) and answers it
when the group's state changes or a deadline passes; the request thread goes back
to serve others.  Holding a thread per waiting request instead, 1,000 groups
joining at once need 1,000 threads (issue 36).

Here a waiting request is a :class:`Parked` entry: a ``check`` of the group's
state that says whether the answer is ready, and a future the answer is put in.
The coordinator checks a group's entries after each change of that group's state
(:meth:`GroupCoordinator._state_changed`), and one :class:`DeadlineTimer` thread
per coordinator re-examines a group at its next deadline (a rebalance or sync
timeout, the initial rebalance delay, a silent member's session end), so a join
waiting for a slow member is answered at the rebalance timeout with no thread
held meanwhile.
"""

from __future__ import annotations

import heapq
import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from sparklog.clock import now_ms

log = logging.getLogger("sparklog.groups")


class _Rejoin:
    """What a join's check returns when the member must join a newer rebalance first."""


#: a check's answer: the member joins again (outside any lock), then waits on
REJOIN = _Rejoin()
#: the deadline thread looks at the clock again after this long, whatever it waits for
MAX_WAIT_S = 1.0


class Parked:
    """One waiting request: ``check(doc)`` returns the answer (None: keep waiting,
    :data:`REJOIN`: join the newer rebalance) or raises the protocol's error, which
    becomes the future's exception.  ``member`` is kept alive while it waits (a member
    waiting in a join is not silent)."""

    def __init__(
        self,
        member: str,
        check: Callable[[dict[str, Any]], Any],
        rejoin: Callable[[], None] | None = None,
    ) -> None:
        self.member = member
        self.check = check
        self.rejoin = rejoin
        self.future: Future[Any] = Future()
        self._lock = threading.Lock()

    def settle(self, doc: dict[str, Any]) -> bool:
        """Check ``doc`` and complete the future if it answers; True once it is done.

        The check runs under this entry's lock (two threads seeing two changes never
        answer twice); a rejoin runs after the lock is released, because it changes
        the group's state, whose change checks every entry of the group again.
        """
        rejoin = False
        with self._lock:
            if self.future.done():
                return True
            try:
                answer = self.check(doc)
            except Exception as exc:  # the protocol's error is the request's answer
                self.future.set_exception(exc)
                return True
            if answer is REJOIN:
                rejoin = True
            elif answer is not None:
                self.future.set_result(answer)
                return True
        if rejoin and self.rejoin is not None:
            try:
                self.rejoin()
            except Exception as exc:
                with self._lock:
                    if not self.future.done():
                        self.future.set_exception(exc)
                return True
        return self.future.done()

    def fail(self, exc: BaseException) -> None:
        """Answer with ``exc`` unless already answered (the group moved elsewhere)."""
        with self._lock:
            if not self.future.done():
                self.future.set_exception(exc)


class DeadlineTimer:
    """One thread and one heap for every group's next deadline (Kafka's timer wheel).

    ``at(when_ms, key)`` asks for ``fire(key)`` at ``when_ms`` (the wall clock of
    :func:`~sparklog.clock.now_ms`, as group deadlines are stored); an earlier request
    for the same key replaces a later one, a later one is ignored (the earlier firing
    schedules again if still needed).  The thread starts with the first deadline and
    is a daemon; :meth:`close` stops it.
    """

    def __init__(self, fire: Callable[[str], None], name: str = "group-deadlines") -> None:
        self._fire = fire
        self._name = name
        self._heap: list[tuple[int, str]] = []
        #: key -> the earliest deadline asked for it (heap entries not matching are stale)
        self._due: dict[str, int] = {}
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False

    def at(self, when_ms: int, key: str) -> None:
        with self._cond:
            if self._closed:
                return
            known = self._due.get(key)
            if known is not None and known <= when_ms:
                return
            self._due[key] = when_ms
            heapq.heappush(self._heap, (when_ms, key))
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name=self._name, daemon=True)
                self._thread.start()
            self._cond.notify()

    def pending(self) -> int:
        """Keys waiting for a deadline (for tests and metrics)."""
        with self._cond:
            return len(self._due)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._closed:
                    if self._heap:
                        wait_ms = self._heap[0][0] - now_ms()
                        if wait_ms <= 0:
                            break
                        # at most a second: a wall clock that steps is noticed soon
                        self._cond.wait(min(wait_ms / 1000, MAX_WAIT_S))
                    else:
                        self._cond.wait()
                if self._closed:
                    return
                when, key = heapq.heappop(self._heap)
                if self._due.get(key) != when:
                    continue  # replaced by an earlier deadline, already fired
                del self._due[key]
            try:
                self._fire(key)
            except Exception:  # one group's failure must not stop every other's deadline
                log.exception("group deadline failed", extra={"group": key})
