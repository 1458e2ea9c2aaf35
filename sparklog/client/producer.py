"""The Producer: Kafka's send/flush model over a storage root or brokers.

``send`` only buffers; a background sender drains every buffered partition of a
topic when the oldest record has waited ``linger_ms``, a partition holds
``batch_size`` bytes, or ``flush()`` asks.  One drain is one produce call per
topic (one object on the store for all its partitions).  There is one drain in
flight at a time and a failed drain is retried whole with the same producer
sequences, so order per partition is the send order and, with idempotence,
retries never duplicate records.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from sparklog.client.config import PRODUCER_OPTIONS, client_settings, parse_config
from sparklog.client.partitioner import StickyPartitioner, partition_for_key, partitions_for_keys
from sparklog.client.security import KEYS as SECURITY_KEYS
from sparklog.client.transports import Backend, open_backend
from sparklog.client.transports.base import ProduceResult, ProducerIdentity
from sparklog.client.types import BatchMetadata, RecordMetadata
from sparklog.clock import now_ms
from sparklog.errors import (
    CommitStateUnknownError,
    IllegalStateError,
    InvalidRecordError,
    KafkaTimeoutError,
    SparklogError,
    UnknownServerError,
    UnknownTopicOrPartitionError,
)
from sparklog.retry import retrying
from sparklog.storage.records import HEADER_TYPE, TIMESTAMP_TYPE
from sparklog.topic_partition import TopicPartition

log = logging.getLogger(__name__)

Headers = Sequence[tuple[str, bytes | str | None]] | Mapping[str, bytes | str | None] | None
_MAX_BACKOFF_S = 1.0


class _Completion:
    """The outcome of one chunk of records: its base offset once committed, or an error."""

    __slots__ = ("_callbacks", "_event", "_lock", "base_offset", "error")

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self.base_offset = -1
        self.error: BaseException | None = None
        self._callbacks: list[Callable[[], None]] = []

    def resolve(self, base_offset: int, error: BaseException | None = None) -> None:
        with self._lock:
            self.base_offset, self.error = base_offset, error
            self._event.set()
            callbacks, self._callbacks = self._callbacks, []
        for cb in callbacks:
            _run_callback(cb)

    def settle(self, timeout_s: float | None) -> bool:
        """Wait up to ``timeout_s`` for the outcome; whether it is known."""
        return self._event.wait(timeout_s)

    def wait(self, timeout_s: float | None) -> None:
        if not self._event.wait(timeout_s):
            raise KafkaTimeoutError(f"record not acknowledged within {timeout_s} s")
        if self.error is not None:
            raise self.error

    def done(self) -> bool:
        return self._event.is_set()

    def on_done(self, cb: Callable[[], None]) -> None:
        with self._lock:
            if not self._event.is_set():
                self._callbacks.append(cb)
                return
        _run_callback(cb)


def _run_callback(cb: Callable[[], None]) -> None:
    try:
        cb()
    except Exception:  # a user callback must not kill the sender
        log.exception("producer callback failed")


class _FutureBase:
    """The future protocol shared by ``send`` and ``send_batch`` results.

    As in ``concurrent.futures``: ``get``/``result`` return the value or raise the
    record's error; ``exception(timeout)`` returns the record's error (or None)
    and raises KafkaTimeoutError only if the outcome is not known within
    ``timeout`` (a record still in flight has not failed).  As in kafka-python:
    ``add_callback(fn, *args)`` calls ``fn(*args, value)`` on success,
    ``add_errback(fn, *args)`` calls ``fn(*args, error)`` on failure; both chain.
    """

    def _completions(self) -> list[_Completion]:
        raise NotImplementedError

    def _value(self) -> Any:
        raise NotImplementedError

    def get(self, timeout: float | None = None) -> Any:
        deadline = None if timeout is None else time.monotonic() + timeout
        for completion in self._completions():
            left = None if deadline is None else max(deadline - time.monotonic(), 0)
            completion.wait(left)
        return self._value()

    def result(self, timeout: float | None = None) -> Any:
        return self.get(timeout)

    def done(self) -> bool:
        return all(c.done() for c in self._completions())

    is_done = property(done)

    def _error(self) -> BaseException | None:
        return next((c.error for c in self._completions() if c.error is not None), None)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """The record's error, None if it succeeded; KafkaTimeoutError if still in flight."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for completion in self._completions():
            left = None if deadline is None else max(deadline - time.monotonic(), 0)
            if not completion.settle(left):
                raise KafkaTimeoutError(f"outcome not known within {timeout} s (still in flight)")
        return self._error()

    def succeeded(self) -> bool:
        return self.done() and self._error() is None

    def failed(self) -> bool:
        return self.done() and self._error() is not None

    def _when_done(self, fn: Callable[[], None]) -> None:
        pending = list(self._completions())
        if not pending:
            fn()
            return
        lock = threading.Lock()
        left = [len(pending)]

        def one_done() -> None:
            with lock:
                left[0] -= 1
                last = left[0] == 0
            if last:
                fn()

        for completion in pending:
            completion.on_done(one_done)

    def add_done_callback(self, fn: Callable[[Any], Any]) -> None:
        """``fn(future)`` once the outcome is known (concurrent.futures' shape)."""
        self._when_done(lambda: fn(self))

    def add_callback(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> _FutureBase:
        """``fn(*args, value, **kwargs)`` once the records are committed (kafka-python's)."""

        def call() -> None:
            if self._error() is None:
                fn(*args, self._value(), **kwargs)

        self._when_done(call)
        return self

    def add_errback(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> _FutureBase:
        """``fn(*args, error, **kwargs)`` if the records failed (kafka-python's)."""

        def call() -> None:
            error = self._error()
            if error is not None:
                fn(*args, error, **kwargs)

        self._when_done(call)
        return self

    def add_both(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> _FutureBase:
        self.add_callback(fn, *args, **kwargs)
        return self.add_errback(fn, *args, **kwargs)


def _failed_future(
    topic: str, partition: int | None, timestamp_ms: int | None, error: SparklogError
) -> FutureRecordMetadata:
    completion = _Completion()
    completion.resolve(-1, error)
    ts = now_ms() if timestamp_ms is None else int(timestamp_ms)
    return FutureRecordMetadata(completion, 0, topic, -1 if partition is None else partition, ts)


class FutureRecordMetadata(_FutureBase):
    """What ``send`` returns: ``get()``/``result()`` gives RecordMetadata or raises the error."""

    __slots__ = (
        "_completion",
        "_index",
        "partition",
        "serialized_key_size",
        "serialized_value_size",
        "timestamp_ms",
        "topic",
    )

    def __init__(
        self,
        completion: _Completion,
        index: int,
        topic: str,
        partition: int,
        timestamp_ms: int,
        serialized_key_size: int = -1,
        serialized_value_size: int = -1,
    ) -> None:
        self._completion, self._index = completion, index
        self.topic, self.partition, self.timestamp_ms = topic, partition, timestamp_ms
        self.serialized_key_size = serialized_key_size
        self.serialized_value_size = serialized_value_size

    def _completions(self) -> list[_Completion]:
        return [self._completion]

    def _value(self) -> RecordMetadata:
        return RecordMetadata(
            self.topic,
            self.partition,
            self._completion.base_offset + self._index,
            self.timestamp_ms,
            serialized_key_size=self.serialized_key_size,
            serialized_value_size=self.serialized_value_size,
        )

    def get(self, timeout: float | None = None) -> RecordMetadata:
        result: RecordMetadata = super().get(timeout)
        return result

    @property
    def value(self) -> RecordMetadata | None:
        """The RecordMetadata once committed, else None (kafka-python's attribute)."""
        return self._value() if self.succeeded() else None


class FutureBatchMetadata(_FutureBase):
    """What ``send_batch`` returns: ``get()`` gives BatchMetadata (offset range per partition)."""

    def __init__(self, topic: str, parts: list[tuple[int, int, _Completion]]) -> None:
        self.topic, self._parts = topic, parts

    def _completions(self) -> list[_Completion]:
        return [c for _, _, c in self._parts]

    def _value(self) -> BatchMetadata:
        return BatchMetadata(self.topic, [(p, c.base_offset, n) for p, n, c in self._parts])

    def get(self, timeout: float | None = None) -> BatchMetadata:
        result: BatchMetadata = super().get(timeout)
        return result


class _Chunk:
    """Records for one partition, either Python lists still open for appends or an Arrow table."""

    __slots__ = ("completion", "count", "headers", "keys", "table", "timestamps", "values")

    def __init__(self, table: pa.Table | None = None) -> None:
        self.completion = _Completion()
        self.table = table
        self.count = table.num_rows if table is not None else 0
        self.keys: list[bytes | None] = []
        self.values: list[Any] = []
        self.timestamps: list[int] = []
        self.headers: list[list[dict[str, Any]] | None] = []

    def to_arrow(self) -> pa.Table | pa.RecordBatch:
        if self.table is not None:
            return self.table
        n = self.count
        typed = any(isinstance(v, dict) for v in self.values)
        headers = (
            pa.array(self.headers, HEADER_TYPE)
            if any(h is not None for h in self.headers)
            else pa.nulls(n, HEADER_TYPE)
        )
        return pa.RecordBatch.from_arrays(
            [
                pa.array(self.keys, pa.binary()),
                pa.array(self.values) if typed else pa.array(self.values, pa.binary()),
                pa.array(self.timestamps, pa.int64()).cast(TIMESTAMP_TYPE),
                headers,
            ],
            names=["key", "value", "timestamp", "headers"],
        )


class _Buffer:
    """One partition's pending chunks."""

    __slots__ = ("chunks", "first_s", "size_bytes")

    def __init__(self) -> None:
        self.chunks: list[_Chunk] = []
        self.size_bytes = 0
        self.first_s = time.monotonic()

    def open_chunk(self) -> _Chunk:
        if not self.chunks or self.chunks[-1].table is not None:
            self.chunks.append(_Chunk())
        return self.chunks[-1]


def _with_send_time(table: pa.Table, now_ms: int) -> pa.Table:
    """Give rows without a timestamp the send time (Kafka's CreateTime is set by the producer).

    A missing ``timestamp`` column, or null entries in it, would otherwise be stored
    as null timestamps, which readers cannot print and time lookups skip.
    """
    import pyarrow.compute as pc

    stamp = pa.scalar(now_ms, pa.int64()).cast(TIMESTAMP_TYPE)
    if "timestamp" not in table.column_names:
        return table.append_column("timestamp", pa.repeat(stamp, table.num_rows))
    column = table.column("timestamp")
    if not column.null_count:
        return table
    if pa.types.is_integer(column.type):
        filled = pc.fill_null(column.cast(pa.int64()), now_ms)
    elif pa.types.is_timestamp(column.type) or pa.types.is_null(column.type):
        if pa.types.is_timestamp(column.type) and column.type.tz is None:
            column = column.cast(pa.timestamp(column.type.unit, tz="UTC"))
        filled = pc.fill_null(column.cast(TIMESTAMP_TYPE, safe=False), stamp)
    else:
        return table  # a wrong type: the storage layer refuses it, naming the accepted types
    index = table.column_names.index("timestamp")
    return table.set_column(index, "timestamp", filled)


def _to_bytes(what: str, value: Any) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    raise InvalidRecordError(
        f"{what} of type {type(value).__name__} is not accepted; accepted: bytes, str or None"
    )


def _headers(headers: Headers) -> list[dict[str, Any]] | None:
    if not headers:
        return None
    items = headers.items() if isinstance(headers, Mapping) else headers
    out = []
    for item in items:
        try:
            k, v = item
        except (TypeError, ValueError):
            raise InvalidRecordError(
                f"header {item!r} is not accepted; accepted: (str, bytes) pairs"
            ) from None
        if not isinstance(k, str):
            raise InvalidRecordError(f"header key {k!r} is not accepted; accepted: str")
        out.append({"key": k, "value": _to_bytes(f"header {k!r} value", v)})
    return out


class Producer:
    """Publish records to topics: ``Producer("file:///tmp/sl")``, ``Producer("host:9092")``,
    ``Producer(bootstrap_servers="host:9092")`` (kafka-python) or
    ``Producer({"bootstrap.servers": "host:9092"})`` (confluent-kafka's dict).

    Config (Kafka's meanings): acks, linger_ms, batch_size, compression
    (compression_type), enable_idempotence, retries, retry_backoff_ms,
    delivery_timeout_ms, buffer_memory, max_block_ms, metadata_max_age_ms,
    client_id, storage_options, key_serializer, value_serializer.
    """

    def __init__(self, address: Any = None, *, backend: Backend | None = None, **config: Any):
        address, given = client_settings("producer", address, config)
        self.config = parse_config("producer", PRODUCER_OPTIONS, given)
        self._sent = 0
        self._backend = backend or open_backend(
            address,
            self.config["storage_options"],
            retry_timeout_ms=self.config["retry_timeout_ms"],
            security={k: self.config[k] for k in SECURITY_KEYS},
        )
        self._owns_backend = backend is None
        self._cv = threading.Condition()
        self._buffers: dict[str, dict[int, _Buffer]] = {}
        self._buffered_bytes = 0
        self._flush_requested = 0
        self._flushed = 0
        self._closed = False
        self._layouts: dict[str, tuple[int, int, float]] = {}
        self._sticky = StickyPartitioner()
        self._identity: tuple[int, int] | None = None
        self._sequences: dict[TopicPartition, int] = {}
        self._sender = threading.Thread(target=self._run, name="sparklog-producer", daemon=True)
        self._sender.start()

    # -- metadata ------------------------------------------------------------------
    def _layout(self, topic: str, *, refresh: bool = False) -> tuple[int, int]:
        """(partition count, max.message.bytes) of ``topic``, cached metadata_max_age_ms.

        Kafka's contract: a refresh that cannot reach the cluster (a retriable error)
        keeps the cached metadata; with none cached, the lookup is retried for up to
        ``max_block_ms`` and then fails with the last error.
        """
        cached = self._layouts.get(topic)
        now = time.monotonic()
        if cached is None or refresh or now - cached[2] > self.config["metadata_max_age_ms"] / 1000:
            try:
                layout = self._backend.topic_layout(topic)
            except SparklogError as exc:
                if not exc.retriable:
                    raise
                if cached is not None and not refresh:
                    log.info("metadata refresh of %r failed; using cached metadata: %s", topic, exc)
                    return cached[0], cached[1]
                layout = retrying(
                    lambda: self._backend.topic_layout(topic),
                    deadline_ms=self.config["max_block_ms"],
                )
            cached = (layout.partitions, layout.max_message_bytes, now)
            self._layouts[topic] = cached
        return cached[0], cached[1]

    def partitions_for(self, topic: str) -> set[int]:
        """The topic's partition numbers (a set, as kafka-python returns)."""
        return set(range(self._layout(topic, refresh=True)[0]))

    def metrics(self, raw: bool = False) -> dict[str, dict[str, float]]:
        """Counters of this producer (records sent, bytes buffered now)."""
        with self._cv:
            return {
                "producer-metrics": {
                    "record-send-total": float(self._sent),
                    "buffered-bytes": float(self._buffered_bytes),
                }
            }

    def _check_partition(self, topic: str, partition: int) -> int:
        count, _ = self._layout(topic)
        if not 0 <= partition < count:
            count, _ = self._layout(topic, refresh=True)
            if not isinstance(partition, int) or not 0 <= partition < count:
                raise UnknownTopicOrPartitionError(
                    f"topic {topic!r} has no partition {partition}; accepted: 0-{count - 1}"
                )
        return partition

    # -- sending ---------------------------------------------------------------------
    def send(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        headers: Headers = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> FutureRecordMetadata:
        """Buffer one record; the future resolves to its RecordMetadata once committed.

        ``key_serializer``/``value_serializer`` (if configured) turn non-null keys and
        values into bytes; null stays null (a null value is a tombstone).
        """
        if self._closed:
            raise IllegalStateError("producer is closed")
        if key is not None and self.config["key_serializer"] is not None:
            key = self.config["key_serializer"](key)
        if value is not None and self.config["value_serializer"] is not None:
            value = self.config["value_serializer"](value)
        key_bytes = _to_bytes("key", key)
        value_obj = value if isinstance(value, dict) else _to_bytes("value", value)
        header_rows = _headers(headers)
        try:
            count, max_bytes = self._layout(topic)
        except SparklogError as exc:
            if not exc.retriable:
                raise
            # no metadata within max_block_ms: the future fails, send() does not raise
            return _failed_future(topic, partition, timestamp_ms, exc)
        size = (len(key_bytes) if key_bytes else 0) + (
            len(value_obj) if isinstance(value_obj, bytes) else 64
        )
        if header_rows:
            size += sum(len(h["key"]) + len(h["value"] or b"") for h in header_rows)
        if size > max_bytes:
            raise InvalidRecordError(
                f"record of {size} bytes is larger than topic {topic!r}'s max.message.bytes "
                f"({max_bytes})"
            )
        ts = now_ms() if timestamp_ms is None else int(timestamp_ms)
        with self._cv:
            if partition is not None:
                p = self._check_partition(topic, partition)
            elif key_bytes is not None:
                p = partition_for_key(key_bytes, count)
            else:
                p = self._sticky.partition(topic, count)
            self._reserve(size)
            was_idle = not self._buffers  # the sender sleeps until told a linger clock started
            buf = self._buffer(topic, p)
            chunk = buf.open_chunk()
            index = chunk.count
            chunk.keys.append(key_bytes)
            chunk.values.append(value_obj)
            chunk.timestamps.append(ts)
            chunk.headers.append(header_rows)
            chunk.count += 1
            self._sent += 1
            buf.size_bytes += size
            if buf.size_bytes >= self.config["batch_size"]:
                if key_bytes is None and partition is None:
                    self._sticky.on_new_batch(topic, count, p)
                self._cv.notify_all()
            elif was_idle or self.config["linger_ms"] == 0:
                self._cv.notify_all()
        return FutureRecordMetadata(
            chunk.completion,
            index,
            topic,
            p,
            ts,
            -1 if key_bytes is None else len(key_bytes),
            len(value_obj) if isinstance(value_obj, bytes) else -1,
        )

    def send_batch(
        self, topic: str, data: pa.RecordBatch | pa.Table, partition: int | None = None
    ) -> FutureBatchMetadata:
        """Buffer columnar records (columns key?, value, timestamp?, headers?, partition?).

        Keyed rows are partitioned with Kafka's murmur2, null-key rows go to the
        sticky partition, a ``partition`` column or argument overrides both.
        """
        import pyarrow.compute as pc

        if not isinstance(data, pa.RecordBatch | pa.Table):
            raise InvalidRecordError(
                f"send_batch takes a pyarrow RecordBatch or Table, not {type(data).__name__}"
            )
        table = pa.Table.from_batches([data]) if isinstance(data, pa.RecordBatch) else data
        if "value" not in table.column_names:
            raise InvalidRecordError("record batch has no 'value' column; 'value' is required")
        table = _with_send_time(table, now_ms())
        count, _ = self._layout(topic)
        n = table.num_rows
        if partition is not None:
            parts = np.full(n, self._check_partition(topic, partition), dtype=np.int64)
        elif "partition" in table.column_names:
            parts = pc.fill_null(table.column("partition"), -1).to_numpy().astype(np.int64)
        elif "key" in table.column_names:
            parts = partitions_for_keys(table.column("key"), count)
        else:
            parts = np.full(n, -1, dtype=np.int64)
        if "partition" in table.column_names:
            table = table.drop_columns(["partition"])
        pieces: list[tuple[int, int, _Completion]] = []
        with self._cv:
            if (parts < 0).any():
                parts = np.where(parts < 0, self._sticky.partition(topic, count), parts)
            bad = parts[parts >= count]
            if len(bad):
                self._check_partition(topic, int(bad[0]))
                count = self._layout(topic)[0]
            order = np.argsort(parts, kind="stable")
            sorted_parts = parts[order]
            if len(order) and not (order == np.arange(n)).all():
                table = table.take(pa.array(order))
            bounds = np.flatnonzero(np.diff(sorted_parts)) + 1
            starts = [0, *bounds.tolist()]
            ends = [*bounds.tolist(), n]
            for lo, hi in zip(starts, ends, strict=True):
                if hi <= lo:
                    continue
                p = int(sorted_parts[lo])
                piece = table.slice(lo, hi - lo)
                size = piece.nbytes
                self._reserve(size)
                buf = self._buffer(topic, p)
                chunk = _Chunk(piece)
                buf.chunks.append(chunk)
                buf.size_bytes += size
                pieces.append((p, hi - lo, chunk.completion))
            self._cv.notify_all()
        return FutureBatchMetadata(topic, pieces)

    def _buffer(self, topic: str, partition: int) -> _Buffer:
        parts = self._buffers.setdefault(topic, {})
        buf = parts.get(partition)
        if buf is None:
            buf = parts[partition] = _Buffer()
        return buf

    def _reserve(self, size: int) -> None:
        """Account for ``size`` buffered bytes; block up to max_block_ms while it is full."""
        if self._closed:
            raise IllegalStateError("producer is closed")
        deadline = time.monotonic() + self.config["max_block_ms"] / 1000
        while self._buffered_bytes and self._buffered_bytes + size > self.config["buffer_memory"]:
            self._cv.notify_all()
            left = deadline - time.monotonic()
            if left <= 0:
                raise KafkaTimeoutError(
                    f"send blocked {self.config['max_block_ms']} ms on a full buffer "
                    f"(buffer_memory={self.config['buffer_memory']})"
                )
            self._cv.wait(left)
        self._buffered_bytes += size

    # -- flushing ------------------------------------------------------------------------
    def flush(self, timeout: float | None = None) -> None:
        """Send everything buffered and wait until it is acknowledged (or failed)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cv:
            self._flush_requested += 1
            target = self._flush_requested
            self._cv.notify_all()
            while self._flushed < target:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise KafkaTimeoutError(f"flush did not finish within {timeout} s")
                self._cv.wait(left)

    def close(self, timeout: float | None = None) -> None:
        """Flush, stop the sender and release the backend."""
        if self._closed:
            return
        try:
            self.flush(timeout)
        finally:
            with self._cv:
                self._closed = True
                self._cv.notify_all()
            self._sender.join(timeout)
            if self._owns_backend:
                self._backend.close()

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the sender thread ------------------------------------------------------------
    def _ready_in_s(self) -> float | None:
        """0 if a drain is due now, seconds until one is due, None if nothing is buffered."""
        if self._flush_requested > self._flushed:
            return 0.0
        oldest = None
        for parts in self._buffers.values():
            for buf in parts.values():
                if buf.size_bytes >= self.config["batch_size"]:
                    return 0.0
                if buf.chunks and (oldest is None or buf.first_s < oldest):
                    oldest = buf.first_s
        if oldest is None:
            return None
        return max(oldest + self.config["linger_ms"] / 1000 - time.monotonic(), 0.0)

    def _run(self) -> None:
        while True:
            with self._cv:
                while True:
                    due = self._ready_in_s()
                    if due == 0.0 or (self._closed and due is None):
                        break
                    self._cv.wait(due)
                if self._closed and not self._buffers and self._flushed >= self._flush_requested:
                    return
                drained, self._buffers = self._buffers, {}
                target = self._flush_requested
                for topic in drained:
                    self._rotate_sticky(topic)
            for topic, parts in drained.items():
                self._send_topic(topic, parts)
            with self._cv:
                self._buffered_bytes -= sum(
                    b.size_bytes for parts in drained.values() for b in parts.values()
                )
                self._flushed = max(self._flushed, target)
                self._cv.notify_all()

    def _rotate_sticky(self, topic: str) -> None:
        """A drained topic's null-key records move to another partition (KIP-480)."""
        count = self._layouts.get(topic, (1, 0, 0.0))[0]
        self._sticky.on_new_batch(topic, count, self._sticky.partition(topic, count))

    def _identity_now(self) -> tuple[int, int]:
        if self._identity is None:
            self._identity = self._backend.init_producer_id()
            self._sequences.clear()
        return self._identity

    def _send_topic(self, topic: str, parts: dict[int, _Buffer]) -> None:
        """Send one topic's drained buffers; a failure fails their futures, never the thread."""
        try:
            self._send_topic_or_raise(topic, parts)
        except SparklogError as exc:
            self._fail(parts, exc, self.config["enable_idempotence"])
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            error = InvalidRecordError(f"records for topic {topic!r} are not accepted: {exc}")
            self._fail(parts, error, self.config["enable_idempotence"])
        except Exception as exc:
            log.exception("producer sender failed for topic %s", topic)
            failure = UnknownServerError(
                f"produce to {topic!r} failed: {type(exc).__name__}: {exc}"
            )
            failure.__cause__ = exc
            self._fail(parts, failure, self.config["enable_idempotence"])

    def _send_topic_or_raise(self, topic: str, parts: dict[int, _Buffer]) -> None:
        arrow = {p: [c.to_arrow() for c in buf.chunks] for p, buf in parts.items()}
        idempotent = self.config["enable_idempotence"]
        attempts = 0
        outcome_open: SparklogError | None = None
        counts = {p: sum(c.count for c in buf.chunks) for p, buf in parts.items()}
        identity: ProducerIdentity | None = None
        if idempotent:
            pid, epoch = self._identity_now()
            identity = ProducerIdentity(
                pid, epoch, {p: self._sequences.get(TopicPartition(topic, p), 0) for p in parts}
            )

        def retry_if(exc: BaseException) -> bool:
            nonlocal attempts, outcome_open
            if not isinstance(exc, SparklogError):
                return False
            attempts += 1
            # idempotent: an unknown outcome is resolved by sending the same sequences again
            unknown = idempotent and isinstance(exc, CommitStateUnknownError)
            outcome_open = exc if unknown else outcome_open
            return (
                exc.retriable
                or unknown
                or (isinstance(exc, UnknownTopicOrPartitionError) and attempts < 3)
            )

        def before_retry(exc: BaseException) -> None:
            log.info("produce to %s failed (%s); retry %d", topic, exc, attempts)

        try:
            results = retrying(
                lambda: self._backend.produce(
                    topic,
                    arrow,
                    acks=self.config["acks"],
                    producer=identity,
                    compression=self.config["compression"],
                ),
                deadline_ms=self.config["delivery_timeout_ms"],
                attempts_max=self.config["retries"] + 1,
                backoff_initial_ms=self.config["retry_backoff_ms"],
                backoff_max_ms=_MAX_BACKOFF_S * 1000,
                retry_if=retry_if,
                before_retry=before_retry,
            )
        except SparklogError as exc:
            # never "failed" for records an earlier attempt may have committed
            self._fail(parts, outcome_open if exc.retriable and outcome_open else exc, idempotent)
            return
        except Exception as exc:  # a bug: logged with its traceback, its cause kept
            log.exception("producer sender failed for topic %s", topic)
            failure = UnknownServerError(
                f"produce to {topic!r} failed: {type(exc).__name__}: {exc}"
            )
            failure.__cause__ = exc
            self._fail(parts, failure, idempotent)
            return
        self._complete(topic, parts, results, counts, identity)

    def _fail(self, parts: dict[int, _Buffer], exc: BaseException, idempotent: bool) -> None:
        if idempotent:
            self._identity = None  # sequences of the failed batch are burnt: new producer id
        for buf in parts.values():
            for chunk in buf.chunks:
                chunk.completion.resolve(-1, exc)

    def _complete(
        self,
        topic: str,
        parts: dict[int, _Buffer],
        results: Mapping[int, ProduceResult],
        counts: Mapping[int, int],
        identity: ProducerIdentity | None,
    ) -> None:
        for p, buf in parts.items():
            result = results[p]
            base = result.base_offset
            if identity is not None:
                self._sequences[TopicPartition(topic, p)] = identity.sequences[p] + counts[p]
            for chunk in buf.chunks:
                chunk.completion.resolve(base)
                if base >= 0:
                    base += chunk.count
