"""The produce path: gather requests per topic, write one object, commit, acknowledge.

A :class:`TopicBatcher` holds the pending produce requests of one topic.  Its
flusher thread waits until ``linger_ms`` have passed since its previous flush
began (its creation, for the first) or ``batch_bytes`` are pending, then takes,
for every partition, the longest prefix of its requests that can share one
commit (one idempotent producer with contiguous sequences, or only
non-idempotent requests), writes ONE object with all of them, commits each
touched partition (in parallel), and resolves the requests' futures.  Whatever
could not share this flush's commits goes into the next flush at once, keeping
per-partition order.

``linger_ms`` is thus the least time between a topic's objects, not a delay
every request waits: under steady traffic a flush begins every ``linger_ms``
as before (the same objects per second), while a request reaching an idle
topic is written at once.  A transactional producer, whose one request per
transaction waits alone, would otherwise pay the whole linger every time.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
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
    future: Future[ProduceOutcome] = field(default_factory=Future)


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


# flush(runs) -> None; it resolves every request's future.
FlushFn = Callable[[list[Run]], None]


class TopicBatcher:
    """Pending produce requests of one topic and the thread that flushes them."""

    def __init__(
        self,
        topic: str,
        flush: FlushFn,
        linger_ms: int,
        batch_bytes: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.topic = topic
        self._clock = clock
        self.flush = flush
        self.linger_s = linger_ms / 1000
        self.batch_bytes = batch_bytes
        self._cond = threading.Condition()
        self._pending: list[ProduceRequest] = []
        self._pending_bytes = 0
        self._closed = False
        self._last_flush_started = clock()
        self._carried = False  # the previous flush left requests behind: flush them at once
        self._thread = threading.Thread(target=self._loop, name=f"flush-{topic}", daemon=True)
        self._thread.start()

    def submit(self, requests: list[ProduceRequest]) -> None:
        with self._cond:
            if self._closed:
                raise BrokerNotAvailableError("broker is shutting down")
            self._pending.extend(requests)
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
                runs, rest = take_runs(self._pending)
                self._carried = bool(rest)
                self._pending = rest
                self._pending_bytes = sum(r.size_bytes for r in rest)
            try:
                self.flush(runs)
            except BaseException as exc:  # the flush resolves futures; this is a backstop
                log.exception("flush failed", extra=fields(topic=self.topic))
                err = exc if isinstance(exc, SparklogError) else SparklogError(str(exc))
                for run in runs:
                    for r in run.requests:
                        if not r.future.done():
                            r.future.set_exception(err)

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
