"""Message sets of the old formats (magic 0 and 1) to and from record batches (magic 2).

Produce v0-2 and Fetch v0-3 carry message sets (kafka-go 0.2 and other clients
from before Kafka 0.11 speak only those).  The listener stores and serves
record batch v2 only, so, as Kafka does for old clients, a produced message set
is up-converted to one uncompressed v2 batch before the usual produce path, and
fetched v2 batches are down-converted to an uncompressed message set of the
version's magic (0 for Fetch v0-1, 1 for v2-3); headers (which the old formats
cannot carry) are dropped, and control batches skipped.  aiokafka's compiled
record readers and builders do the byte work.
"""

from __future__ import annotations

from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.legacy_records import LegacyRecordBatchBuilder
from aiokafka.record.memory_records import MemoryRecords

from sparklog.clock import now_ms
from sparklog.errors import CorruptMessageError

#: no size limit inside one request (the frame limit applies before)
_UNBOUNDED = 0x7FFFFFFF


def to_record_batch(message_set: bytes | memoryview) -> bytes:
    """A produced message set (magic 0/1, any codec aiokafka reads) as one v2 batch.

    Magic 0 messages have no timestamp: they get the time of conversion, as they
    would get the broker's clock as LogAppendTime in Kafka.
    """
    try:
        records = MemoryRecords(bytes(message_set))
        builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, _UNBOUNDED)
        now = now_ms()
        count = 0
        while records.has_next():
            batch = records.next_batch()
            if batch is None:
                break
            if not batch.validate_crc():
                raise CorruptMessageError("a message's CRC does not match its bytes")
            for record in batch:
                stamp = record.timestamp
                builder.append(
                    count, stamp if stamp is not None and stamp >= 0 else now,
                    record.key, record.value, [],
                )  # fmt: skip
                count += 1
    except CorruptMessageError:
        raise
    except Exception as exc:  # aiokafka raises several types for bad bytes
        raise CorruptMessageError(f"message set does not parse: {exc}") from None
    if not count:
        raise CorruptMessageError("the message set holds no message")
    return bytes(builder.build())


def to_message_set(batches: bytes | memoryview | None, magic: int) -> bytes:
    """Fetched v2 batches as an uncompressed message set of ``magic`` (0 or 1)."""
    if not batches:
        return b""
    records = MemoryRecords(bytes(batches))
    builder = LegacyRecordBatchBuilder(magic, 0, _UNBOUNDED)
    while records.has_next():
        batch = records.next_batch()
        if batch is None:
            break  # a partial batch at the end of a size-limited answer
        if batch.is_control_batch:
            continue
        for record in batch:
            stamp = record.timestamp if magic else None
            builder.append(record.offset, stamp, record.key, record.value)
    return bytes(builder.build())
