"""Prometheus metrics of the connectors one process runs (own registry, as the mirror's).

PostgreSQL source: changes and snapshot rows written, the slot's confirmed LSN and
how far the server's WAL is ahead of it (``sparklog_connect_source_lag_bytes``).
Delta sink: the next topic offset each partition's records were applied up to and
how many records the topic holds beyond it (``sparklog_connect_sink_lag_records``).
``serve`` exposes them on ``/metrics`` (``--metrics-listen HOST:PORT``).
"""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge


class ConnectorMetrics:
    """Counters and gauges of the connectors in this process, labelled by connector name."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = r = registry or CollectorRegistry()
        self.records = Counter(
            "sparklog_connect_records",
            "Records a connector wrote (source: change records into topics; sink: rows)",
            ["connector"],
            registry=r,
        )
        self.snapshot_rows = Counter(
            "sparklog_connect_snapshot_rows",
            "Rows a PostgreSQL source wrote from its initial snapshot",
            ["connector"],
            registry=r,
        )
        self.source_lsn = Gauge(
            "sparklog_connect_source_lsn",
            "Last LSN a PostgreSQL source confirmed to its slot (as a number)",
            ["connector"],
            registry=r,
        )
        self.source_lag_bytes = Gauge(
            "sparklog_connect_source_lag_bytes",
            "WAL bytes the server has flushed beyond the slot's confirmed LSN",
            ["connector"],
            registry=r,
        )
        self.sink_batch = Gauge(
            "sparklog_connect_sink_batch",
            "Last micro-batch a Delta sink committed (its txnVersion)",
            ["connector"],
            registry=r,
        )
        self.sink_offset = Gauge(
            "sparklog_connect_sink_offset",
            "Next topic offset of a partition not yet applied to the Delta table",
            ["connector", "topic", "partition"],
            registry=r,
        )
        self.sink_lag_records = Gauge(
            "sparklog_connect_sink_lag_records",
            "Records a partition holds that the Delta table does not have yet",
            ["connector", "topic", "partition"],
            registry=r,
        )

    def source_progress(
        self, name: str, *, records: int, snapshot_rows: int, lsn: int | None, lag_bytes: int
    ) -> None:
        if records:
            self.records.labels(name).inc(records)
        if snapshot_rows:
            self.snapshot_rows.labels(name).inc(snapshot_rows)
        if lsn is not None:
            self.source_lsn.labels(name).set(lsn)
        self.source_lag_bytes.labels(name).set(lag_bytes)

    def sink_progress(
        self,
        name: str,
        *,
        batch: int,
        rows: int,
        topic: str,
        applied: Mapping[int, int],
        ends: Mapping[int, int],
    ) -> None:
        self.sink_batch.labels(name).set(batch)
        if rows:
            self.records.labels(name).inc(rows)
        for partition, end in ends.items():
            done = applied.get(partition, 0)
            self.sink_offset.labels(name, topic, str(partition)).set(done)
            self.sink_lag_records.labels(name, topic, str(partition)).set(max(0, end - done))

    def serve(self, listen: str) -> int:
        """Serve /metrics on ``host:port`` (port 0: any free one); return the port."""
        from sparklog.metrics_http import serve

        return serve(self.registry, listen)
