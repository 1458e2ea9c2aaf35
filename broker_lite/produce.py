"""The produce path: gather a broker's requests, write one object, commit, acknowledge.

A :class:`FlushBatcher` holds the pending produce requests of every topic a
broker leads.  Its flusher thread waits until ``linger_ms`` have passed since
its previous flush began (its creation, for the first) or ``batch_bytes`` are
pending, then takes, for every partition of every topic, the longest prefix of
its requests that can share one commit (one idempotent producer with
contiguous sequences, or only non-idempotent requests), writes ONE object with
all of them (shared by the topics when there are several), commits each
touched shard (in parallel), and resolves the requests' futures.  Whatever
could not share this flush's commits goes into the next flush at once, keeping
per-partition order.

``linger_ms`` is thus the least time between a broker's objects, not a delay
every request waits: under steady traffic a flush begins every ``linger_ms``
(the same objects per second whatever the number of topics), while a request
reaching an idle broker is written at once.  A transactional producer, whose one request per
transaction waits alone, would otherwise pay the whole linger every time.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import InvalidStateError, ThreadPoolExecutor
from dataclasses import dataclass, field

import pyarrow as pa

from sparklog.broker_lite.logs import fields
from sparklog.errors import BrokerNotAvailableError, SparklogError
from sparklog.storage import PartitionLog, ProducerBatch

log = logging.getLogger("sparklog.broker_lite.produce")


@dataclass(frozen=True)
class ProduceOutcome:
    base_offset: int
    record_count: int
    duplicate: bool = False


class Latch:
    """How many outcomes of one produce call are still pending; wakes its waiters at zero.

    One per call, shared by its partitions' outcomes: a ``Future`` per partition
    (a Condition and a lock each, and ``wait`` installing a waiter in every one)
    cost a request over 1,024 partitions more than its commit's bookkeeping.
    """

    __slots__ = ("_left", "cond")

    def __init__(self, count: int) -> None:
        self._left = count
        self.cond = threading.Condition(threading.Lock())

    def arrived(self) -> None:
        """One outcome is in; the caller holds ``cond`` (it set the outcome under it)."""
        self._left -= 1
        if self._left <= 0:
            self.cond.notify_all()

    def wait(self, timeout_s: float | None = None) -> bool:
        """Wait until every outcome is in (at most ``timeout_s``); whether they are."""
        with self.cond:
            return self.cond.wait_for(lambda: self._left <= 0, timeout_s)


class Outcome:
    """One partition's produce outcome (a result or an error), set once by the flush.

    The part of ``concurrent.futures.Future`` the produce path uses, on a
    :class:`Latch` shared with the other partitions of its call.
    """

    __slots__ = ("_callbacks", "_done", "_error", "_latch", "_value")

    def __init__(self, latch: Latch | None = None) -> None:
        self._latch = latch if latch is not None else Latch(1)
        self._done = False
        self._value: ProduceOutcome | None = None
        self._error: BaseException | None = None
        self._callbacks: list[Callable[[Outcome], None]] = []

    def set_result(self, value: ProduceOutcome) -> None:
        self._finish(value, None)

    def set_exception(self, error: BaseException) -> None:
        self._finish(None, error)

    def _finish(self, value: ProduceOutcome | None, error: BaseException | None) -> None:
        with self._latch.cond:
            if self._done:
                raise InvalidStateError("a produce outcome is set once")
            self._value, self._error, self._done = value, error, True
            callbacks, self._callbacks = self._callbacks, []
            self._latch.arrived()
        for callback in callbacks:
            callback(self)

    def add_done_callback(self, callback: Callable[[Outcome], None]) -> None:
        with self._latch.cond:
            if not self._done:
                self._callbacks.append(callback)
                return
        callback(self)

    def done(self) -> bool:
        return self._done

    def exception(self, timeout: float | None = None) -> BaseException | None:
        self._wait(timeout)
        return self._error

    def result(self, timeout: float | None = None) -> ProduceOutcome:
        self._wait(timeout)
        if self._error is not None:
            raise self._error
        assert self._value is not None
        return self._value

    def _wait(self, timeout: float | None) -> None:
        with self._latch.cond:
            if not self._latch.cond.wait_for(lambda: self._done, timeout):
                raise TimeoutError("the produce outcome is not in yet")


@dataclass(frozen=True)
class ProduceItem:
    """One partition's records of a produce request, as received (not yet normalised).

    ``producer`` is an idempotent producer's (id, epoch, first sequence), or None;
    ``txn`` the number of the producer's open transaction these records belong
    to (a Kafka transactional producer, verified with the coordinator), or None.
    """

    partition: int
    data: pa.RecordBatch | pa.Table
    producer: tuple[int, int, int] | None = None
    txn: int | None = None


@dataclass
class ProduceRequest:
    """Validated records for one partition, with the producer identity if idempotent."""

    partition: int
    batches: list[pa.RecordBatch]
    record_count: int
    size_bytes: int
    producer: ProducerBatch | None = None
    compression: str | None = "none"  # None: the broker's configured codec
    txn: int | None = None  # the producer's open transaction (see ProduceItem)
    future: Outcome = field(default_factory=Outcome)


@dataclass
class Run:
    """Requests of one partition that one commit can carry."""

    partition: int
    requests: list[ProduceRequest]

    @property
    def producer(self) -> ProducerBatch | None:
        first = self.requests[0].producer
        if first is None:
            return None
        return ProducerBatch(
            first.producer_id,
            first.producer_epoch,
            first.first_sequence,
            sum(r.record_count for r in self.requests),
        )

    @property
    def txn(self) -> int | None:
        return self.requests[0].txn

    @property
    def batches(self) -> list[pa.RecordBatch]:
        return [b for r in self.requests for b in r.batches]


def _continues(run: list[ProduceRequest], request: ProduceRequest) -> bool:
    last = run[-1].producer
    nxt = request.producer
    if last is None or nxt is None:
        return last is None and nxt is None
    if run[-1].txn != request.txn:
        return False
    return (
        last.producer_id == nxt.producer_id
        and last.producer_epoch == nxt.producer_epoch
        and nxt.first_sequence == last.last_sequence + 1
    )


def take_runs(pending: list[ProduceRequest]) -> tuple[list[Run], list[ProduceRequest]]:
    """Split pending requests into one run per partition (this flush) and the rest."""
    runs: dict[int, list[ProduceRequest]] = {}
    blocked: set[int] = set()
    rest: list[ProduceRequest] = []
    for request in pending:
        p = request.partition
        if p in blocked:
            rest.append(request)
        elif p not in runs:
            runs[p] = [request]
        elif _continues(runs[p], request):
            runs[p].append(request)
        else:
            blocked.add(p)
            rest.append(request)
    return [Run(p, reqs) for p, reqs in runs.items()], rest


# flush({topic: runs}) -> None; it resolves every request's future.
FlushFn = Callable[[dict[str, list[Run]]], None]


class FlushBatcher:
    """A broker's pending produce requests, of every topic, and the thread that flushes them.

    One per broker (issue 37): a flush takes every topic's runs at once, so a
    broker writes one object per flush whatever the number of active topics,
    and runs one flusher thread, not one per topic.
    """

    def __init__(
        self,
        flush: FlushFn,
        linger_ms: int,
        batch_bytes: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._clock = clock
        self.flush = flush
        self.linger_s = linger_ms / 1000
        self.batch_bytes = batch_bytes
        self._cond = threading.Condition()
        self._pending: dict[str, list[ProduceRequest]] = {}
        self._pending_bytes = 0
        self._closed = False
        self._last_flush_started = clock()
        self._carried = False  # the previous flush left requests behind: flush them at once
        self._thread = threading.Thread(target=self._loop, name="flush", daemon=True)
        self._thread.start()

    def submit(self, topic: str, requests: list[ProduceRequest]) -> None:
        with self._cond:
            if self._closed:
                raise BrokerNotAvailableError("broker is shutting down")
            self._pending.setdefault(topic, []).extend(requests)
            self._pending_bytes += sum(r.size_bytes for r in requests)
            self._cond.notify_all()

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._closed:
                    self._cond.wait()
                if not self._pending and self._closed:
                    return
                due = 0.0 if self._carried else self._last_flush_started + self.linger_s
                while (
                    not self._closed
                    and self._pending_bytes < self.batch_bytes
                    and self._clock() < due
                ):
                    self._cond.wait(max(due - self._clock(), 0))
                self._last_flush_started = self._clock()
                runs: dict[str, list[Run]] = {}
                rest: dict[str, list[ProduceRequest]] = {}
                for topic, pending in self._pending.items():
                    runs[topic], left = take_runs(pending)
                    if left:
                        rest[topic] = left
                self._carried = bool(rest)
                self._pending = rest
                self._pending_bytes = sum(r.size_bytes for left in rest.values() for r in left)
            try:
                self.flush(runs)
            except BaseException as exc:  # the flush resolves futures; this is a backstop
                log.exception("flush failed", extra=fields(topics=len(runs)))
                err = exc if isinstance(exc, SparklogError) else SparklogError(str(exc))
                for topic_runs in runs.values():
                    for run in topic_runs:
                        for r in run.requests:
                            if not r.future.done():
                                r.future.set_exception(err)

    @property
    def thread(self) -> threading.Thread:
        return self._thread

    def close(self) -> None:
        """Flush what is pending, then stop the thread."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout=60)


def duplicate_outcome(log: PartitionLog, producer: ProducerBatch) -> ProduceOutcome | None:
    """If the log already holds this idempotent batch, where it landed; None if new.

    The rule is storage's (:func:`sparklog.storage.log.duplicate_of`), the one
    the commit applies too: a retried request can be a sub-range of a recorded
    batch (a flush may have committed several requests of one producer as one).
    """
    base = log.duplicate_of(producer)
    if base is None:
        return None
    return ProduceOutcome(base, producer.record_count, duplicate=True)


def commit_pool(workers: int = 8) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(workers, thread_name_prefix="commit")
