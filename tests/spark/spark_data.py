"""Test data for the Spark data source tests: topics filled through the storage API."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sparklog.storage import LogRoot, make_batch

BASE_TS_MS = 1_700_000_000_000


def fill(
    root: LogRoot,
    name: str,
    *,
    partitions: int = 3,
    batches: int = 4,
    per_batch: int = 25,
    config: dict[str, Any] | None = None,
    create: bool = True,
) -> int:
    """Create ``name`` and append ``batches`` x ``per_batch`` records to every partition.

    Record i of partition p has key ``k{i}``, value ``{name}-{p}-{i}``,
    timestamp BASE_TS_MS + 1000 * i and one header. Returns the record count.
    """
    if create:
        root.create_topic(name, partitions, config=config)
    topic = root.topic(name)
    existing = {p: topic.partition(p).high_watermark for p in range(topic.partitions)}
    for b in range(batches):
        parts = {}
        for p in range(topic.partitions):
            first = existing[p] + b * per_batch
            ids = range(first, first + per_batch)
            parts[p] = make_batch(
                [f"{name}-{p}-{i}".encode() for i in ids],
                keys=[f"k{i}".encode() for i in ids],
                timestamps_ms=[BASE_TS_MS + 1000 * i for i in ids],
                headers=[[("n", str(i).encode())] for i in ids],
            )
        topic.produce(parts)
    return topic.partitions * batches * per_batch


def stored_rows(root: LogRoot, name: str, include_headers: bool = True) -> list[dict[str, Any]]:
    """Every record of a topic as the rows Spark's Kafka source would give."""
    topic = root.topic(name)
    kind = 1 if topic.info.effective_config["message.timestamp.type"] == "LogAppendTime" else 0
    rows = []
    for p in range(topic.partitions):
        log = topic.partition(p)
        for r in log.read(log.log_start_offset).to_pylist():
            row = {
                "key": r["key"],
                "value": r["value"],
                "topic": name,
                "partition": p,
                "offset": r["offset"],
                "timestamp": r["timestamp"].astimezone(dt.UTC),
                "timestampType": kind,
            }
            if include_headers:
                row["headers"] = [(h["key"], h["value"]) for h in r["headers"] or []]
            rows.append(row)
    return rows
