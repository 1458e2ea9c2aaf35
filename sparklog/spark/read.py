"""Executor side of a read: a :class:`ReadTask`'s ranges as Arrow batches for Spark.

Runs in Spark's Python workers, which are separate processes reused across
tasks: roots and topic handles are cached per process, so a partition log
already loaded only reads the commits made since (retention may have removed
segments it still lists).  Record batches go from the segment objects to Spark without Python per
row; small stored batches are joined (by the storage read) so Spark gets few, large
batches.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pyarrow as pa

from sparklog.errors import OffsetOutOfRangeError
from sparklog.spark.offsets import check_start
from sparklog.spark.plan import ReadTask
from sparklog.spark.roots import cached_root
from sparklog.spark.schema import timestamp_type_of, to_spark_batch
from sparklog.storage import LogRoot, PartitionLog, Topic
from sparklog.storage.txn_markers import committed_only
from sparklog.topic_partition import TopicPartition

#: Join stored batches until a Spark batch holds about this many rows or bytes.
TARGET_BATCH_ROWS = 65_536
TARGET_BATCH_BYTES = 16 << 20

_topics: dict[tuple[str, str], Topic] = {}


def _topic(root_key: str, root: LogRoot, task: ReadTask, name: str) -> Topic:
    info = task.topics[name]
    handle = _topics.get((root_key, info.topic_id))
    if handle is None:
        handle = _topics[(root_key, info.topic_id)] = Topic(root, info)
    elif handle.info.version < info.version:
        handle.info = info
    return handle


def read_task(task: ReadTask, target: pa.Schema) -> Iterator[pa.RecordBatch]:
    """Every record of the task's ranges, as batches of exactly ``target``."""
    root_key = json.dumps([task.root_url, task.storage_options], sort_keys=True, default=str)
    root = cached_root(task.root_url, task.storage_options)
    for r in task.ranges:
        topic = _topic(root_key, root, task, r.topic)
        plog = topic.partition(r.partition)
        plog.refresh()  # a cached log may predate retention; reads only commits since then
        tp = TopicPartition(r.topic, r.partition)
        start = check_start(
            tp,
            r.start,
            plog.log_start_offset,
            plog.high_watermark,
            fail_on_data_loss=task.fail_on_data_loss,
        )
        if start < r.start or start >= r.end:
            # start < r.start: the range lies beyond the log now (log replaced); reading from
            # the log start would return offsets this task was not asked for.
            continue
        ts_type = timestamp_type_of(topic.info.effective_config)
        try:
            for batch in _records(plog, start, r.end, task.read_committed):
                yield to_spark_batch(batch, r.topic, r.partition, ts_type, target)
        except OffsetOutOfRangeError as exc:  # retention ran between planning and reading
            resume = check_start(
                tp,
                start,
                exc.log_start_offset,
                exc.high_watermark,
                fail_on_data_loss=task.fail_on_data_loss,
            )
            if r.start <= resume < r.end:
                for batch in _records(plog, resume, r.end, task.read_committed):
                    yield to_spark_batch(batch, r.topic, r.partition, ts_type, target)


def _records(
    plog: PartitionLog, start: int, end: int, read_committed: bool
) -> Iterator[pa.RecordBatch]:
    """``[start, end)`` in batches joined to Spark's size; under read_committed, only
    what a read_committed Kafka consumer would see."""
    batches = plog.iter_batches(
        start, end, batch_rows=TARGET_BATCH_ROWS, batch_bytes=TARGET_BATCH_BYTES
    )
    if read_committed:
        return iter(committed_only(batches, plog.state.transactions, end))
    return batches
