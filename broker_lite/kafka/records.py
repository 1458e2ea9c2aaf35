"""Kafka record batches v2 (magic 2) to and from Arrow record batches.

Layout (Kafka's ``DefaultRecordBatch``): a 61-byte header (base offset, length,
leader epoch, magic, CRC32C of everything after the CRC, attributes, last
offset delta, base/max timestamp, producer id/epoch, base sequence, record
count) followed by the records, optionally compressed as one block with gzip,
snappy, lz4 (frame) or zstd.  Each record is varint-framed: attributes,
timestamp delta, offset delta, key, value, headers.  Older formats (magic 0
and 1) are refused with UNSUPPORTED_FOR_MESSAGE_FORMAT, as Kafka does for
clients that send them to a broker which no longer converts.
"""

from __future__ import annotations

import gzip
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import cast

import cramjam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from aiokafka.errors import CorruptRecordException
from aiokafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from crc32c import crc32c

from sparklog.errors import (
    CorruptMessageError,
    UnsupportedCompressionTypeError,
    UnsupportedForMessageFormatError,
)
from sparklog.storage.records import HEADER_TYPE, TIMESTAMP_TYPE

HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_BYTES = HEADER.size  # 61
#: Bytes before the CRC-covered part (base offset .. crc).
CRC_START = 21
CODECS = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
TIMESTAMP_TYPE_BIT = 0x08
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20
XERIAL_MAGIC = b"\x82SNAPPY\x00"


@dataclass
class DecodedBatch:
    """One producer batch: Arrow records plus the header fields the broker needs."""

    records: pa.RecordBatch
    count: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    codec: str
    log_append_time: bool
    transactional: bool
    control: bool


def _decompress(codec: int, data: bytes) -> bytes:
    try:
        if codec == 1:
            return gzip.decompress(data)
        if codec == 2:
            if data.startswith(XERIAL_MAGIC):  # the Java client's framing
                out = bytearray()
                pos = 16
                while pos < len(data):
                    (size,) = struct.unpack_from(">i", data, pos)
                    out += bytes(cramjam.snappy.decompress_raw(data[pos + 4 : pos + 4 + size]))
                    pos += 4 + size
                return bytes(out)
            return bytes(cramjam.snappy.decompress_raw(data))
        if codec == 3:
            return bytes(cramjam.lz4.decompress(data))
        if codec == 4:
            return bytes(cramjam.zstd.decompress(data))
    except (OSError, EOFError, ValueError, struct.error, cramjam.DecompressionError) as exc:
        raise CorruptMessageError(f"{CODECS[codec]} block does not decompress: {exc}") from None
    raise UnsupportedCompressionTypeError(
        f"compression codec {codec} is not accepted; accepted: 0-4 (none, gzip, snappy, lz4, zstd)"
    )


def split_batches(data: bytes | memoryview) -> Iterator[memoryview]:
    """The record batches in a produce request's ``records`` field (magic 2 only)."""
    view = memoryview(data)
    pos = 0
    while pos < len(view):
        if len(view) - pos < 17:
            raise CorruptMessageError("records end inside a batch header")
        (length,) = struct.unpack_from(">i", view, pos + 8)
        magic = view[pos + 16]
        if magic != 2:
            raise UnsupportedForMessageFormatError(
                f"record batch magic {magic} is not accepted; accepted: magic 2 (Kafka 0.11+ "
                "clients)"
            )
        end = pos + 12 + length
        if length < HEADER_BYTES - 12 or end > len(view):
            raise CorruptMessageError(f"record batch length {length} does not fit the request")
        yield view[pos:end]
        pos = end


@dataclass
class ReadBatch:
    """One v2 batch's header fields and records as Python lists (checked, not yet Arrow)."""

    count: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    attributes: int
    keys: list[bytes | None]
    values: list[bytes | None]
    stamps: list[int]
    headers: dict[int, list[dict[str, object]]]


def decode_batch(view: memoryview) -> DecodedBatch:
    """One v2 batch (from :func:`split_batches`) as Arrow records; the CRC is checked.

    The header is checked here (CRC32C, record count, codec, last offset delta);
    a compressed body is decompressed here too (so codec errors name the codec),
    then aiokafka's compiled reader walks the records.
    """
    return to_arrow([read_batch(view)])[0]


def read_batch(view: memoryview) -> ReadBatch:
    """The checks and the record walk of :func:`decode_batch`, without the Arrow columns.

    A produce request's batches of many partitions are read one by one (each
    partition's error is its own), then made Arrow together by :func:`to_arrow`:
    building Arrow columns costs about 70 µs per call whatever the row count,
    so once per request instead of once per partition.
    """
    (
        _base_offset,
        _length,
        _epoch,
        _magic,
        crc,
        attributes,
        last_offset_delta,
        _base_ts,
        _max_ts,
        producer_id,
        producer_epoch,
        base_sequence,
        count,
    ) = HEADER.unpack_from(view, 0)
    if crc32c(view[CRC_START:]) != crc:
        raise CorruptMessageError("record batch CRC32C does not match its contents")
    if count < 0 or count > len(view):
        raise CorruptMessageError(f"record batch claims {count} records")
    if count and last_offset_delta != count - 1:
        raise CorruptMessageError(
            f"record batch last offset delta {last_offset_delta} does not match {count} records"
        )
    codec = attributes & 0x07
    if codec not in CODECS:
        raise UnsupportedCompressionTypeError(
            f"compression codec {codec} is not accepted; accepted: 0-4 (none, gzip, snappy, "
            "lz4, zstd)"
        )
    if codec:
        body = _decompress(codec, bytes(view[HEADER_BYTES:]))
        head = bytearray(view[:HEADER_BYTES])
        struct.pack_into(">i", head, 8, HEADER_BYTES - 12 + len(body))
        struct.pack_into(">h", head, 21, attributes & ~0x07)
        keys, values, stamps, headers = _decode_records(bytes(head) + body)
    else:
        keys, values, stamps, headers = _decode_records(view)
    if len(keys) != count:
        raise CorruptMessageError(f"record batch claims {count} records, holds {len(keys)}")
    return ReadBatch(
        count, producer_id, producer_epoch, base_sequence, attributes, keys, values, stamps, headers
    )


def to_arrow(batches: Sequence[ReadBatch]) -> list[DecodedBatch]:
    """Read batches as decoded ones: one Arrow record batch for all, sliced per batch."""
    keys: list[bytes | None] = []
    values: list[bytes | None] = []
    stamps: list[int] = []
    headers: dict[int, list[dict[str, object]]] = {}
    for read in batches:
        at = len(keys)
        keys.extend(read.keys)
        values.extend(read.values)
        stamps.extend(read.stamps)
        headers.update({at + row: h for row, h in read.headers.items()})
    total = len(keys)
    records = pa.record_batch(
        [
            _binary_column(keys),
            _binary_column(values),
            pa.array(np.fromiter(stamps, np.int64, total)).cast(TIMESTAMP_TYPE),
            _headers_column(headers, total),
        ],
        names=["key", "value", "timestamp", "headers"],
    )
    out = []
    at = 0
    for read in batches:
        codec = read.attributes & 0x07
        out.append(
            DecodedBatch(
                records=records if len(batches) == 1 else records.slice(at, read.count),
                count=read.count,
                producer_id=read.producer_id,
                producer_epoch=read.producer_epoch,
                base_sequence=read.base_sequence,
                codec=CODECS[codec],
                log_append_time=bool(read.attributes & TIMESTAMP_TYPE_BIT),
                transactional=bool(read.attributes & TRANSACTIONAL_BIT),
                control=bool(read.attributes & CONTROL_BIT),
            )
        )
        at += read.count
    return out


def _decode_records(
    batch: bytes | memoryview,
) -> tuple[list[bytes | None], list[bytes | None], list[int], dict[int, list[dict[str, object]]]]:
    """keys, values, timestamps and headers (by row, only rows that have some) of an
    uncompressed batch, read by aiokafka's compiled record reader (a LogAppendTime
    batch gives every record its max timestamp, as Kafka's readers do)."""
    reader = DefaultRecordBatch(batch)
    # the reader refuses to iterate before its own CRC check; the header's CRC was
    # checked by the caller over the bytes it received
    reader.validate_crc()
    keys: list[bytes | None] = []
    values: list[bytes | None] = []
    stamps: list[int] = []
    headers: dict[int, list[dict[str, object]]] = {}
    add_key, add_value, add_stamp = keys.append, values.append, stamps.append
    try:
        for row, record in enumerate(reader):
            add_key(record.key)
            add_value(record.value)
            add_stamp(record.timestamp)
            if record.headers:
                headers[row] = [{"key": k, "value": v} for k, v in record.headers]
    except CorruptRecordException as exc:
        raise CorruptMessageError(f"record batch does not parse: {exc}") from None
    except UnicodeDecodeError:
        raise CorruptMessageError("record header key is not UTF-8") from None
    except (ValueError, IndexError, AssertionError) as exc:
        raise CorruptMessageError(f"record batch does not parse: {exc}") from None
    return keys, values, stamps, headers


def _binary_column(items: list[bytes | None]) -> pa.Array:
    """A binary column from bytes objects: one join and one cumulative sum.

    ``pa.array`` grows its data buffer by doubling while it appends; in the
    broker, with fresh memory for every request, that reallocating was the
    largest single cost of a produce.  A column with nulls takes ``pa.array``.
    """
    if not items or items[0] is None:
        return pa.array(items, pa.binary())
    present = cast(list[bytes], items)
    offsets = np.zeros(len(present) + 1, dtype=np.int32)
    try:
        np.cumsum(np.fromiter(map(len, present), np.int32, len(present)), out=offsets[1:])
    except TypeError:  # len(None): a null further on
        return pa.array(items, pa.binary())
    data = b"".join(present)
    return pa.Array.from_buffers(
        pa.binary(), len(items), [None, pa.py_buffer(offsets), pa.py_buffer(data)]
    )


def _headers_column(headers: dict[int, list[dict[str, object]]], count: int) -> pa.Array:
    """The headers column; a batch without headers (the common case) costs no Python loop."""
    if not headers:
        return pa.ListArray.from_arrays(
            pa.array(np.zeros(count + 1, dtype=np.int32)),
            pa.array([], HEADER_TYPE.value_type),
            type=HEADER_TYPE,
        )
    return pa.array([headers.get(row, []) for row in range(count)], HEADER_TYPE)


def _value_bytes(column: pa.Array) -> list[bytes | None]:
    """Values as bytes: binary as is; a typed topic's struct values as JSON."""
    if pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type):
        return list(column.to_pylist())
    import json

    return [None if v is None else json.dumps(v, default=str).encode() for v in column.to_pylist()]


def encode_batch(
    batch: pa.RecordBatch, log_append_time: bool = False, leader_epoch: int = 0
) -> bytes:
    """Arrow records with an ``offset`` column (consecutive) as one uncompressed v2 batch.

    aiokafka's compiled builder writes the records and the header (base offset 0,
    as a producer does); the base offset and leader epoch are set afterwards (they
    are outside the CRC), and LogAppendTime's attribute bit too (inside it: the CRC
    is computed again).
    """
    offsets = batch.column("offset")
    base_offset = offsets[0].as_py()
    deltas = pc.subtract(offsets, base_offset).to_pylist()
    keys = batch.column("key").to_pylist()
    values = _value_bytes(batch.column("value"))
    stamps = batch.column("timestamp").cast(pa.int64()).to_pylist()
    header_column = batch.column("headers")
    builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 0x7FFFFFFF)
    append = builder.append
    if header_column.null_count == len(header_column) or not len(header_column.flatten()):
        none: list[tuple[str, bytes | None]] = []
        for delta, key, value, stamp in zip(deltas, keys, values, stamps, strict=True):
            append(delta, stamp, key, value, none)
    else:
        for delta, key, value, stamp, hdrs in zip(
            deltas, keys, values, stamps, header_column.to_pylist(), strict=True
        ):
            pairs = [(h["key"], h["value"]) for h in hdrs] if hdrs else []
            append(delta, stamp, key, value, pairs)
    out = builder.build()
    if log_append_time:
        (attributes,) = struct.unpack_from(">h", out, 21)
        struct.pack_into(">h", out, 21, attributes | TIMESTAMP_TYPE_BIT)
        struct.pack_into(">I", out, 17, crc32c(memoryview(out)[CRC_START:]))
    struct.pack_into(">q", out, 0, base_offset)
    struct.pack_into(">i", out, 12, leader_epoch)
    return bytes(out)


def warm_up() -> None:
    """Decode and encode one small batch, so the first client request does not pay
    for the imports that pyarrow does lazily on its first conversion from Python
    objects (it loads pandas, about half a second)."""
    builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 0x7FFFFFFF)
    builder.append(0, 0, b"k", b"v", [("h", b"v")])
    decoded = decode_batch(memoryview(bytes(builder.build())))
    encode_batch(decoded.records.append_column("offset", pa.array([0], pa.int64())))


def encode_control_batch(
    offset: int, producer_id: int, producer_epoch: int, committed: bool, timestamp_ms: int = 0
) -> bytes:
    """A control batch (Kafka's transaction marker) at ``offset``: one record whose key
    is (version 0, type 1 = commit / 0 = abort) and value (version 0, coordinator
    epoch 0).  Consumers skip it and move past its offset."""
    builder = DefaultRecordBatchBuilder(2, 0, 1, producer_id, producer_epoch, -1, 0x7FFFFFFF)
    key = struct.pack(">hh", 0, 1 if committed else 0)
    value = struct.pack(">hi", 0, 0)
    builder.append(0, timestamp_ms, key, value, [])
    out = builder.build()
    (attributes,) = struct.unpack_from(">h", out, 21)
    struct.pack_into(">h", out, 21, attributes | CONTROL_BIT | TRANSACTIONAL_BIT)
    struct.pack_into(">I", out, 17, crc32c(memoryview(out)[CRC_START:]))
    struct.pack_into(">q", out, 0, offset)
    return bytes(out)
