"""A Delta sink's progress: the topic offsets applied to the table, and how far behind it is.

Each committed micro-batch's rows carry ``_partition`` and ``_offset``; the next
offset not yet applied is one past a partition's largest. Records behind are the
partition's high watermark minus that. :class:`SinkProgress` is the Delta sink's
``on_progress`` callback in ``sparklog connect delta-sink|run``: it updates the
metrics each batch and the connector's state (which ``connect status`` reads) at
most every few seconds.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from sparklog.connect import state
from sparklog.connect.delta import OFFSET, PARTITION
from sparklog.connect.metrics import ConnectorMetrics
from sparklog.storage import LogRoot


def applied_offsets(rows: pa.Table) -> dict[int, int]:
    """Partition -> the next offset after the largest in ``rows`` (the batch's records)."""
    if rows.num_rows == 0 or PARTITION not in rows.column_names:
        return {}
    grouped = rows.group_by(PARTITION).aggregate([(OFFSET, "max")])
    parts = grouped.column(PARTITION).to_pylist()
    ends = pc.add(grouped.column(f"{OFFSET}_max"), 1).to_pylist()
    return {int(p): int(e) for p, e in zip(parts, ends, strict=True)}


def topic_ends(root: LogRoot, topic: str) -> dict[int, int]:
    """Partition -> high watermark, read from the root now."""
    t = root.topic(topic)
    return {p: t.partition(p).refresh().high_watermark for p in range(t.partitions)}


def records_behind(ends: Mapping[int, int], applied: Mapping[str, int] | Mapping[int, int]) -> int:
    """Records the topic holds beyond what the table has, over all partitions."""
    done = {int(p): int(o) for p, o in applied.items()}
    return sum(max(0, end - done.get(p, 0)) for p, end in ends.items())


class SinkProgress:
    """The Delta sink's ``on_progress``: metrics per batch, the state every few seconds."""

    def __init__(
        self,
        root: LogRoot,
        name: str,
        topic: str,
        metrics: ConnectorMetrics | None = None,
        applied: Mapping[str, int] | None = None,
        save_interval_s: float = 5.0,
    ) -> None:
        self.root, self.name, self.topic, self.metrics = root, name, topic, metrics
        self.applied = {int(p): int(o) for p, o in (applied or {}).items()}
        self.batch: int | None = None
        self.rows = 0
        self._saves = state.Throttled(save_interval_s)  # progress documents are versions

    def __call__(self, batch_id: int, rows: pa.Table) -> None:
        for partition, end in applied_offsets(rows).items():
            self.applied[partition] = max(end, self.applied.get(partition, 0))
        self.batch = batch_id
        self.rows += rows.num_rows
        ends = topic_ends(self.root, self.topic)
        if self.metrics is not None:
            self.metrics.sink_progress(
                self.name,
                batch=batch_id,
                rows=rows.num_rows,
                topic=self.topic,
                applied=self.applied,
                ends=ends,
            )
        self.save(force=False)

    def progress(self) -> dict[str, Any]:
        return {
            "last_batch": self.batch,
            "rows": self.rows,
            "applied_offsets": {str(p): o for p, o in sorted(self.applied.items())},
        }

    def save(self, force: bool = True) -> None:
        if self.batch is not None and (force or self._saves.due()):
            state.save(self.root, self.name, progress=self.progress())
