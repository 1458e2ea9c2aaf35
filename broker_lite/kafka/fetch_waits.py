"""Long-poll Fetches parked, not waiting on a request thread: Kafka's fetch purgatory.

A Fetch with ``max_wait_ms`` and too few bytes ready waits for records, up to
its wait (Kafka's ``DelayedFetch``).  Held on a request thread, as many waiting
consumers as the pool has threads would stop the broker answering anyone else
(issue 36 item 4).  Here the handler reads once; if the answer is not ready it
parks the fetch (:meth:`FetchPurgatory.park`) and returns a future of the
answer, and the request thread goes back to the pool
(:mod:`~sparklog.broker_lite.kafka.parking`).

A parked fetch is tried again, on a request thread for the moment it reads:

* when this broker commits records to one of its partitions (the broker's
  commit hook, :meth:`FetchPurgatory.committed`): a produce wakes it at once;
* every ``fetch_refresh_ms`` (the deadline thread of
  :class:`~sparklog.groups.purgatory.DeadlineTimer`, shared with the group
  purgatory's design): commits by other writers of the root (a brokerless
  writer, a transaction marker) are found as a waiting fetch found them before;
* at its deadline, when it is answered with what there is, as Kafka answers an
  expired fetch.

One entry answers once (a lock per entry); a try that fails answers with the
failure, which closes the connection as a failing handler does.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from typing import Any

from sparklog.clock import now_ms
from sparklog.groups.purgatory import DeadlineTimer

log = logging.getLogger("sparklog.broker_lite.kafka")

#: ``attempt(final)``: the answer, or None while it is not ready (never None if final)
Attempt = Callable[[bool], Any]


class DelayedFetch:
    """One parked fetch: its partitions, its deadline (wall-clock ms, as the timer's)."""

    def __init__(
        self, key: str, partitions: frozenset[tuple[str, int]], deadline_ms: int, attempt: Attempt
    ) -> None:
        self.key = key
        self.partitions = partitions
        self.deadline_ms = deadline_ms
        self.attempt = attempt
        self.future: Future[Any] = Future()
        self.lock = threading.Lock()


class FetchPurgatory:
    """The listener's parked fetches, by partition; ``run`` runs a try off the waking
    thread (the listener's request pool), so a commit or the deadline thread never reads."""

    def __init__(self, run: Callable[[Callable[[], None]], Any], refresh_ms: int) -> None:
        self._run = run
        self.refresh_ms = refresh_ms
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self._waiting: dict[str, DelayedFetch] = {}
        self._by_partition: dict[tuple[str, int], set[str]] = {}
        self._timer = DeadlineTimer(self._due, name="fetch-deadlines")
        #: how parked fetches were answered: woken by a commit, by a refresh, or expired
        self.answered = {"commit": 0, "refresh": 0, "expired": 0}

    def park(
        self, partitions: Iterable[tuple[str, int]], wait_ms: int, attempt: Attempt
    ) -> Future[Any]:
        """A future of the fetch's answer: ``attempt(False)`` is tried again when one of
        ``partitions`` gets a commit and every ``refresh_ms``, ``attempt(True)`` at the
        end of ``wait_ms``."""
        key = f"fetch-{next(self._ids)}"
        entry = DelayedFetch(key, frozenset(partitions), now_ms() + wait_ms, attempt)
        with self._lock:
            self._waiting[key] = entry
            for partition in entry.partitions:
                self._by_partition.setdefault(partition, set()).add(key)
        self._schedule(entry)
        # a commit between the handler's read and this registration woke nobody: look once
        self._submit(entry, "commit")
        return entry.future

    def committed(self, topic: str, partitions: Iterable[int]) -> None:
        """This broker committed records to ``partitions`` of ``topic``: try the fetches
        parked on them (called on the committing thread; the tries run elsewhere)."""
        with self._lock:
            keys: set[str] = set()
            for partition in partitions:
                keys |= self._by_partition.get((topic, int(partition)), set())
            entries = [self._waiting[k] for k in keys if k in self._waiting]
        for entry in entries:
            self._submit(entry, "commit")

    def waiting(self) -> int:
        """Fetches parked now."""
        with self._lock:
            return len(self._waiting)

    def close(self) -> None:
        """Stop the deadline thread; parked fetches are answered with what there is."""
        self._timer.close()
        with self._lock:
            entries = list(self._waiting.values())
        for entry in entries:
            self._try(entry, "expired", final=True)

    # -- internals ---------------------------------------------------------------------
    def _schedule(self, entry: DelayedFetch) -> None:
        self._timer.at(min(entry.deadline_ms, now_ms() + self.refresh_ms), entry.key)

    def _due(self, key: str) -> None:
        """The deadline thread: a refresh or the deadline of ``key`` has come."""
        with self._lock:
            entry = self._waiting.get(key)
        if entry is None:
            return
        if now_ms() >= entry.deadline_ms:
            self._submit(entry, "expired", final=True)
        else:
            self._submit(entry, "refresh")

    def _submit(self, entry: DelayedFetch, why: str, final: bool = False) -> None:
        try:
            self._run(lambda: self._try(entry, why, final))
        except RuntimeError:  # the listener's pool is shut down: the broker is stopping
            self._try(entry, "expired", final=True)

    def _try(self, entry: DelayedFetch, why: str, final: bool) -> None:
        with entry.lock:
            if entry.future.done():
                return
            try:
                answer = entry.attempt(final)
            except BaseException as exc:
                entry.future.set_exception(exc)
                self._forget(entry)
                return
            if answer is None:
                if why != "commit":
                    self._schedule(entry)  # the timer's entry was used: the next refresh
                return
            entry.future.set_result(answer)
        with self._lock:
            self.answered[why] += 1
        self._forget(entry)

    def _forget(self, entry: DelayedFetch) -> None:
        with self._lock:
            self._waiting.pop(entry.key, None)
            for partition in entry.partitions:
                keys = self._by_partition.get(partition)
                if keys is not None:
                    keys.discard(entry.key)
                    if not keys:
                        del self._by_partition[partition]
