"""Consumer lag: committed offsets against high watermarks, read once per shard.

A lag computation is handed the partitions it needs at once, so the reads it
makes grow with the shards those partitions live in, never with groups x
partitions.  Brokers answer from their in-memory partition states
(``Broker.high_watermarks``); without a broker, :func:`read_high_watermarks`
opens each topic once and reads each of its shard logs once.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import TYPE_CHECKING

from sparklog.errors import SparklogError
from sparklog.topic_partition import TopicPartition

if TYPE_CHECKING:  # a topic handle loads pyarrow: only when lag is read
    from sparklog.storage import LogRoot, Topic

#: partitions -> their high watermarks (None: unknown, e.g. the topic was deleted)
HighWatermarks = Callable[[Collection[TopicPartition]], Mapping[TopicPartition, int | None]]


def lag_of(high_watermark: int | None, committed: int) -> int | None:
    """Records between a committed offset and the high watermark (None if that is unknown)."""
    return None if high_watermark is None else max(high_watermark - committed, 0)


def read_high_watermarks(
    root: LogRoot, partitions: Collection[TopicPartition]
) -> dict[TopicPartition, int | None]:
    """High watermarks read from ``root``: one handle per topic, one read per shard log."""
    topics: dict[str, Topic | None] = {}
    out: dict[TopicPartition, int | None] = {}
    for tp in partitions:
        if tp.topic not in topics:
            try:
                topics[tp.topic] = root.topic(tp.topic)
            except SparklogError:
                topics[tp.topic] = None
        topic = topics[tp.topic]
        try:
            # the topic handle caches its shard logs: partitions of a shard share one read
            out[tp] = None if topic is None else topic.partition(tp.partition).high_watermark
        except SparklogError:
            out[tp] = None
    return out
