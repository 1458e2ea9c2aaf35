"""The chaos workload and its checker: an idempotent producer, then the log as stored.

:class:`Workload` sends uniquely numbered records through brokers with an
idempotent ``acks=all`` producer on a thread, and notes what it was told about
each record: acknowledged (at which offset), outcome unknown, or failed.
:func:`check` reads every partition from the root and counts what the issue's
guarantees forbid: acknowledged records missing or not at their acknowledged
offset, records stored twice, offset gaps, and records reported *failed*
(not "unknown") that are in the log.
"""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from sparklog.client.producer import Producer
from sparklog.errors import CommitStateUnknownError, KafkaTimeoutError, SparklogError
from sparklog.storage import open_root


@dataclass
class Workload:
    bootstrap: str
    topic: str
    partitions: int
    records_per_round: int = 20
    delivery_timeout_ms: int = 60_000
    acked: dict[bytes, tuple[int, int]] = field(default_factory=dict)
    ack_times_s: list[float] = field(default_factory=list)
    unknown: set[bytes] = field(default_factory=set)
    failed: dict[bytes, str] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    error: BaseException | None = None

    def start(self) -> Workload:
        self._thread = threading.Thread(target=self._run, name="chaos-workload", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 120) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            assert not self._thread.is_alive(), "the workload did not stop"
        if self.error is not None:
            raise AssertionError(f"the workload crashed: {self.error!r}") from self.error

    @property
    def acked_count(self) -> int:
        with self._lock:
            return len(self.acked)

    def acks_after(self, since_s: float) -> int:
        with self._lock:
            return sum(1 for t in self.ack_times_s if t >= since_s)

    def first_ack_after(self, since_s: float) -> float | None:
        with self._lock:
            later = [t for t in self.ack_times_s if t >= since_s]
        return min(later) if later else None

    def _run(self) -> None:
        try:
            producer = Producer(
                f"sparklog://{self.bootstrap}",
                acks="all",
                enable_idempotence=True,
                linger_ms=2,
                delivery_timeout_ms=self.delivery_timeout_ms,
                retry_timeout_ms=min(20_000, self.delivery_timeout_ms),
                retry_backoff_ms=20,
            )
        except BaseException as exc:
            self.error = exc
            return
        n = 0
        try:
            while not self._stop.is_set():
                sent = []
                for _ in range(self.records_per_round):
                    value = b"r-%08d" % n
                    sent.append(
                        (value, producer.send(self.topic, value, partition=n % self.partitions))
                    )
                    n += 1
                producer.flush(timeout=self.delivery_timeout_ms / 1000 + 30)
                for value, future in sent:
                    self._note(value, future)
        except BaseException as exc:
            self.error = exc
        finally:
            with contextlib.suppress(SparklogError):
                producer.close(timeout=30)

    def _note(self, value: bytes, future: Any) -> None:
        try:
            meta = future.get(timeout=0)
        except (CommitStateUnknownError, KafkaTimeoutError) as exc:
            if isinstance(exc, KafkaTimeoutError) and "unknown" not in str(exc):
                with self._lock:
                    self.failed[value] = f"{type(exc).__name__}: {exc}"
                return
            with self._lock:
                self.unknown.add(value)
            return
        except SparklogError as exc:
            with self._lock:
                self.failed[value] = f"{type(exc).__name__}: {exc}"
            return
        with self._lock:
            self.acked[value] = (meta.partition, meta.offset)
            self.ack_times_s.append(time.monotonic())


@dataclass(frozen=True)
class Verdict:
    acked: int
    stored: int
    lost: int
    misplaced: int
    duplicates: int
    gaps: int
    failed_but_stored: int
    unknown: int
    failed: int

    def assert_safe(self) -> None:
        assert (self.lost, self.misplaced, self.duplicates, self.gaps) == (0, 0, 0, 0), self
        assert self.failed_but_stored == 0, self


def check(work: Workload, root_url: str, storage_options: dict[str, Any] | None = None) -> Verdict:
    """Compare what the producer was told with what the root holds."""
    topic = open_root(root_url, storage_options or {}).topic(work.topic)
    where: dict[bytes, list[tuple[int, int]]] = {}
    gaps = 0
    for p in range(topic.partitions):
        log = topic.partition(p)
        expected = log.log_start_offset
        for batch in log.iter_batches(log.log_start_offset, log.high_watermark):
            offsets = batch.column("offset").to_pylist()
            for offset, value in zip(offsets, batch.column("value").to_pylist(), strict=True):
                if offset != expected:
                    gaps += 1
                expected = offset + 1
                where.setdefault(value, []).append((p, offset))
    lost = sum(1 for v in work.acked if v not in where)
    misplaced = sum(1 for v, at in work.acked.items() if v in where and where[v] != [at])
    duplicates = sum(len(at) - 1 for at in where.values())
    return Verdict(
        acked=len(work.acked),
        stored=sum(len(at) for at in where.values()),
        lost=lost,
        misplaced=misplaced,
        duplicates=duplicates,
        gaps=gaps,
        failed_but_stored=sum(1 for v in work.failed if v in where),
        unknown=len(work.unknown),
        failed=len(work.failed),
    )


def rss_bytes(pid: int) -> int:
    """Resident memory of process ``pid`` (from /proc)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0
