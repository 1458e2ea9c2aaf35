"""The record model (docs/architecture.md, "storage/") as Arrow schemas, and input normalisation.

A record is Kafka's: key and value bytes (nullable), a millisecond timestamp and
headers.  Offsets are never stored by writers; they are added when reading.
On a typed topic ``value`` is a struct of the topic's schema instead of bytes.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from sparklog.clock import now_ms
from sparklog.errors import InvalidRecordError, InvalidTimestampError

HEADER_TYPE = pa.list_(
    pa.field("item", pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))
)
TIMESTAMP_TYPE = pa.timestamp("ms", tz="UTC")
OFFSET_FIELD = pa.field("offset", pa.int64(), nullable=False)

Header = tuple[str, bytes | None]


#: 0, 1, 2, ...: offset columns are this ramp plus their first offset, chunk by chunk
_RAMP = np.arange(1 << 16, dtype=np.int64)


def offset_column(first: int, count: int) -> pa.Array:
    """The int64 offsets ``first .. first + count - 1`` of records read back.

    Allocated from Arrow's memory pool, which reuses freed memory: a numpy array
    this size comes from malloc, which above glibc's mmap threshold maps fresh
    zero pages for every array (page faults on each segment read; measured 5x
    slower than this in a long read).
    """
    buffer = pa.allocate_buffer(count * 8)
    out = np.frombuffer(buffer, dtype=np.int64)
    for at in range(0, count, len(_RAMP)):
        size = min(len(_RAMP), count - at)
        np.add(_RAMP[:size], first + at, out=out[at : at + size])
    return pa.Array.from_buffers(pa.int64(), count, [None, buffer])


def with_offset_column(first: int, batch: pa.RecordBatch) -> pa.RecordBatch:
    """``batch`` with its records' offsets, ``first`` onwards, as a leading column."""
    return pa.RecordBatch.from_arrays(
        [offset_column(first, batch.num_rows), *batch.columns],
        schema=_with_offset_field(batch.schema),
    )


@functools.lru_cache(maxsize=64)
def _with_offset_field(schema: pa.Schema) -> pa.Schema:
    """``offset`` + ``schema``: built once per record schema, not once per batch."""
    return pa.schema([OFFSET_FIELD, *schema])


def int64_values(values: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A numpy view of an int64 (or timestamp) column without nulls.

    Read from the Arrow buffer directly: pyarrow's own ``to_numpy`` goes
    through its pandas-aware conversion, which imports pandas (about 0.3 s)
    in a fresh process, such as the one Spark starts to plan each streaming
    query.
    """
    if isinstance(values, pa.ChunkedArray):
        if values.num_chunks == 0:
            return np.empty(0, dtype=np.int64)
        values = values.chunk(0) if values.num_chunks == 1 else values.combine_chunks()
    if values.null_count or values.type.bit_width != 64:
        raise ValueError(f"int64_values: a {values.type} column with {values.null_count} nulls")
    data = values.buffers()[1]
    if data is None:
        return np.empty(0, dtype=np.int64)
    return np.frombuffer(data, dtype=np.int64, count=len(values), offset=values.offset * 8)


@functools.lru_cache(maxsize=256)
def record_schema(value_type: pa.DataType | None = None) -> pa.Schema:
    """Schema of stored records; ``value_type`` is a struct on typed topics (one shared,
    immutable schema per value type: reads ask for it once per segment)."""
    return pa.schema(
        [
            pa.field("key", pa.binary()),
            pa.field("value", value_type if value_type is not None else pa.binary()),
            pa.field("timestamp", TIMESTAMP_TYPE),
            pa.field("headers", HEADER_TYPE),
        ]
    )


RECORD_SCHEMA = record_schema()


def make_batch(
    values: Sequence[Any],
    keys: Sequence[bytes | None] | None = None,
    timestamps_ms: Sequence[int | None] | None = None,
    headers: Sequence[Sequence[Header] | None] | None = None,
    value_type: pa.DataType | None = None,
) -> pa.RecordBatch:
    """Build a record batch from Python lists (convenience for clients and tests)."""
    n = len(values)
    schema = record_schema(value_type)
    header_rows = [
        None if h is None else [{"key": k, "value": v} for k, v in h]
        for h in (headers or [None] * n)
    ]
    return pa.record_batch(
        [
            pa.array(keys if keys is not None else [None] * n, pa.binary()),
            pa.array(values, schema.field("value").type),
            pa.array(timestamps_ms if timestamps_ms is not None else [None] * n, pa.int64()).cast(
                TIMESTAMP_TYPE
            ),
            pa.array(header_rows, HEADER_TYPE),
        ],
        schema=schema,
    )


def normalize(
    data: pa.RecordBatch | pa.Table,
    schema: pa.Schema,
    *,
    log_append_time: bool = False,
    max_message_bytes: int | None = None,
    append_time_ms: int | None = None,
) -> list[pa.RecordBatch]:
    """Conform producer input to the topic's stored schema, or raise InvalidRecordError.

    ``value`` is required; ``key``, ``timestamp`` and ``headers`` may be absent
    (null).  Strings become bytes, integer or any-unit timestamps become
    ``timestamp[ms, UTC]``; missing timestamps (and every timestamp under
    LogAppendTime) become the append time.  Other columns are refused so that a
    typo never drops data silently.
    """
    if (
        isinstance(data, pa.RecordBatch)
        and not log_append_time
        and data.schema.equals(schema)
        and not data.column("timestamp").null_count
    ):  # already in the stored shape (the common case): nothing to rebuild
        if max_message_bytes is not None and data.num_rows:
            check_sizes([data], max_message_bytes)
        return [data]
    table = pa.Table.from_batches([data]) if isinstance(data, pa.RecordBatch) else data
    names = set(table.column_names)
    extra = names - {"key", "value", "timestamp", "headers", "offset"}
    if extra:
        raise InvalidRecordError(
            f"unknown record column(s) {sorted(extra)}; accepted: key, value, timestamp, headers"
        )
    if "value" not in names:
        raise InvalidRecordError("record batch has no 'value' column; 'value' is required")
    n = table.num_rows
    stamp = append_time_ms if append_time_ms is not None else now_ms()
    columns = []
    for field in schema:
        if field.name not in names:
            column = pa.chunked_array([null_column(n, field.type)])
            if field.name != "timestamp":
                columns.append(column)
                continue
        else:
            column = table.column(field.name)
        columns.append(_conform(field, column, stamp, log_append_time))
    out = pa.Table.from_arrays(columns, schema=schema)
    if max_message_bytes is not None and n:
        check_sizes(out, max_message_bytes)
    return out.combine_chunks().to_batches() or [pa.RecordBatch.from_pylist([], schema=schema)]


def null_column(n: int, type_: pa.DataType) -> pa.Array:
    """``n`` nulls of ``type_``, with empty children for a list type.

    ``pa.nulls`` gives a list array a child of ``n`` (null) elements, which IPC
    writes out in full, even for a slice: 8 bytes of padding per record and
    the whole child for each partition's slice of a request normalised at once.
    """
    if pa.types.is_list(type_):
        return pa.ListArray.from_arrays(
            pa.array(np.zeros(n + 1, dtype=np.int32)),
            pa.array([], type_.value_type),
            type=type_,
            mask=pa.array(np.ones(n, dtype=bool)),
        )
    return pa.nulls(n, type_)


def _conform(
    field: pa.Field, column: pa.ChunkedArray, stamp_ms: int, log_append_time: bool
) -> pa.ChunkedArray:
    import pyarrow.compute as pc

    name, target = field.name, field.type
    stamping = name == "timestamp" and (log_append_time or column.null_count)
    if not stamping and column.type.equals(target):
        return column  # already conforming (the common case): no kernel runs
    if name == "timestamp":
        if log_append_time:
            return pa.chunked_array([pa.array([stamp_ms] * len(column), pa.int64())]).cast(target)
        if pa.types.is_integer(column.type):
            column = column.cast(pa.int64()).cast(target)
        elif pa.types.is_timestamp(column.type):
            if column.type.tz is None:
                column = column.cast(pa.timestamp(column.type.unit, tz="UTC"))
            column = column.cast(target, safe=False)
        elif not pa.types.is_null(column.type):
            raise InvalidRecordError(
                f"column 'timestamp' has type {column.type}; accepted: timestamp or int64 ms"
            )
        else:
            column = column.cast(target)
        if column.null_count:
            column = pc.fill_null(column, pa.scalar(stamp_ms, pa.int64()).cast(target))
        return column
    if column.type.equals(target):
        return column
    if pa.types.is_null(column.type):
        return column.cast(target)
    if name in ("key", "value") and pa.types.is_binary(target):
        if (
            pa.types.is_string(column.type)
            or pa.types.is_large_string(column.type)
            or (pa.types.is_large_binary(column.type))
        ):
            return column.cast(target)
        raise InvalidRecordError(
            f"column {name!r} has type {column.type}; accepted: binary or string"
        )
    if name == "value" and pa.types.is_struct(target):
        return _conform_struct(column, target)
    try:
        return column.cast(target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise InvalidRecordError(
            f"column {name!r} has type {column.type}; accepted: {target}"
        ) from exc


def _conform_struct(column: pa.ChunkedArray, target: pa.DataType) -> pa.ChunkedArray:
    if not pa.types.is_struct(column.type):
        raise InvalidRecordError(
            f"column 'value' has type {column.type}; this typed topic accepts struct {target}"
        )
    given = {column.type.field(i).name for i in range(column.type.num_fields)}
    wanted = {target.field(i).name for i in range(target.num_fields)}
    unknown = given - wanted
    if unknown:
        raise InvalidRecordError(
            f"value field(s) {sorted(unknown)} are not in the topic schema; accepted: {target}"
        )
    missing = [
        target.field(i)
        for i in range(target.num_fields)
        if target.field(i).name not in given and not target.field(i).nullable
    ]
    if missing:
        raise InvalidRecordError(
            f"value lacks required field(s) {[f.name for f in missing]}; schema: {target}"
        )
    chunks = []
    for chunk in column.chunks:
        arrays = []
        for i in range(target.num_fields):
            f = target.field(i)
            if f.name in given:
                child = chunk.field(f.name)
                try:
                    arrays.append(child.cast(f.type, safe=True))
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                    raise InvalidRecordError(
                        f"value field {f.name!r} has type {child.type}; accepted: {f.type}"
                    ) from exc
            else:
                arrays.append(pa.nulls(len(chunk), f.type))
        chunks.append(pa.StructArray.from_arrays(arrays, fields=list(target), mask=chunk.is_null()))
    return pa.chunked_array(chunks, type=target)


def _size_bound(table: pa.Table) -> int:
    """An upper bound of every record's size: the longest key + the longest value + all
    header bytes of the batch (cheap: a few vectorised passes, no per-record sums)."""
    import pyarrow.compute as pc

    bound = 0
    for name in ("key", "value"):
        col = table.column(name)
        if pa.types.is_binary(col.type) and len(col) > col.null_count:
            bound += max(_longest_binary(chunk) for chunk in col.chunks)
    heads = table.column("headers")
    if heads.null_count < len(heads):
        flat = pc.list_flatten(heads)
        for child in ("key", "value"):
            values = pc.struct_field(flat, child)
            if len(values):
                bound += pc.sum(pc.binary_length(values)).as_py() or 0
    return int(bound)


def _longest_binary(array: pa.Array) -> int:
    """The largest offset step of a binary array: its longest value's length, or more
    (a null slot may span bytes), read from the offsets without a per-value kernel."""
    if not len(array):
        return 0
    offsets = np.frombuffer(
        array.buffers()[1], dtype=np.int32, count=len(array) + 1, offset=array.offset * 4
    )
    return int((offsets[1:] - offsets[:-1]).max())


def record_sizes(table: pa.Table) -> pa.Array:
    """Approximate serialized size of each record: key + value + header bytes."""
    import pyarrow.compute as pc

    n = table.num_rows
    size = pa.array(np.zeros(n, dtype=np.int64))
    for name in ("key", "value"):
        col = table.column(name)
        if pa.types.is_binary(col.type):
            size = pc.add(size, pc.fill_null(pc.binary_length(col), 0).cast(pa.int64()))
    heads = table.column("headers")
    if heads.null_count < n:
        flat = pc.list_flatten(heads)
        if len(flat):
            parents = pc.list_parent_indices(heads)
            lens = pc.add(
                pc.fill_null(pc.binary_length(pc.struct_field(flat, "key")), 0),
                pc.fill_null(pc.binary_length(pc.struct_field(flat, "value")), 0),
            )
            per_row = np.bincount(
                parents.to_numpy(), weights=lens.to_numpy(zero_copy_only=False), minlength=n
            ).astype(np.int64)
            size = pc.add(size, pa.array(per_row))
    return size


INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def check_timestamps(
    batches: Sequence[pa.RecordBatch], before_ms: int, after_ms: int, now: int
) -> None:
    """Raise InvalidTimestampError naming the first record whose timestamp is outside
    ``[now - before_ms, now + after_ms]`` (Kafka's LogValidator for CreateTime topics)."""
    import pyarrow.compute as pc

    low, high = max(now - before_ms, INT64_MIN), min(now + after_ms, INT64_MAX)
    for batch in batches:
        if not batch.num_rows:
            continue
        stamps = batch.column("timestamp").cast(pa.int64())
        bounds = pc.min_max(stamps)
        if bounds["min"].as_py() >= low and bounds["max"].as_py() <= high:
            continue
        outside = pc.or_(pc.less(stamps, low), pc.greater(stamps, high))
        index = pc.index(outside, True).as_py()
        stamp = stamps[index].as_py()
        raise InvalidTimestampError(
            f"record {index} of the batch has timestamp {stamp}, outside the topic's window "
            f"[{low}, {high}] (the broker's clock {now} minus message.timestamp.before.max.ms="
            f"{before_ms}, plus message.timestamp.after.max.ms={after_ms}); accepted: a "
            "timestamp in the window, or the topic's message.timestamp.type=LogAppendTime"
        )


def check_sizes(records: pa.Table | Sequence[pa.RecordBatch], max_message_bytes: int) -> None:
    """Raise InvalidRecordError naming the first record larger than ``max_message_bytes``."""
    import pyarrow.compute as pc

    if not isinstance(records, pa.Table) and not records:
        return
    table = records if isinstance(records, pa.Table) else pa.Table.from_batches(records)
    if _size_bound(table) <= max_message_bytes:
        return  # no record can be larger: the exact per-record pass is not needed
    sizes = record_sizes(table)
    biggest = pc.max(sizes).as_py() or 0
    if biggest > max_message_bytes:
        index = pc.index(sizes, biggest).as_py()
        raise InvalidRecordError(
            f"record {index} of the batch is {biggest} bytes; max.message.bytes accepts at most "
            f"{max_message_bytes}"
        )
