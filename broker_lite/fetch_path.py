"""The broker's fetch path: long-poll fetches from the tail cache or the root; offsets."""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Collection

import pyarrow as pa

from sparklog import errors
from sparklog.broker_lite.broker_state import BrokerState
from sparklog.broker_lite.partition_state import PartitionState, storage_call
from sparklog.errors import InvalidRequestError, OffsetOutOfRangeError, SparklogError
from sparklog.storage.records import OFFSET_FIELD
from sparklog.storage.txn_markers import (
    check_isolation_level,
    committed_only,
    read_committed_from,
)
from sparklog.topic_partition import TopicPartition

log = logging.getLogger("sparklog.broker_lite.broker")


class FetchPath:
    """Fetches (tail cache first, then the root) and ListOffsets."""

    def __init__(self, state: BrokerState) -> None:
        self.state = state

    def fetch(
        self,
        topic_name: str,
        partition: int,
        offset: int,
        max_bytes: int,
        max_wait_ms: int,
        *,
        isolation_level: str = "read_uncommitted",
    ) -> tuple[list[pa.RecordBatch], int, int, pa.Schema]:
        """Records from ``offset`` (long-polling up to ``max_wait_ms`` at the head).

        Returns (batches with an offset column, high watermark, log start offset, schema).
        ``read_committed`` stops at the last stable offset and leaves out aborted
        transactions' records (the Kafka listener does its own, with markers); it
        answers the last stable offset as the high watermark, and an empty answer
        means nothing below it is visible (the reader may move there).
        """
        if check_isolation_level(isolation_level):
            return self._fetch_committed(topic_name, partition, offset, max_bytes, max_wait_ms)
        if not isinstance(offset, int) or isinstance(offset, bool):
            raise InvalidRequestError(f"offset {offset!r} is not an integer")
        if not isinstance(max_bytes, int) or max_bytes < 1:
            raise InvalidRequestError(f"max_bytes={max_bytes!r} is not accepted; accepted: >= 1")
        topic = self.state.topic(topic_name)
        st = self.state.partition_state(topic, partition)
        schema = pa.schema([OFFSET_FIELD, *topic.info.record_schema])
        wait_s = max(min(int(max_wait_ms), self.state.config.fetch_max_wait_ms), 0) / 1000
        refresh_s = self.state.config.fetch_refresh_ms / 1000
        deadline = time.monotonic() + wait_s
        refreshed = False
        while True:
            with st.lock:
                if not refreshed and (
                    offset >= st.log.high_watermark or offset < st.log.log_start_offset
                ):
                    # one probe of the shard log per fetch_refresh_ms, however many
                    # partitions of the shard idle consumers wait on
                    storage_call(lambda: st.refresh(refresh_s))
                    refreshed = True
                hwm, lso = st.log.high_watermark, st.log.log_start_offset
            if offset < lso or offset > hwm:
                raise OffsetOutOfRangeError(
                    f"offset {offset} is out of range for {topic_name}-{partition}; valid: "
                    f"[{lso}, {hwm}]",
                    log_start_offset=lso,
                    high_watermark=hwm,
                )
            if offset < hwm:
                batches = self.state.cache.get(st.key, offset, max_bytes)
                if batches is not None:
                    self.state.metrics.fetch_source.labels("cache").inc(len(batches))
                else:
                    batches = self._read_root(st, offset, hwm, max_bytes)
                    self.state.metrics.fetch_source.labels("root").inc(len(batches))
                self.state.metrics.fetch_records.labels(topic_name).inc(
                    sum(b.num_rows for b in batches)
                )
                self.state.metrics.fetch_bytes.labels(topic_name).inc(
                    sum(b.nbytes for b in batches)
                )
                return batches, hwm, lso, schema
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self.state.stop_requested.is_set():
                return [], hwm, lso, schema
            with st.changed:
                notified = st.changed.wait(min(remaining, refresh_s))
            if not notified:
                refreshed = False  # nothing of ours: look for other writers' commits

    def _fetch_committed(
        self, topic_name: str, partition: int, offset: int, max_bytes: int, max_wait_ms: int
    ) -> tuple[list[pa.RecordBatch], int, int, pa.Schema]:
        from sparklog.broker_lite.transactions.markers import transactions_view

        deadline = (
            time.monotonic() + max(min(max_wait_ms, self.state.config.fetch_max_wait_ms), 0) / 1000
        )
        while True:
            _hwm, last_stable, txn = transactions_view(self.state, topic_name, partition)
            wait_ms = 0 if offset >= last_stable else max_wait_ms
            batches, hwm, lso, schema = self.fetch(
                topic_name, partition, offset, max_bytes, wait_ms
            )
            if wait_ms:
                _hwm, last_stable, txn = transactions_view(self.state, topic_name, partition)
            stable = min(last_stable, hwm)
            visible = committed_only(batches, txn, stable)
            if not visible and batches:
                visible = read_committed_from(
                    lambda at: self.fetch(topic_name, partition, at, max_bytes, 0)[0],
                    offset,
                    txn,
                    stable,
                )
            remaining = deadline - time.monotonic()
            if visible or remaining <= 0 or self.state.stop_requested.is_set():
                return visible, stable, lso, schema
            # the next commit of this broker (a marker, a record) or a refresh period
            self.state.wait_for_commit(
                self.state.commits, min(remaining, self.state.config.fetch_refresh_ms / 1000)
            )

    def _read_root(
        self, st: PartitionState, offset: int, hwm: int, max_bytes: int
    ) -> list[pa.RecordBatch]:
        with st.reader_lock:
            for attempt in range(2):
                try:
                    if attempt or st.reader.high_watermark < hwm:
                        st.reader.refresh()
                    self.state.metrics.root_requests.labels("read").inc()
                    return list(st.reader.iter_batches(offset, hwm, max_bytes=max_bytes))
                except errors.OffsetOutOfRangeError:
                    if attempt:
                        raise
                except SparklogError:
                    raise
        return []

    def leader_epoch_end(self, topic_name: str, partition: int) -> tuple[int, int]:
        """(the partition's shard's leader epoch, its high watermark) from the root:
        Kafka's OffsetForLeaderEpoch answer for the current epoch."""
        topic = self.state.topic(topic_name)
        st = self.state.partition_state(topic, partition)
        with st.lock:
            storage_call(st.refresh)
            return int(st.log.leader_epoch), int(st.log.high_watermark)

    def list_offsets(self, topic_name: str, partition: int, spec: object) -> int:
        """The offset ``spec`` names: "earliest", "latest", "max_timestamp" or a timestamp
        in ms; anything else (the Flight wire brings any JSON value) INVALID_REQUEST."""
        topic = self.state.topic(topic_name)
        st = self.state.partition_state(topic, partition)
        with st.lock:
            # the log as held (a led partition's writes all pass here), re-read at most once
            # per fetch_refresh_ms for brokerless writers (Spark, embedded producers)
            storage_call(lambda: st.refresh(self.state.config.fetch_refresh_ms / 1000))
            if spec == "earliest":
                return int(st.log.log_start_offset)
            if spec == "latest":
                return int(st.log.high_watermark)
        if spec == "max_timestamp":
            with st.reader_lock:
                storage_call(st.reader.refresh)
                return int(storage_call(st.reader.offset_of_max_timestamp))
        if isinstance(spec, int) and not isinstance(spec, bool):
            with st.reader_lock:
                storage_call(st.reader.refresh)
                return int(storage_call(lambda: st.reader.offset_for_timestamp(spec)))
        raise InvalidRequestError(
            f"offset spec {spec!r} is not accepted; accepted: 'earliest', 'latest', "
            "'max_timestamp' or a "
            "timestamp in ms"
        )

    def high_watermarks(
        self, partitions: Collection[TopicPartition], *, led_from_memory: bool = False
    ) -> dict[TopicPartition, int | None]:
        """High watermarks for consumer lag, from this broker's cached topic handles.

        Each shard is looked at once however many of its partitions (and groups
        committed to them) are asked for, through the same shard log the broker
        writes and fetches with: a shard we lead is answered from memory (our
        writes all pass here) when ``led_from_memory`` (the lag metric); otherwise
        the shard's log is re-read unless it was seen at its head within
        ``fetch_refresh_ms``, as ListOffsets does, so a describe answers what a Kafka
        client's ListOffsets would.  Never a fresh log per group and partition.
        None: the topic or partition is unknown or unreadable.
        """
        refresh_ms = self.state.config.fetch_refresh_ms
        out: dict[TopicPartition, int | None] = {}
        looked_at: set[tuple[str, int]] = set()
        for tp in partitions:
            try:
                topic = self.state.topic(tp.topic)
                if not 0 <= tp.partition < topic.partitions:
                    out[tp] = None  # not (yet: the topics loop reloads) a partition of it
                    continue
                shard = (tp.topic, topic.info.shard_of(tp.partition))
                with self.state.lock:  # partition_state opens the topic's shard logs under it too
                    view = topic.view(topic.shard(shard[1]), tp.partition)
                if shard not in looked_at:
                    looked_at.add(shard)
                    led = self.state.cluster is not None and self.state.cluster.is_leader(*tp)
                    if not (led_from_memory and led and view.shard.loaded_state is not None):
                        storage_call(functools.partial(view.refresh, refresh_ms))
                hwm = view.watermarks_in_memory()[0]
                out[tp] = hwm if hwm >= 0 else None  # -1: its shard could not be read
            except SparklogError:
                out[tp] = None
        return out
