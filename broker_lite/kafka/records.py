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
from collections.abc import Iterator
from dataclasses import dataclass

import cramjam
import pyarrow as pa
from crc32c import crc32c

from sparklog.errors import (
    CorruptMessageError,
    MessageSizeTooLargeError,
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


def _read_varint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    """Zig-zag varint (Kafka's signed varint/varlong) at ``pos``: (value, next pos)."""
    shift = 0
    raw = 0
    while True:
        try:
            byte = buf[pos]
        except IndexError:
            raise CorruptMessageError("record ends inside a varint") from None
        pos += 1
        raw |= (byte & 0x7F) << shift
        if not byte & 0x80:
            break
        shift += 7
        if shift > 63:
            raise CorruptMessageError("varint longer than 10 bytes")
    return (raw >> 1) ^ -(raw & 1), pos


def _write_varint(out: bytearray, value: int) -> None:
    raw = (value << 1) ^ (value >> 63)
    raw &= 0xFFFFFFFFFFFFFFFF
    while raw >= 0x80:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)


def _varint_bytes(value: int) -> bytes:
    out = bytearray()
    _write_varint(out, value)
    return bytes(out)


#: Zig-zag varints of small values, precomputed for the encoder's hot loop.
_SMALL_VARINTS = {v: _varint_bytes(v) for v in range(-1, 1 << 14)}


def _read_bytes(buf: bytes | memoryview, pos: int) -> tuple[bytes | None, int]:
    length, pos = _read_varint(buf, pos)
    if length < 0:
        return None, pos
    end = pos + length
    if end > len(buf):
        raise CorruptMessageError("record field runs past the end of the batch")
    return bytes(buf[pos:end]), end


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


def decode_batch(view: memoryview, max_record_bytes: int | None = None) -> DecodedBatch:
    """One v2 batch (from :func:`split_batches`) as Arrow records; the CRC is checked."""
    (
        _base_offset,
        _length,
        _epoch,
        _magic,
        crc,
        attributes,
        last_offset_delta,
        base_ts,
        max_ts,
        producer_id,
        producer_epoch,
        base_sequence,
        count,
    ) = HEADER.unpack_from(view, 0)
    if crc32c(view[CRC_START:]) != crc:
        raise CorruptMessageError("record batch CRC32C does not match its contents")
    if count < 0 or count > len(view):
        raise CorruptMessageError(f"record batch claims {count} records")
    codec = attributes & 0x07
    if codec not in CODECS:
        raise UnsupportedCompressionTypeError(
            f"compression codec {codec} is not accepted; accepted: 0-4 (none, gzip, snappy, "
            "lz4, zstd)"
        )
    body: bytes | memoryview = view[HEADER_BYTES:]
    if codec:
        body = _decompress(codec, bytes(body))
    keys, values, stamps, headers = _decode_records(bytes(body), count, max_record_bytes)
    stamps = [base_ts + delta for delta in stamps]
    if count and last_offset_delta != count - 1:
        raise CorruptMessageError(
            f"record batch last offset delta {last_offset_delta} does not match {count} records"
        )
    del max_ts
    records = pa.record_batch(
        [
            pa.array(keys, pa.binary()),
            pa.array(values, pa.binary()),
            pa.array(stamps, pa.int64()).cast(TIMESTAMP_TYPE),
            pa.array(headers, HEADER_TYPE),
        ],
        names=["key", "value", "timestamp", "headers"],
    )
    return DecodedBatch(
        records=records,
        count=count,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        codec=CODECS[codec],
        log_append_time=bool(attributes & TIMESTAMP_TYPE_BIT),
        transactional=bool(attributes & TRANSACTIONAL_BIT),
        control=bool(attributes & CONTROL_BIT),
    )


def _decode_records(
    body: bytes, count: int, max_record_bytes: int | None
) -> tuple[list[bytes | None], list[bytes | None], list[int], list[list[dict[str, object]]]]:
    """keys, values, timestamp deltas and headers of ``count`` records (hot loop).

    Varints are zig-zag; the common one-byte case is decoded inline.
    """
    keys: list[bytes | None] = []
    values: list[bytes | None] = []
    deltas: list[int] = []
    headers: list[list[dict[str, object]]] = []
    size = len(body)
    pos = 0
    read = _read_varint
    try:
        for _ in range(count):
            b = body[pos]
            if b < 0x80:
                length, pos = (b >> 1) ^ -(b & 1), pos + 1
            elif body[pos + 1] < 0x80:
                raw = (b & 0x7F) | (body[pos + 1] << 7)
                length, pos = (raw >> 1) ^ -(raw & 1), pos + 2
            else:
                length, pos = read(body, pos)
            end = pos + length
            if length < 0 or end > size:
                raise CorruptMessageError("record length runs past the end of the batch")
            if max_record_bytes is not None and length > max_record_bytes:
                raise MessageSizeTooLargeError(
                    f"record of {length} bytes exceeds max.message.bytes={max_record_bytes}"
                )
            pos += 1  # record attributes (unused)
            b = body[pos]
            if b < 0x80:
                delta, pos = (b >> 1) ^ -(b & 1), pos + 1
            elif body[pos + 1] < 0x80:
                raw = (b & 0x7F) | (body[pos + 1] << 7)
                delta, pos = (raw >> 1) ^ -(raw & 1), pos + 2
            else:
                delta, pos = read(body, pos)
            while body[pos] >= 0x80:  # offset delta: implied by the position, skipped
                pos += 1
            pos += 1
            b = body[pos]
            if b < 0x80:
                n, pos = (b >> 1) ^ -(b & 1), pos + 1
            elif body[pos + 1] < 0x80:
                raw = (b & 0x7F) | (body[pos + 1] << 7)
                n, pos = (raw >> 1) ^ -(raw & 1), pos + 2
            else:
                n, pos = read(body, pos)
            if n < 0:
                key = None
            else:
                key = body[pos : pos + n]
                pos += n
            b = body[pos]
            if b < 0x80:
                n, pos = (b >> 1) ^ -(b & 1), pos + 1
            elif body[pos + 1] < 0x80:
                raw = (b & 0x7F) | (body[pos + 1] << 7)
                n, pos = (raw >> 1) ^ -(raw & 1), pos + 2
            else:
                n, pos = read(body, pos)
            if n < 0:
                value = None
            else:
                value = body[pos : pos + n]
                pos += n
            b = body[pos]
            if b < 0x80:
                n_headers, pos = (b >> 1) ^ -(b & 1), pos + 1
            else:
                n_headers, pos = read(body, pos)
            row: list[dict[str, object]] = []
            if n_headers:
                if n_headers < 0 or n_headers > length:
                    raise CorruptMessageError(f"record claims {n_headers} headers")
                for _h in range(n_headers):
                    hkey, pos = _read_bytes(body, pos)
                    hvalue, pos = _read_bytes(body, pos)
                    if hkey is None:
                        raise CorruptMessageError("record header with a null key")
                    try:
                        row.append({"key": hkey.decode(), "value": hvalue})
                    except UnicodeDecodeError:
                        raise CorruptMessageError("record header key is not UTF-8") from None
            if pos != end:
                raise CorruptMessageError("record length does not match its fields")
            keys.append(key)
            values.append(value)
            deltas.append(delta)
            headers.append(row)
    except IndexError:
        raise CorruptMessageError("record batch ends inside a record") from None
    if pos != size:
        raise CorruptMessageError("record batch has bytes after its last record")
    return keys, values, deltas, headers


def _value_bytes(column: pa.Array) -> list[bytes | None]:
    """Values as bytes: binary as is; a typed topic's struct values as JSON."""
    if pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type):
        return list(column.to_pylist())
    import json

    return [None if v is None else json.dumps(v, default=str).encode() for v in column.to_pylist()]


def encode_batch(
    batch: pa.RecordBatch, log_append_time: bool = False, leader_epoch: int = 0
) -> bytes:
    """Arrow records with an ``offset`` column (consecutive) as one uncompressed v2 batch."""
    offsets = batch.column("offset").to_pylist()
    keys = batch.column("key").to_pylist()
    values = _value_bytes(batch.column("value"))
    stamps = batch.column("timestamp").cast(pa.int64()).to_pylist()
    headers = batch.column("headers").to_pylist()
    base_offset = offsets[0]
    base_ts = min(stamps)
    parts: list[bytes] = []
    add = parts.append
    small = _SMALL_VARINTS
    null = b"\x01"  # varint -1
    for offset, key, value, stamp, hdrs in zip(offsets, keys, values, stamps, headers, strict=True):
        fields = [
            b"\x00",
            small.get(stamp - base_ts) or _varint_bytes(stamp - base_ts),
            small.get(offset - base_offset) or _varint_bytes(offset - base_offset),
        ]
        if key is None:
            fields.append(null)
        else:
            fields.append(small.get(len(key)) or _varint_bytes(len(key)))
            fields.append(key)
        if value is None:
            fields.append(null)
        else:
            fields.append(small.get(len(value)) or _varint_bytes(len(value)))
            fields.append(value)
        if hdrs:
            fields.append(_varint_bytes(len(hdrs)))
            for h in hdrs:
                hkey = h["key"].encode()
                fields.append(_varint_bytes(len(hkey)))
                fields.append(hkey)
                hvalue = h["value"]
                if hvalue is None:
                    fields.append(null)
                else:
                    fields.append(_varint_bytes(len(hvalue)))
                    fields.append(hvalue)
        else:
            fields.append(b"\x00")
        record = b"".join(fields)
        add(small.get(len(record)) or _varint_bytes(len(record)))
        add(record)
    body = b"".join(parts)
    attributes = TIMESTAMP_TYPE_BIT if log_append_time else 0
    tail = struct.pack(
        ">hiqqqhii",
        attributes,
        offsets[-1] - base_offset,
        base_ts,
        max(stamps),
        -1,
        -1,
        -1,
        len(offsets),
    )
    crc = crc32c(body, crc32c(tail))
    head = struct.pack(">qiibI", base_offset, 49 + len(body), leader_epoch, 2, crc)
    return head + tail + body
