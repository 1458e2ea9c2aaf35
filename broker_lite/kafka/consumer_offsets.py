"""A read-only ``__consumer_offsets`` topic derived from the group logs.

Lag monitors built like Burrow consume Kafka's ``__consumer_offsets`` to learn
every group's committed offsets.  sparklog keeps those commits in each group's
own log (``storage/groups.py``), so this module serves a view of them in Kafka's
format (:mod:`~sparklog.broker_lite.kafka.offset_commit_format`) through
Metadata (an internal topic), ListOffsets and Fetch; nothing is stored for it.

How the view is made, so that every broker, before and after restarts, serves
the same records at the same offsets (a reader with a position neither skips
nor re-reads):

* **partitions**: Kafka's default 50, a group in partition
  ``abs(javaHashCode(group)) % 50``, as Kafka places it (tools that compute a
  group's partition find it there);
* **records**: one per committed (group, topic, partition): the group log's
  current offset and metadata with its commit time, i.e. the topic as Kafka's
  log compaction leaves it (a newer commit replaces the older record, a deleted
  offset or group leaves no record);
* **offsets**: a record's offset is computed from its commit time and its key,
  not counted: ``((commit_ms - EPOCH_MS) << SLOT_BITS) + slot``, where slot is
  the CRC-32 of (group, topic, partition) in ``SLOT_BITS`` bits, so a record
  keeps its offset whatever else is committed or replaced in that millisecond
  (two keys of one partition and millisecond with the same slot, about one in
  a million pairs, take the next free slots in key order).  Offsets therefore
  have gaps, as a compacted Kafka topic has; a new commit always lands after
  every record served before it;
* **settling**: a record is served only once its commit time is
  ``consumer_offsets_settle_ms`` old (broker key, default 5 s), and the high
  watermark is the first offset of that instant, so nothing can later appear
  below a position a reader has reached.  This holds while a commit reaches the
  root within that time less the view's cache period (``CACHE_MS``, at most
  half the settle time) of its stamp and the brokers' clocks
  agree within that margin (the group log stamps commits with the committing
  broker's clock);
* **log start offset**: 0, as a compacted topic's; earliest is 0.

Writes are refused with ``INVALID_TOPIC_EXCEPTION``, as Kafka refuses a client's
produce to an internal topic (``Cannot append to internal topic``); see
:func:`refuse_write`.
"""

from __future__ import annotations

import threading
import time
import uuid
import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa

from sparklog.broker_lite.kafka.offset_commit_format import OffsetCommit
from sparklog.broker_lite.kafka.records import encode_batch
from sparklog.clock import now_ms
from sparklog.errors import (
    InvalidTopicError,
    SparklogError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from sparklog.storage.records import HEADER_TYPE, TIMESTAMP_TYPE

if TYPE_CHECKING:
    from sparklog.broker_lite.kafka.context import BrokerView


TOPIC = "__consumer_offsets"
#: Kafka's default ``offsets.topic.num.partitions``
PARTITIONS = 50
#: a fixed id: every broker names the derived topic alike (Fetch v13+ by id)
TOPIC_ID = uuid.uuid5(uuid.NAMESPACE_URL, "sparklog:topic:__consumer_offsets")
#: offsets count milliseconds from here (2020-01-01T00:00:00Z)
EPOCH_MS = 1_577_836_800_000
#: records one partition can hold per millisecond of commit time
SLOT_BITS = 20
#: the groups' commits are read again at most this often (and at most every half
#: settle time, so a commit that reached the root in time is in the view when served)
CACHE_MS = 1_000
#: what DescribeConfigs answers for the view (read-only): Kafka's topic is compacted
CONFIGS = (("cleanup.policy", "compact"),)
#: a single-partition fetch at the head re-checks this often while it long-polls
POLL_S = 0.1


def is_topic(name: str | None) -> bool:
    return name == TOPIC


def partition_for(group: str) -> int:
    """Kafka's ``Utils.abs(groupId.hashCode()) % 50`` (Java's String.hashCode over
    UTF-16 code units; ``Utils.abs`` maps Integer.MIN_VALUE to 0)."""
    h = 0
    raw = group.encode("utf-16-be")
    for i in range(0, len(raw), 2):
        h = (31 * h + ((raw[i] << 8) | raw[i + 1])) & 0xFFFFFFFF
    if h >= 0x80000000:
        h -= 0x100000000
    return 0 if h == -(2**31) else abs(h) % PARTITIONS


def offset_at(commit_ms: int, slot: int = 0) -> int:
    """The first offset of records committed at ``commit_ms``, plus ``slot``."""
    return (max(commit_ms - EPOCH_MS, 0) << SLOT_BITS) + slot


def slot_of(commit: OffsetCommit) -> int:
    """A key's place among the records of one millisecond (stable: its own hash)."""
    key = f"{commit.group}\0{commit.topic}\0{commit.partition}".encode()
    return zlib.crc32(key) & ((1 << SLOT_BITS) - 1)


def high_watermark(settle_ms: int, now: int | None = None) -> int:
    """Every record below this offset is settled (final)."""
    return offset_at((now_ms() if now is None else now) - settle_ms)


@dataclass(frozen=True)
class Record:
    """One derived record: its offset and the commit it carries."""

    offset: int
    commit: OffsetCommit


class _View:
    """Every group's current commits, per derived partition, read at most every
    ``CACHE_MS`` (one listing of the groups, then each group's log)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.read_at = -float(10**18)
        self.partitions: dict[int, list[Record]] = {}

    def records(self, broker: BrokerView, partition: int, max_age_ms: float) -> list[Record]:
        with self.lock:
            if time.monotonic() * 1000 - self.read_at >= max_age_ms:
                self.partitions = _derive(broker)
                self.read_at = time.monotonic() * 1000
            return self.partitions.get(partition, [])


def _derive(broker: BrokerView) -> dict[int, list[Record]]:
    groups = broker.root.groups
    commits: dict[int, list[OffsetCommit]] = {}
    for group in groups.list_groups():
        try:
            found = groups.fetch(group)
        except SparklogError:
            continue  # a group being deleted or unreadable: left out of this round
        into = commits.setdefault(partition_for(group), [])
        for (topic, partition), held in found.items():
            into.append(
                OffsetCommit(group, topic, partition, held.offset, held.metadata, held.commit_ms)
            )
    out: dict[int, list[Record]] = {}
    for partition, found_commits in commits.items():
        found_commits.sort(key=lambda c: (c.commit_ms, c.group, c.topic, c.partition))
        records: list[Record] = []
        taken: set[int] = set()
        for c in found_commits:
            slot = slot_of(c)
            while offset_at(c.commit_ms, slot) in taken and slot < (1 << SLOT_BITS) - 1:
                slot += 1  # a collision: the next free slot, in key order
            offset = offset_at(c.commit_ms, slot)
            if offset not in taken:
                taken.add(offset)
                records.append(Record(offset, c))
        records.sort(key=lambda r: r.offset)
        out[partition] = records
    return out


_VIEWS: dict[int, _View] = {}
_VIEWS_LOCK = threading.Lock()


def _view(broker: BrokerView) -> _View:
    with _VIEWS_LOCK:
        return _VIEWS.setdefault(id(broker), _View())


def _check(partition: int) -> None:
    if not 0 <= partition < PARTITIONS:
        raise UnknownTopicOrPartitionError(
            f"{TOPIC} has partitions 0-{PARTITIONS - 1}; no partition {partition}"
        )


def settled(broker: BrokerView, partition: int, now: int | None = None) -> tuple[list[Record], int]:
    """The partition's records below the high watermark, and the high watermark."""
    _check(partition)
    settle_ms = int(broker.config.consumer_offsets_settle_ms)
    hwm = high_watermark(settle_ms, now)
    found = _view(broker).records(broker, partition, min(CACHE_MS, settle_ms / 2))
    return [r for r in found if r.offset < hwm], hwm


def _batches(records: list[Record], max_bytes: int) -> bytes:
    """Records as v2 batches (one per commit millisecond: offset deltas stay small),
    up to ``max_bytes`` (at least one batch)."""
    out: list[bytes] = []
    size = 0
    at = 0
    while at < len(records):
        end = at + 1
        first_ms = records[at].commit.commit_ms
        while end < len(records) and records[end].commit.commit_ms == first_ms:
            end += 1
        chunk = records[at:end]
        batch = pa.record_batch(
            {
                "offset": pa.array([r.offset for r in chunk], pa.int64()),
                "key": pa.array([r.commit.key() for r in chunk], pa.binary()),
                "value": pa.array([r.commit.value() for r in chunk], pa.binary()),
                "timestamp": pa.array([r.commit.commit_ms for r in chunk], pa.int64()).cast(
                    TIMESTAMP_TYPE
                ),
                "headers": pa.nulls(len(chunk), HEADER_TYPE),
            }
        )
        encoded = encode_batch(batch)
        out.append(encoded)
        size += len(encoded)
        at = end
        if size >= max_bytes:
            break
    return b"".join(out)


def read(
    broker: BrokerView, partition: int, offset: int, max_bytes: int, wait_ms: int
) -> tuple[int, int, int, bytes, int]:
    """Fetch's (error, high watermark, log start offset, records, last stable offset)
    for one partition; waits up to ``wait_ms`` for a record at or after ``offset``."""
    deadline = time.monotonic() + wait_ms / 1000
    while True:
        try:
            records, hwm = settled(broker, partition)
        except SparklogError as exc:
            from sparklog.broker_lite.kafka.messages import errno_of

            return errno_of(exc), -1, -1, b"", -1
        wanted = [r for r in records if r.offset >= offset]
        if wanted or time.monotonic() >= deadline or broker.stopping:
            return 0, hwm, 0, _batches(wanted, max(max_bytes, 1)), hwm
        time.sleep(min(POLL_S, max(deadline - time.monotonic(), 0)))


LATEST, EARLIEST, MAX_TIMESTAMP = -1, -2, -3


def list_offset(broker: BrokerView, partition: int, timestamp: int) -> tuple[int, int]:
    """ListOffsets' (offset, timestamp) for one partition."""
    records, hwm = settled(broker, partition)
    if timestamp == LATEST:
        return hwm, -1
    if timestamp < 0 and timestamp != MAX_TIMESTAMP:
        return 0, -1  # earliest and earliest-local: the log start
    if timestamp == MAX_TIMESTAMP:
        found = records[-1:] if records else []
    else:
        found = [r for r in records if r.commit.commit_ms >= timestamp][:1]
    if not found:
        return -1, -1
    return found[0].offset, found[0].commit.commit_ms


def leader_of(partition: int, brokers: list[int]) -> int:
    """Any broker serves the view; partitions are spread over the live ones."""
    ordered = sorted(brokers)
    return ordered[partition % len(ordered)] if ordered else -1


def refuse_write(name: str | None, what: str) -> None:
    """Raise Kafka's answer to a write to the derived topic (INVALID_TOPIC_EXCEPTION)."""
    if is_topic(name):
        raise InvalidTopicError(
            f"{TOPIC} is an internal, read-only topic (a view of the groups' commit logs); "
            f"{what} is refused; commit offsets with OffsetCommit"
        )


def refuse_create(name: str | None) -> None:
    """CreateTopics of the derived topic: it exists (TOPIC_ALREADY_EXISTS), as in Kafka."""
    if is_topic(name):
        raise TopicAlreadyExistsError(f"{TOPIC} exists (an internal, read-only topic)")
