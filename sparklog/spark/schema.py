"""The rows ``format("sparklog")`` produces: Kafka's source schema, built from Arrow.

Spark's Kafka source yields ``key, value, topic, partition, offset, timestamp,
timestampType[, headers]``.  sparklog yields the same columns; on a typed topic
``value`` is the topic's struct.  Spark checks that every Arrow batch a reader
yields has exactly ``to_arrow_schema(schema)`` (timestamps in microseconds,
UTC), so conversion happens here, column by column, without Python per row.
"""

from __future__ import annotations

import inspect

import numpy as np
import pyarrow as pa
from pyspark.sql.pandas.types import from_arrow_type, to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

#: Kafka's timestampType values.
CREATE_TIME = 0
LOG_APPEND_TIME = 1

HEADERS_SPARK_TYPE = ArrayType(
    StructType([StructField("key", StringType()), StructField("value", BinaryType())])
)


def source_schema(value_type: pa.DataType | None, include_headers: bool) -> StructType:
    """The Spark schema of records read from topics whose value is ``value_type``."""
    # explicit: the default changed (False in pyspark 4.0, True from 4.1)
    value: DataType = (
        BinaryType()
        if value_type is None
        else from_arrow_type(value_type, prefer_timestamp_ntz=True)
    )
    fields = [
        StructField("key", BinaryType()),
        StructField("value", value),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(StructField("headers", HEADERS_SPARK_TYPE))
    return StructType(fields)


#: pyspark 4.0 names the UTC switch ``timestamp_utc`` (default on); later ones take ``timezone``
_TIMEZONE_ARG = "timezone" in inspect.signature(to_arrow_schema).parameters


def arrow_schema(schema: StructType) -> pa.Schema:
    """The Arrow schema Spark demands of the batches a reader yields for ``schema``."""
    if _TIMEZONE_ARG:
        return to_arrow_schema(schema, timezone="UTC")
    return to_arrow_schema(schema, timestamp_utc=True)  # type: ignore[call-arg]


def timestamp_type_of(config: dict) -> int:
    """Kafka's timestampType for a topic's ``message.timestamp.type``."""
    return (
        LOG_APPEND_TIME if config.get("message.timestamp.type") == "LogAppendTime" else CREATE_TIME
    )


def to_spark_batch(
    batch: pa.RecordBatch,
    topic: str,
    partition: int,
    timestamp_type: int,
    target: pa.Schema,
) -> pa.RecordBatch:
    """A storage batch (offset, key, value, timestamp, headers) as a batch of ``target``."""
    n = batch.num_rows
    columns: list[pa.Array] = []
    for f in target:
        name = f.name
        if name == "topic":
            column: pa.Array = pa.repeat(pa.scalar(topic, pa.string()), n)
        elif name == "partition":
            column = pa.array(np.full(n, partition, dtype=np.int32))
        elif name == "timestampType":
            column = pa.array(np.full(n, timestamp_type, dtype=np.int32))
        else:
            column = batch.column(name)
        if not column.type.equals(f.type):
            column = column.cast(f.type)
        columns.append(column)
    return pa.RecordBatch.from_arrays(columns, schema=target)
