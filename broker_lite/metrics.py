"""Prometheus metrics of one broker (own registry, so several brokers can share a process).

The endpoint asks no one who they are, so on a broker where a listener
authenticates (``metrics_resource_names = "auto"``) or where the key says
``hidden`` it names no topic and no group: :class:`NamesHidden` serves each
series summed over its ``topic``, ``group`` and ``partition`` labels (total
records produced, total lag), so one tenant's scrape does not list the others'.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

from sparklog.broker_lite.damage import damage_seen


class Metrics:
    """Produce/fetch rates and bytes, commit latency, root requests, lag, leadership."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.produce_records = Counter(
            "sparklog_produce_records", "Records acknowledged", ["topic"], registry=r
        )
        self.produce_bytes = Counter(
            "sparklog_produce_bytes", "Record bytes acknowledged", ["topic"], registry=r
        )
        self.fetch_records = Counter(
            "sparklog_fetch_records", "Records served to consumers", ["topic"], registry=r
        )
        self.fetch_bytes = Counter(
            "sparklog_fetch_bytes", "Record bytes served to consumers", ["topic"], registry=r
        )
        self.fetch_source = Counter(
            "sparklog_fetch_batches", "Fetch batches by source", ["source"], registry=r
        )
        self.commit_seconds = Histogram(
            "sparklog_commit_seconds",
            "Latency of one partition commit to the root",
            registry=r,
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
        )
        self.flush_seconds = Histogram(
            "sparklog_flush_seconds",
            "Latency of one flush: object upload plus all partition commits",
            registry=r,
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
        )
        self.kafka_request_seconds = Histogram(
            "sparklog_kafka_request_seconds",
            "Time a Kafka API request took to handle, from parse to answer, by API "
            "(Kafka's RequestMetrics TotalTimeMs; a long-polling Fetch counts its wait)",
            ["api"],
            registry=r,
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
        )
        self.root_objects = Counter(
            "sparklog_root_objects_written", "Data objects written to the root", registry=r
        )
        self.root_requests = Counter(
            "sparklog_root_requests",
            "Requests to the root made by the broker, by kind",
            ["kind"],
            registry=r,
        )
        self.requests = Counter(
            "sparklog_requests",
            "Requests served, by method and error code",
            ["method", "code"],
            registry=r,
        )
        self.leadership_changes = Counter(
            "sparklog_leadership_changes", "Partitions gained or lost by this broker", registry=r
        )
        self.produce_waiting = Gauge(
            "sparklog_produce_waiting", "Produce requests waiting for their commit", registry=r
        )
        self.led_partitions = Gauge(
            "sparklog_led_partitions", "Partitions this broker leads", registry=r
        )
        self.leadership_shards = Gauge(
            "sparklog_leadership_shards",
            "Shards this broker leads (state=leading), or led until its lease went stale "
            "(state=lease_stale: it leads nothing until a renewal completes)",
            ["state"],
            registry=r,
        )
        self.live_brokers = Gauge("sparklog_live_brokers", "Brokers with a live lease", registry=r)
        self.group_lag = Gauge(
            "sparklog_group_lag", "Consumer group lag", ["group", "topic", "partition"], registry=r
        )
        self.cleaner_runs = Counter(
            "sparklog_cleaner_runs", "Maintenance passes, by outcome", ["outcome"], registry=r
        )
        self._server: Any = None

        self.damaged_storage = Gauge(
            "sparklog_damaged_storage_seen",
            "Times this process met damaged or missing stored data (each file is logged once)",
            registry=r,
        )
        self.damaged_storage.set_function(damage_seen)

    def serve(self, address: str, *, hide_names: bool = False) -> int:
        """Start the HTTP endpoint; return the port it listens on.

        ``hide_names``: series summed over topics, groups and partitions (see the module).
        """
        host, _, port = address.rpartition(":")
        registry = self.registry
        if hide_names:
            registry = CollectorRegistry()
            registry.register(NamesHidden(self.registry))
        server, _thread = start_http_server(int(port), addr=host, registry=registry)
        self._server = server
        return int(server.server_port)

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


#: labels that name a tenant's resources
NAME_LABELS = frozenset({"topic", "group", "partition"})


class NamesHidden(Collector):
    """The series of ``registry`` summed over :data:`NAME_LABELS` (``_created``: the earliest)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry

    def collect(self) -> Iterator[Metric]:
        for family in self.registry.collect():
            merged: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
            for sample in family.samples:
                labels = tuple(sorted((k, v) for k, v in sample.labels.items()
                                      if k not in NAME_LABELS))  # fmt: skip
                key = (sample.name, labels)
                if key not in merged:
                    merged[key] = sample.value
                elif sample.name.endswith("_created"):
                    merged[key] = min(merged[key], sample.value)
                else:
                    merged[key] += sample.value
            out = Metric(family.name, family.documentation, family.type, family.unit)
            out.samples = [
                Sample(name, dict(labels), value) for (name, labels), value in merged.items()
            ]
            yield out
