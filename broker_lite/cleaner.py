"""The log cleaner: retention, compaction, merging and GC for the partitions a broker leads.

Every ``interval_ms`` it asks its host (the broker) to run maintenance on each
partition the host leads (the host passes its leader epoch, so a deposed
leader's pass is fenced, then refreshes its view and trims its tail cache) and
to collect garbage for each topic whose partition 0 it leads (one broker per
topic). The cleaner sees only :class:`MaintenanceHost`, never the broker's
locks, caches or state: the broker decides how a pass touches them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import Any, Protocol

from sparklog.broker_lite.logs import fields

log = logging.getLogger("sparklog.broker_lite.cleaner")


class MaintenanceHost(Protocol):
    """What the cleaner needs from whoever leads partitions (the broker)."""

    def led_partitions(self) -> Iterable[tuple[str, int]]:
        """(topic, partition) pairs this host leads now."""
        ...

    def wait_stopping(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s``; true once the host is stopping."""
        ...

    @property
    def stopping(self) -> bool: ...

    def maintain_partition(self, topic: str, partition: int) -> Any:
        """Retention, compaction and merging of one led partition; returns a report."""
        ...

    def collect_garbage(self, topic: str) -> None:
        """Delete the topic's objects no log references any more (after the grace period)."""
        ...

    def count_cleaner_run(self, outcome: str) -> None:
        """Record one partition pass, ``ok`` or ``error`` (a metric)."""
        ...


class Cleaner:
    """Scheduled maintenance of the partitions one host leads."""

    def __init__(self, host: MaintenanceHost, interval_ms: int) -> None:
        self.host = host
        self.interval_s = interval_ms / 1000

    def loop(self) -> None:
        while not self.host.wait_stopping(self.interval_s):
            try:
                self.run_once()
            except Exception:
                log.exception("cleaner pass failed")

    def run_once(self) -> dict[str, Any]:
        """One pass over the led partitions; returns counts for logs and tests."""
        host = self.host
        summary = {"partitions": 0, "errors": 0, "gc_topics": 0}
        started = time.perf_counter()
        for name, partition in sorted(host.led_partitions()):
            if host.stopping:
                break
            try:
                report = host.maintain_partition(name, partition)
                summary["partitions"] += 1
                host.count_cleaner_run("ok")
                log.debug(
                    "maintenance", extra=fields(topic=name, partition=partition, report=str(report))
                )
                if partition == 0:
                    host.collect_garbage(name)
                    summary["gc_topics"] += 1
            except Exception as exc:  # one partition's failure must not stop the others
                summary["errors"] += 1
                host.count_cleaner_run("error")
                log.warning(
                    "maintenance failed",
                    extra=fields(topic=name, partition=partition, error=str(exc)),
                )
        log.info(
            "cleaner pass",
            extra=fields(**summary, seconds=round(time.perf_counter() - started, 3)),
        )
        return summary
