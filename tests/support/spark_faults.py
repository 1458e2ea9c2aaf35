"""Fault injection for the exactly-once tests, kept out of the production data source.

The driver subprocess (tests/spark/spark_driver.py) registers
:class:`FaultySparklogDataSource` as ``format("sparklog_faulty")``: the real
source and sink, with faults around their calls. ``SPARKLOG_SPARK_FAULT``
names the points, e.g. ``sink.before_commit:2`` (point, optionally the batch id):

* ``sink.before_commit``: the sink's executors wrote their objects, the driver
  dies before committing them;
* ``sink.mid_commit``: the driver dies after the first topic's commit;
* ``sink.after_commit``: committed, the driver dies before Spark's checkpoint;
* ``sink.write`` / ``source.read``: a task's first attempt fails (Spark retries it).

Spark runs a Python data source's driver-side calls in Python worker processes,
so a kill SIGKILLs the process group in ``SPARKLOG_SPARK_FAULT_PGID`` (the
driver, its JVM and its workers) as well as the calling process.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from sparklog.spark.sink import SinkCommitMessage, SparklogBatchWriter, SparklogStreamWriter
from sparklog.spark.source import SparklogDataSource
from sparklog.spark.stream import SparklogStreamReader

FAULT_ENV = "SPARKLOG_SPARK_FAULT"
PGID_ENV = "SPARKLOG_SPARK_FAULT_PGID"
TASK_POINTS = ("sink.write", "source.read")


class InjectedFault(RuntimeError):
    """A task failure injected by a test (Spark retries the task)."""


def _wanted(point: str, batch_id: int | None) -> bool:
    for item in os.environ.get(FAULT_ENV, "").split(","):
        name, _, when = item.strip().partition(":")
        if name == point and (not when or batch_id is None or when == str(batch_id)):
            return True
    return False


def maybe_fault(point: str, batch_id: int | None) -> None:
    """Inject the fault configured for ``point`` (no-op unless the test asked for it)."""
    if FAULT_ENV not in os.environ or not _wanted(point, batch_id):
        return
    if point in TASK_POINTS:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        if (ctx.attemptNumber() if ctx is not None else 0) == 0:
            raise InjectedFault(f"injected task failure at {point} (batch {batch_id})")
        return
    pgid = int(os.environ.get(PGID_ENV, "0"))
    if pgid > 1:
        os.killpg(pgid, signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)


class FaultyStreamReader(SparklogStreamReader):
    def read(self, partition: InputPartition) -> Any:
        maybe_fault("source.read", None)
        return super().read(partition)


class FaultyStreamWriter(SparklogStreamWriter):
    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
        message = super().write(iterator)
        maybe_fault("sink.write", message.batch_id)
        return message

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        if any(isinstance(m, SinkCommitMessage) and m.segments for m in messages):
            maybe_fault("sink.before_commit", batchId)
            if _wanted("sink.mid_commit", batchId):
                self._die_after_first_partition_commit(batchId)
        super().commit(messages, batchId)
        maybe_fault("sink.after_commit", batchId)

    @staticmethod
    def _die_after_first_partition_commit(batch_id: int) -> None:
        """Kill this process right after the first topic's commit of this batch (its
        shards committed directly or handed to their leader)."""
        from sparklog.client import handover

        commit = handover.commit

        def commit_then_die(*args: Any, **kwargs: Any) -> Any:
            result = commit(*args, **kwargs)
            maybe_fault("sink.mid_commit", batch_id)
            return result

        handover.commit = commit_then_die


class FaultyBatchWriter(SparklogBatchWriter):
    """The batch writer with the sink's kill points; the batch id is the ``txnVersion``."""

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        batch_id = self.options.txn_version
        if any(isinstance(m, SinkCommitMessage) and m.segments for m in messages):
            maybe_fault("sink.before_commit", batch_id)
            if batch_id is not None and _wanted("sink.mid_commit", batch_id):
                FaultyStreamWriter._die_after_first_partition_commit(batch_id)
        super().commit(messages)
        maybe_fault("sink.after_commit", batch_id)


class FaultySparklogDataSource(SparklogDataSource):
    """``format("sparklog_faulty")``: sparklog's source and sink with injected faults."""

    @classmethod
    def name(cls) -> str:
        return "sparklog_faulty"

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        reader = super().streamReader(schema)
        reader.__class__ = FaultyStreamReader
        return reader

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        writer = super().streamWriter(schema, overwrite)
        writer.__class__ = FaultyStreamWriter
        return writer

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        writer = super().writer(schema, overwrite)
        writer.__class__ = FaultyBatchWriter
        return writer
