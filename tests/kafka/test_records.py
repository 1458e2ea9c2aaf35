"""The v2 record batch codec (broker_lite/kafka/records.py) against aiokafka's own
reader and builder, and its refusals of damaged batches whose CRC is right."""

from __future__ import annotations

import struct

import pyarrow as pa
import pytest
from aiokafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from crc32c import crc32c

from sparklog.broker_lite.kafka.records import CRC_START, decode_batch, encode_batch, split_batches
from sparklog.errors import CorruptMessageError

RECORDS = [
    (b"k0", b"v0", 1_700_000_000_000, [("trace", b"t0"), ("empty", None)]),
    (None, b"v1", 1_700_000_000_005, []),
    (b"k2", None, 1_699_999_999_990, []),  # a tombstone, a timestamp before the first
    (b"", b"", 1_700_000_000_007, [("\u00e9t\u00e9", b"")]),
]
CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def client_batch(codec: int = 0, records: list = RECORDS) -> bytes:  # type: ignore[type-arg]
    """A batch as a Kafka producer sends it (aiokafka's builder)."""
    builder = DefaultRecordBatchBuilder(2, codec, 0, 7, 1, 40, 0x7FFFFFFF)
    for delta, (key, value, stamp, headers) in enumerate(records):
        builder.append(delta, stamp, key, value, headers)
    return bytes(builder.build())


def with_crc(batch: bytearray) -> bytes:
    """The batch with its length and CRC made right again after an edit."""
    struct.pack_into(">i", batch, 8, len(batch) - 12)
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[CRC_START:])))
    return bytes(batch)


@pytest.mark.parametrize("codec", list(CODECS))
def test_decode_gives_what_the_producer_sent(codec: str) -> None:
    (view,) = split_batches(client_batch(CODECS[codec]))
    decoded = decode_batch(view)
    assert decoded.codec == codec
    assert (decoded.count, decoded.producer_id, decoded.producer_epoch) == (4, 7, 1)
    assert decoded.base_sequence == 40
    rows = decoded.records.to_pylist()
    assert [r["key"] for r in rows] == [r[0] for r in RECORDS]
    assert [r["value"] for r in rows] == [r[1] for r in RECORDS]
    stamps = decoded.records.column("timestamp").cast(pa.int64()).to_pylist()
    assert stamps == [r[2] for r in RECORDS]
    assert [[(h["key"], h["value"]) for h in r["headers"]] for r in rows] == [r[3] for r in RECORDS]


@pytest.mark.parametrize("log_append_time", [False, True])
def test_encode_is_read_back_by_a_kafka_client(log_append_time: bool) -> None:
    decoded = decode_batch(next(split_batches(client_batch())))
    stored = decoded.records.append_column("offset", pa.array(range(1000, 1004), pa.int64()))
    encoded = encode_batch(stored, log_append_time=log_append_time, leader_epoch=3)
    reader = DefaultRecordBatch(encoded)
    assert reader.validate_crc()
    assert (reader.base_offset, reader.timestamp_type) == (1000, int(log_append_time))
    assert struct.unpack_from(">i", encoded, 12) == (3,)  # partition leader epoch
    assert reader.max_timestamp == max(r[2] for r in RECORDS)
    got = [(r.offset, r.key, r.value, r.headers, r.timestamp) for r in reader]
    assert [g[:4] for g in got] == [
        (1000 + i, key, value, headers) for i, (key, value, _, headers) in enumerate(RECORDS)
    ]
    if log_append_time:  # Kafka's readers give every record the batch's max timestamp
        assert {g[4] for g in got} == {reader.max_timestamp}
    else:
        assert [g[4] for g in got] == [r[2] for r in RECORDS]


def test_batch_without_headers_has_empty_header_lists() -> None:
    plain = [(None, b"v" * 100, 1_700_000_000_000 + i, []) for i in range(50)]
    decoded = decode_batch(next(split_batches(client_batch(0, plain))))
    assert decoded.records.column("headers").to_pylist() == [[]] * 50


def test_record_cut_short_is_corrupt_even_with_a_right_crc() -> None:
    batch = bytearray(client_batch())
    with pytest.raises(CorruptMessageError):
        decode_batch(memoryview(with_crc(batch[:-3])))


def test_fewer_records_than_the_header_claims_is_corrupt() -> None:
    batch = bytearray(client_batch())
    struct.pack_into(">i", batch, 57, 5)  # record count
    struct.pack_into(">i", batch, 23, 4)  # last offset delta, to match
    with pytest.raises(CorruptMessageError):
        decode_batch(memoryview(with_crc(batch)))


def test_header_key_that_is_not_utf8_is_corrupt() -> None:
    batch = bytearray(client_batch(0, [(None, b"v", 1, [("ab", b"x")])]))
    at = bytes(batch).index(b"ab")
    batch[at : at + 2] = b"\xff\xfe"
    with pytest.raises(CorruptMessageError, match="UTF-8"):
        decode_batch(memoryview(with_crc(batch)))


def test_trailing_bytes_after_the_last_record_are_corrupt() -> None:
    batch = bytearray(client_batch()) + b"\x00\x00"
    with pytest.raises(CorruptMessageError):
        decode_batch(memoryview(with_crc(batch)))
