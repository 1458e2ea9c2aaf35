"""Fetching a consumer's records through its backend (kafka-python's ``Fetcher``).

The fetcher reads the assigned, unpaused partitions of a ``SubscriptionState``
from their positions: it fills missing positions (the group's committed offset,
else the offset reset policy), fetches through the backend (the transport),
buffers what a fetch returned beyond the poll's limit, hands out Arrow batches
round-robin across partitions, advances positions past what it hands out, and
resets a position that is out of range.  It also turns those batches into
``ConsumerRecord`` objects and answers offset lookups (earliest, latest, by time).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from sparklog.client.subscription_state import SubscriptionState
from sparklog.client.transports import Backend
from sparklog.client.types import (
    CREATE_TIME,
    LOG_APPEND_TIME,
    ConsumerRecord,
    OffsetAndTimestamp,
    TopicPartition,
)
from sparklog.errors import OffsetOutOfRangeError

log = logging.getLogger(__name__)

Deserializer = Callable[[bytes], Any]
#: adds ``amount`` to the consumer's counter ``name`` (e.g. "fetch-total")
Counter = Callable[[str, int], None]


class Fetcher:
    """Fetches records for the positions of ``subscriptions`` through ``backend``.

    ``group_id`` (None without a group) is where missing positions' committed
    offsets are looked up; ``count`` adds to the consumer's fetch and byte counters.
    """

    def __init__(
        self,
        backend: Backend,
        subscriptions: SubscriptionState,
        *,
        group_id: str | None,
        fetch_max_bytes: int,
        fetch_max_wait_ms: int,
        isolation_level: str,
        key_deserializer: Deserializer | None,
        value_deserializer: Deserializer | None,
        count: Counter,
    ) -> None:
        self._backend = backend
        self._subscriptions = subscriptions
        self._group_id = group_id
        self._fetch_max_bytes = fetch_max_bytes
        self._fetch_max_wait_ms = fetch_max_wait_ms
        self._isolation_level = isolation_level
        self._key_deserializer = key_deserializer
        self._value_deserializer = value_deserializer
        self._count = count
        #: per partition, batches fetched and not yet handed out (offset column first)
        self._buffered: dict[TopicPartition, deque[pa.RecordBatch]] = {}
        #: where the round-robin over fetchable partitions starts next
        self._rotation = 0
        self._timestamp_types: dict[str, int] = {}

    # -- positions -------------------------------------------------------------------
    def update_positions(self) -> None:
        """Give each assigned partition without a position one: committed, else reset."""
        missing = self._subscriptions.missing_positions()
        if not missing:
            return
        committed = self._backend.fetch_offsets(self._group_id) if self._group_id else {}
        for tp in missing:
            found = committed.get(tp)
            if found is not None and found.offset >= 0:
                self._subscriptions.seek(tp, found.offset)
            else:
                self.reset_offset(tp)

    def reset_offset(self, tp: TopicPartition, error: OffsetOutOfRangeError | None = None) -> int:
        """Move ``tp`` to the earliest or latest offset by the reset policy; the new position.

        With the policy "error", raises ``error`` (or OffsetOutOfRangeError) instead.
        """
        policy = self._subscriptions.offset_reset_policy
        if policy == "error":
            raise error or OffsetOutOfRangeError(
                f"no committed offset for {tp} and auto_offset_reset=error"
            )
        offset = self.list_offset(tp, policy)
        self._subscriptions.seek(tp, offset)
        return offset

    def list_offset(self, tp: TopicPartition, spec: str | int) -> int:
        """The offset of ``tp`` at ``spec``: "earliest", "latest" or a timestamp in ms."""
        return self._backend.list_offsets(tp.topic, tp.partition, spec)

    def offset_for_time(self, tp: TopicPartition, timestamp_ms: int) -> OffsetAndTimestamp | None:
        """The earliest record of ``tp`` stamped at or after ``timestamp_ms`` (None if none)."""
        offset = self.list_offset(tp, timestamp_ms)
        end = self.list_offset(tp, "latest")
        return None if offset >= end else self._offset_and_timestamp(tp, offset)

    def _offset_and_timestamp(self, tp: TopicPartition, offset: int) -> OffsetAndTimestamp:
        found = self._backend.fetch(tp.topic, tp.partition, offset, max_bytes=1, max_wait_ms=0)
        for batch in found.batches:
            offsets = batch.column(batch.schema.names.index("offset")).to_pylist()
            if offset in offsets:
                stamp = batch.column(batch.schema.names.index("timestamp"))[offsets.index(offset)]
                millis = stamp.cast(pa.int64()).as_py() if stamp.is_valid else -1
                return OffsetAndTimestamp(offset, millis)
        return OffsetAndTimestamp(offset, -1)

    # -- buffers ---------------------------------------------------------------------
    def discard(self, tp: TopicPartition) -> None:
        """Drop what is buffered for ``tp`` (its position moved)."""
        self._buffered.pop(tp, None)

    def keep_only(self, partitions: set[TopicPartition]) -> None:
        """Drop what is buffered for partitions not in ``partitions`` (no longer assigned)."""
        self._buffered = {tp: b for tp, b in self._buffered.items() if tp in partitions}

    # -- fetching --------------------------------------------------------------------
    def take(self, limit: int) -> list[pa.RecordBatch]:
        """Up to ``limit`` records as batches with topic and partition columns, positions advanced.

        Partitions are visited round-robin (a different first one each call);
        each is served from its buffer, else fetched once.
        """
        self.update_positions()
        active = self._subscriptions.fetchable_partitions()
        if not active:
            return []
        self._rotation = (self._rotation + 1) % len(active)
        order = active[self._rotation :] + active[: self._rotation]
        out: list[pa.RecordBatch] = []
        taken = 0
        for tp in order:
            if taken >= limit:
                break
            queue = self._buffered.get(tp)
            if not queue:
                queue = self._fetch(tp, len(active))
            while queue and taken < limit:
                batch = queue.popleft()
                if batch.num_rows > limit - taken:
                    queue.appendleft(batch.slice(limit - taken))
                    batch = batch.slice(0, limit - taken)
                if batch.num_rows:
                    out.append(_with_source(batch, tp))
                    taken += batch.num_rows
                    next_offset = int(batch.column(0)[batch.num_rows - 1].as_py()) + 1
                    self._subscriptions.seek(tp, next_offset)
        return out

    def _fetch(self, tp: TopicPartition, active_count: int) -> deque[pa.RecordBatch]:
        """Fetch ``tp`` from its position into its buffer (waits only if it is the one active)."""
        position = self._subscriptions.position(tp)
        wait_ms = self._fetch_max_wait_ms if active_count == 1 else 0
        try:
            result = self._backend.fetch(
                tp.topic,
                tp.partition,
                position,
                max_bytes=self._fetch_max_bytes,
                max_wait_ms=wait_ms,
                isolation_level=self._isolation_level,
            )
        except OffsetOutOfRangeError as exc:
            reset = self.reset_offset(tp, exc)
            log.warning("offset %d of %s is out of range; reset to %d", position, tp, reset)
            return deque()
        queue = deque(b for b in result.batches if b.num_rows)
        if not queue and position < result.high_watermark:
            # nothing readable below the high watermark (the last stable offset when
            # read_committed): transaction markers or aborted records; move past them
            self._subscriptions.seek(tp, result.high_watermark)
        self._buffered[tp] = queue
        if result.high_watermark >= 0:
            self._subscriptions.record_highwater(tp, result.high_watermark)
        self._count("fetch-total", 1)
        self._count("bytes-consumed-total", sum(b.nbytes for b in queue))
        return queue

    # -- records ---------------------------------------------------------------------
    def records(self, batch: pa.RecordBatch) -> list[ConsumerRecord]:
        """The records of one batch ``take`` returned, keys and values deserialized."""
        topic = batch.column(0)[0].as_py()
        return _records(
            batch, self._timestamp_type(topic), self._key_deserializer, self._value_deserializer
        )

    def _timestamp_type(self, topic: str) -> int:
        cached = self._timestamp_types.get(topic)
        if cached is None:
            append_time = self._backend.topic_layout(topic).log_append_time
            cached = self._timestamp_types[topic] = LOG_APPEND_TIME if append_time else CREATE_TIME
        return cached


def _with_source(batch: pa.RecordBatch, tp: TopicPartition) -> pa.RecordBatch:
    """``batch`` with the topic and partition as its first two columns."""
    n = batch.num_rows
    return pa.RecordBatch.from_arrays(
        [
            pa.repeat(pa.scalar(tp.topic), n),
            pa.repeat(pa.scalar(tp.partition, pa.int32()), n),
            *batch.columns,
        ],
        names=["topic", "partition", *batch.schema.names],
    )


def _records(
    batch: pa.RecordBatch,
    timestamp_type: int,
    key_deserializer: Deserializer | None = None,
    value_deserializer: Deserializer | None = None,
) -> list[ConsumerRecord]:
    """One ConsumerRecord per row of a ``_with_source`` batch."""
    columns = batch.schema.names
    topics = batch.column(columns.index("topic")).to_pylist()
    parts = batch.column(columns.index("partition")).to_pylist()
    offsets = batch.column(columns.index("offset")).to_pylist()
    keys = batch.column(columns.index("key")).to_pylist()
    values = batch.column(columns.index("value")).to_pylist()
    stamps = batch.column(columns.index("timestamp")).cast(pa.int64()).to_pylist()
    headers = batch.column(columns.index("headers"))
    head_rows = (
        [None] * batch.num_rows if headers.null_count == batch.num_rows else headers.to_pylist()
    )
    out = []
    for t, p, o, ts, k, v, hs in zip(
        topics, parts, offsets, stamps, keys, values, head_rows, strict=True
    ):
        out.append(
            ConsumerRecord(
                t,
                p,
                o,
                -1 if ts is None else ts,  # Kafka's "no timestamp"
                timestamp_type,
                k if k is None or key_deserializer is None else key_deserializer(k),
                v if v is None or value_deserializer is None else value_deserializer(v),
                [(h["key"], h["value"]) for h in hs] if hs else [],
                None,
                -1 if k is None else len(k),
                -1 if v is None else len(v) if isinstance(v, bytes) else -1,
            )
        )
    return out
