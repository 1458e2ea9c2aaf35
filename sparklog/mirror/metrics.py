"""Prometheus metrics of mirror links (own registry: a broker may run links beside its own).

Per partition lag in records and seconds (``sparklog_mirror_lag_records``,
``sparklog_mirror_lag_seconds``), what was copied, and whether the last step
failed (a source unreachable keeps its position: ``sparklog_mirror_up`` 0).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge

if TYPE_CHECKING:
    from sparklog.mirror.copier import StepReport


class MirrorMetrics:
    """Gauges and counters of the links one process runs."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = r = registry or CollectorRegistry()
        self.lag_records = Gauge(
            "sparklog_mirror_lag_records",
            "Records the source has that the mirror partition lacks",
            ["link", "topic", "partition"],
            registry=r,
        )
        self.lag_seconds = Gauge(
            "sparklog_mirror_lag_seconds",
            "Age of the oldest record not yet mirrored (0 when caught up)",
            ["link", "topic", "partition"],
            registry=r,
        )
        self.records = Counter("sparklog_mirror_records", "Records mirrored", ["link"], registry=r)
        self.objects = Counter(
            "sparklog_mirror_objects",
            "Objects copied, by how (server: S3 copy; bytes: read and written)",
            ["link", "how"],
            registry=r,
        )
        self.bytes = Counter(
            "sparklog_mirror_bytes",
            "Object bytes read and written by the mirror process",
            ["link"],
            registry=r,
        )
        self.stopped = Gauge(
            "sparklog_mirror_topic_stopped",
            "1 while a mirror topic no longer follows its source (e.g. the source topic was "
            "deleted and re-created); the reason is logged and in mirror describe",
            ["link", "topic"],
            registry=r,
        )
        self.up = Gauge(
            "sparklog_mirror_up",
            "1 if the link's last step succeeded, 0 if it failed (position kept)",
            ["link"],
            registry=r,
        )

    def observe(self, link: str, report: StepReport) -> None:
        self.up.labels(link).set(1)
        self.records.labels(link).inc(report.records)
        server = report.objects_server_side
        self.objects.labels(link, "server").inc(server)
        self.objects.labels(link, "bytes").inc(report.objects_copied - server)
        self.bytes.labels(link).inc(report.bytes_copied)
        for lag in report.lag:  # copied this step: following its source
            self.stopped.labels(link, lag.topic).set(0)
        for topic in report.skipped:
            self.stopped.labels(link, topic).set(1)
        for lag in report.lag:
            labels = (link, lag.topic, str(lag.partition))
            self.lag_records.labels(*labels).set(lag.lag_records)
            self.lag_seconds.labels(*labels).set(lag.lag_seconds)

    def failed(self, link: str) -> None:
        self.up.labels(link).set(0)

    def serve(self, listen: str) -> int:
        """Serve /metrics on ``host:port`` (port 0: any free one); return the port."""
        from sparklog.metrics_http import serve

        return serve(self.registry, listen)
