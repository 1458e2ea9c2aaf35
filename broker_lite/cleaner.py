"""The log cleaner: retention, compaction, merging and GC for the partitions a broker leads.

Every ``interval_ms`` it asks its host (the broker) to run maintenance on each
partition the host leads (the host passes its leader epoch, so a deposed
leader's pass is fenced, then refreshes its view and trims its tail cache) and
to collect garbage for each topic whose partition 0 it leads (one broker per
topic) and, on one broker of the cluster, the objects shared by several topics and the
cluster metadata log's old files, and to
prune the shard logs of those topics and the logs of the groups it sweeps, so metadata file
counts stay bounded. The cleaner sees only :class:`MaintenanceHost`, never the broker's
locks, caches or state: the broker decides how a pass touches them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from sparklog.broker_lite.logs import fields
from sparklog.clock import now_ms
from sparklog.topic_partition import TopicPartition

log = logging.getLogger("sparklog.broker_lite.cleaner")


class MaintenanceHost(Protocol):
    """What the cleaner needs from whoever leads partitions (the broker)."""

    def led_partitions(self) -> Iterable[TopicPartition]:
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

    def prune_metadata_log(self, now_ms: int) -> int | None:
        """Delete the cluster metadata log's commits and snapshots below its retention, if
        this host is the one that prunes it; how many, or None."""
        ...

    def collect_shared_objects(self) -> int | None:
        """Delete objects shared by several topics that no log references any more (after
        the grace period), if this host is the one that collects them; how many, or None."""
        ...

    def prune_topic_logs(self, topic: str, now_ms: int) -> int:
        """Delete the topic's commit files and snapshots below its retention; how many."""
        ...

    def remove_stale_temp_files(self) -> int:
        """Remove temp files a killed writer left in the root's cluster folder; how many."""
        ...

    def owned_groups(self) -> Iterable[str]:
        """The groups whose logs this host prunes."""
        ...

    def prune_group_log(self, group: str, now_ms: int) -> int:
        """Delete the group's commit files and snapshots below its retention; how many."""
        ...

    def owned_transactional_ids(self) -> Iterable[str]:
        """The transactional ids whose logs this host prunes."""
        ...

    def prune_transaction_log(self, transactional_id: str, now_ms: int) -> int:
        """Delete the id's commit files and snapshots below its retention; how many."""
        ...


class Cleaner:
    """Scheduled maintenance of the partitions one host leads."""

    def __init__(self, host: MaintenanceHost, interval_ms: int) -> None:
        self.host = host
        self.interval_s = interval_ms / 1000
        #: the time pruning compares metadata files' ages with (injectable for tests)
        self.clock_ms: Callable[[], int] = now_ms

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
                    pruned = host.prune_topic_logs(name, self.clock_ms())
                    summary["pruned_files"] = summary.get("pruned_files", 0) + pruned
            except Exception as exc:  # one partition's failure must not stop the others
                summary["errors"] += 1
                host.count_cleaner_run("error")
                log.warning(
                    "maintenance failed",
                    extra=fields(topic=name, partition=partition, error=str(exc)),
                )
        try:
            pruned_metadata = host.prune_metadata_log(self.clock_ms())
            if pruned_metadata is not None:
                summary["pruned_files"] = summary.get("pruned_files", 0) + pruned_metadata
        except Exception as exc:  # pruning must not stop the pass
            summary["errors"] += 1
            log.warning("metadata log pruning failed", extra=fields(error=str(exc)))
        try:
            shared = host.collect_shared_objects()
            if shared is not None:
                summary["shared_objects_deleted"] = shared
        except Exception as exc:  # one collector's failure must not stop the pass
            summary["errors"] += 1
            log.warning("shared object collection failed", extra=fields(error=str(exc)))
        try:
            summary["temp_files_removed"] = host.remove_stale_temp_files()
        except Exception as exc:  # litter must not stop the pass
            summary["errors"] += 1
            log.warning("temp file sweep failed", extra=fields(error=str(exc)))
        # (what, its log field, the keys this host prunes, how): one failure stops nothing
        small_logs: list[tuple[str, str, Iterable[str], Callable[[str, int], int]]] = [
            ("group", "group", host.owned_groups(), host.prune_group_log),
            (
                "transaction",
                "transactional_id",
                host.owned_transactional_ids(),
                host.prune_transaction_log,
            ),
        ]
        for what, field_name, keys, prune in small_logs:
            for key in keys:
                try:
                    pruned = prune(key, self.clock_ms())
                    summary["pruned_files"] = summary.get("pruned_files", 0) + pruned
                except Exception as exc:  # one log's failure must not stop the pass
                    summary["errors"] += 1
                    log.warning(
                        f"{what} log pruning failed",
                        extra=fields(**{field_name: key}, error=str(exc)),
                    )
        log.info(
            "cleaner pass",
            extra=fields(**summary, seconds=round(time.perf_counter() - started, 3)),
        )
        return summary
