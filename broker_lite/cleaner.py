"""The log cleaner: retention, compaction, merging and GC for the partitions a broker leads.

Every ``cleaner_interval_ms`` it runs ``storage.maintenance.run_maintenance``
on each partition this broker leads (with its leader epoch, so a deposed
leader's pass is fenced), ``collect_garbage`` and ``prune_topic_logs`` on each
topic whose partition 0 it leads (one broker per topic), and
``prune_group_log`` on the groups it sweeps, so metadata file counts stay
bounded.  Maintenance commits race safely with produce commits; afterwards
the writer log is refreshed and the tail cache trimmed to the new log start
offset.
"""

from __future__ import annotations

import importlib
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sparklog.broker_lite.logs import fields
from sparklog.storage import StorageError
from sparklog.storage.records import now_ms

if TYPE_CHECKING:
    from sparklog.broker_lite.service import Broker

log = logging.getLogger("sparklog.broker_lite.cleaner")

_maintenance: Any
try:  # storage.maintenance is written on main by the lead; guard until it lands
    _maintenance = importlib.import_module("sparklog.storage.maintenance")
except ImportError:  # pragma: no cover - depends on the storage version
    _maintenance = None


def maintenance_available() -> bool:
    return _maintenance is not None


class Cleaner:
    """Scheduled maintenance of one broker's led partitions."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.interval_s = broker.config.cleaner_interval_ms / 1000
        #: the time pruning compares metadata files' ages with (injectable for tests)
        self.clock_ms: Callable[[], int] = now_ms

    def loop(self) -> None:
        if _maintenance is None:
            log.warning("storage.maintenance is not available; the cleaner is idle")
            return
        while not self.broker._stopping.wait(self.interval_s):
            try:
                self.run_once()
            except Exception:
                log.exception("cleaner pass failed")

    def run_once(self) -> dict[str, Any]:
        """One pass over the led partitions; returns counts for logs and tests."""
        if _maintenance is None:
            return {"skipped": "storage.maintenance is not available"}
        broker = self.broker
        summary = {"partitions": 0, "errors": 0, "gc_topics": 0}
        started = time.perf_counter()
        handles: dict[str, Any] = {}
        for name, partition in sorted(broker.led_partitions()):
            if broker.stopping:
                break
            try:
                topic = broker.topic(name)
                st = broker.partition_state(topic, partition)
                fresh = handles.get(name)
                if fresh is None:  # its own log objects (one per topic per pass); races are safe
                    fresh = handles[name] = broker.root.topic(name)
                report = _maintenance.run_maintenance(fresh, partition, leader_epoch=st.epoch)
                with st.lock:
                    st.refresh()
                    broker.cache.trim(st.key, st.log.log_start_offset)
                summary["partitions"] += 1
                broker.metrics.cleaner_runs.labels("ok").inc()
                log.debug(
                    "maintenance", extra=fields(topic=name, partition=partition, report=str(report))
                )
                if partition == 0:
                    _maintenance.collect_garbage(fresh, broker.config.gc_grace_ms)
                    summary["gc_topics"] += 1
                    pruned = _maintenance.prune_topic_logs(fresh, now=self.clock_ms())
                    summary["pruned_files"] = summary.get("pruned_files", 0) + len(pruned.deleted)
            except (StorageError, Exception) as exc:
                summary["errors"] += 1
                broker.metrics.cleaner_runs.labels("error").inc()
                log.warning(
                    "maintenance failed",
                    extra=fields(topic=name, partition=partition, error=str(exc)),
                )
        for group in broker.owned_groups():
            try:
                pruned = _maintenance.prune_group_log(broker.root, group, now=self.clock_ms())
                summary["pruned_files"] = summary.get("pruned_files", 0) + len(pruned.deleted)
            except StorageError as exc:
                summary["errors"] += 1
                log.warning("group log pruning failed", extra=fields(group=group, error=str(exc)))
        log.info(
            "cleaner pass",
            extra=fields(**summary, seconds=round(time.perf_counter() - started, 3)),
        )
        return summary
