"""Fetch: long-poll (max wait, min bytes), per-partition and response byte limits.

Records come from ``Broker.fetch`` (the tail cache or the root) as Arrow and
are encoded as uncompressed v2 batches, except at the tail, where a producer's
own batch is served as it came (see :func:`remember_produced`).  A fetch that
must wait for records is parked, holding no request thread
(:mod:`~sparklog.broker_lite.kafka.fetch_waits`): a commit of this broker to one
of its partitions reads them all again, so does every ``fetch_refresh_ms`` (other
writers' commits), and its deadline answers what there is.  Transactions' markers
are served as control batches at their offsets (clients skip them).  A
read_committed fetch stops at the last stable offset and gets aborted records
filtered out by the broker (the answer's aborted-transactions list is then
empty: nothing left to filter).  Fetch sessions (KIP-227) are not kept: the
answer's session id is 0, so clients send full fetch requests.
"""

from __future__ import annotations

import struct
import threading
import uuid
from collections import OrderedDict
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from kio.index import load_response_schema

from sparklog.broker_lite.kafka import consumer_offsets, topic_ids
from sparklog.broker_lite.kafka.messages import errno_of, make, ms, nested
from sparklog.broker_lite.kafka.records import encode_batch, encode_control_batch
from sparklog.broker_lite.transactions.markers import transactions_view
from sparklog.errors import SparklogError, UnknownTopicIdError
from sparklog.storage.txn_markers import aborted_between, controls_between, drop_aborted

if TYPE_CHECKING:
    from sparklog.broker_lite.kafka.api_types import FetchRequest, FetchResponse
    from sparklog.broker_lite.kafka.context import BrokerView, HandlerContext


#: Bytes of encoded batches kept for consumers reading the same records.
ENCODED_CACHE_BYTES = 64 * 2**20
#: what an entry holds besides its bytes (the key tuple, the bytes object's header, the
#: LRU's node): counted, so tiny batches cannot hold several times the budget
ENCODED_ENTRY_OVERHEAD_BYTES = 320


class EncodedCache:
    """Encoded v2 batches, LRU, keyed by (topic id, partition, first and last offset,
    rows, timestamp type): that names the records exactly (a committed offset never
    changes its record; compaction only removes offsets; a re-created topic has a
    new id), so consumers at the tail share one encoding."""

    def __init__(self, budget_bytes: int) -> None:
        self.budget = budget_bytes
        self.used = 0
        self._items: OrderedDict[tuple[Any, ...], bytes] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[Any, ...]) -> bytes | None:
        with self._lock:
            found = self._items.get(key)
            if found is not None:
                self._items.move_to_end(key)
            return found

    def put(self, key: tuple[Any, ...], value: bytes) -> None:
        with self._lock:
            if key in self._items or len(value) > self.budget:
                return
            self._items[key] = value
            self.used += len(value) + ENCODED_ENTRY_OVERHEAD_BYTES
            while self.used > self.budget:
                _, old = self._items.popitem(last=False)
                self.used -= len(old) + ENCODED_ENTRY_OVERHEAD_BYTES


ENCODED = EncodedCache(ENCODED_CACHE_BYTES)


def remember_produced(
    topic_id: Any, partition: int, base_offset: int, count: int, batch: memoryview
) -> None:
    """Keep a producer's v2 batch, now committed at ``base_offset``, for the fetches
    of those records: a consumer at the tail then gets the producer's bytes (codec
    kept, as Kafka serves them) instead of a re-encoding of the Arrow records.

    Only the base offset and the partition leader epoch change; both are outside
    the CRC.  The key is the one :func:`_read` looks up for the committed Arrow
    batch of those records (CreateTime only: LogAppendTime stamps are the broker's).
    """
    stored = bytearray(batch)
    struct.pack_into(">q", stored, 0, base_offset)
    struct.pack_into(">i", stored, 12, 0)
    key = (topic_id, partition, base_offset, base_offset + count - 1, count, False)
    ENCODED.put(key, bytes(stored))


def _read(
    broker: BrokerView,
    topic: str,
    partition: int,
    offset: int,
    max_bytes: int,
    wait_ms: int,
    committed: bool = False,
) -> tuple[int, int, int, bytes, int]:
    """(error, high watermark, log start offset, encoded records, last stable offset)."""
    if consumer_offsets.is_topic(topic):  # the derived, read-only view of the group logs
        return consumer_offsets.read(broker, partition, offset, max_bytes, wait_ms)
    try:
        stable = transactions_view(broker, topic, partition)
        if committed and offset >= stable[1]:
            wait_ms = 0  # records past the last stable offset are not served: no long-poll
        batches, hwm, lso, _schema = broker.fetch(
            topic, partition, offset, max(max_bytes, 1), wait_ms
        )
        if wait_ms:
            stable = transactions_view(broker, topic, partition)
    except SparklogError as exc:
        details = getattr(exc, "details", {})
        return (
            errno_of(exc),
            int(details.get("high_watermark", -1)),
            int(details.get("log_start_offset", -1)),
            b"",
            int(details.get("high_watermark", -1)),
        )
    _, last_stable, txn = stable
    last_stable = min(last_stable, hwm)
    bound = last_stable if committed else hwm
    upto = bound
    raw = bool(batches)
    if batches:
        raw_last = batches[-1].column("offset")[batches[-1].num_rows - 1].as_py()
        upto = min(bound, raw_last + 1)
        # the markers right after the records read go with them (no record between)
        following = {c[0] for c in controls_between(txn, upto, bound)}
        while upto in following:
            upto += 1
    if committed:
        batches = [b for b in _below(batches, bound)]
        batches = drop_aborted(batches, aborted_between(txn, offset, bound))
    controls = controls_between(txn, offset, upto)
    if committed and raw and not batches and upto < bound:
        # all read was aborted: read on, so the answer moves the reader forward
        error, hwm, lso, rest, last_stable = _read(
            broker, topic, partition, upto, max_bytes, 0, committed
        )
        if error:
            return error, hwm, lso, rest, last_stable
        head = b"".join(encode_control_batch(*c[:4]) for c in controls)
        return 0, hwm, lso, head + rest, last_stable
    info = broker.topic(topic).info
    log_append = info.effective_config.get("message.timestamp.type") == "LogAppendTime"
    out: list[bytes] = []
    size = 0
    pending = list(controls)
    for batch in batches:
        if batch.num_rows == 0:
            continue
        first = batch.column("offset")[0].as_py()
        if first < offset:  # a cached batch that starts before the fetch offset
            batch = batch.slice(offset - first)
            if batch.num_rows == 0:
                continue
            first = offset
        last = batch.column("offset")[batch.num_rows - 1].as_py()
        while pending and pending[0][0] < first:
            control = pending.pop(0)
            encoded_control = encode_control_batch(*control[:4])
            out.append(encoded_control)
            size += len(encoded_control)
        key = (info.topic_id, partition, first, last, batch.num_rows, log_append)
        encoded = ENCODED.get(key)
        if encoded is None:
            encoded = encode_batch(batch, log_append)
            ENCODED.put(key, encoded)
        out.append(encoded)
        size += len(encoded)
        if size >= max_bytes:
            pending = [c for c in pending if c[0] < last]
            break
    for control in pending:
        out.append(encode_control_batch(*control[:4]))
    return 0, hwm, lso, out[0] if len(out) == 1 else b"".join(out), last_stable


def _below(batches: list[Any], bound: int) -> list[Any]:
    """The batches cut at ``bound`` (the last stable offset)."""
    out = []
    for batch in batches:
        if batch.num_rows == 0:
            continue
        first = batch.column("offset")[0].as_py()
        if first >= bound:
            break
        last = batch.column("offset")[batch.num_rows - 1].as_py()
        if last >= bound:
            import pyarrow.compute as pc

            batch = batch.filter(pc.less(batch.column("offset"), bound))
        out.append(batch)
    return out


#: Fetch names topics by id from this version on (KIP-516)
FIRST_TOPIC_ID_VERSION = 13
ZERO_ID = uuid.UUID(int=0)


def handle_fetch(
    ctx: HandlerContext, request: FetchRequest
) -> FetchResponse | Future[FetchResponse]:
    """The Fetch answer, or a future of it: a fetch whose ``min_bytes`` are not there
    and whose ``max_wait_ms`` has not passed is parked
    (:mod:`~sparklog.broker_lite.kafka.fetch_waits`) and answered when a commit to one
    of its partitions gives it enough, or at its deadline; no request thread waits."""
    broker = ctx.broker
    cls = load_response_schema(1, ctx.api_version)
    # v13+ name topics by id: resolved here; an unknown id is UNKNOWN_TOPIC_ID
    by_id = ctx.api_version >= FIRST_TOPIC_ID_VERSION
    ids: dict[str, uuid.UUID] = {}
    unknown: list[tuple[uuid.UUID, list[int]]] = []
    wanted: list[tuple[str, int, int, int]] = []
    for t in request.topics:
        topic_id: uuid.UUID = getattr(t, "topic_id", uuid.UUID(int=0))  # v13+
        name = topic_ids.name_of(broker, topic_id) if by_id else getattr(t, "topic", None)
        if name is None:
            unknown.append((topic_id, [int(p.partition) for p in t.partitions]))
            continue
        if by_id:
            ids[name] = topic_id
        wanted.extend(
            (name, p.partition, int(p.fetch_offset), int(p.partition_max_bytes))
            for p in t.partitions
        )
    max_wait_ms = min(max(ms(request.max_wait), 0), int(broker.config.fetch_max_wait_ms))
    min_bytes = max(int(request.min_bytes), 1)
    max_total = int(getattr(request, "max_bytes", 0x7FFFFFFF) or 0x7FFFFFFF)
    committed = int(getattr(request, "isolation_level", 0) or 0) == 1

    def attempt(final: bool) -> Any:
        """The answer if it is ready (or ``final``), else None: every partition read."""
        results: dict[tuple[str, int], tuple[int, int, int, bytes, int]] = {}
        total = 0
        for topic, partition, offset, part_max in wanted:
            budget = min(part_max, max(max_total - total, 0))
            if budget <= 0 and total:
                results[(topic, partition)] = results.get((topic, partition), (0, -1, -1, b"", -1))
                continue
            results[(topic, partition)] = _read(
                broker, topic, partition, offset, budget, 0, committed
            )
            total += len(results[(topic, partition)][3])
        errors = any(r[0] for r in results.values())
        if final or total >= min_bytes or errors or broker.stopping:
            return _answer(cls, wanted, results, ids, unknown)
        return None

    ready = attempt(final=not wanted or max_wait_ms <= 0)
    if ready is not None:
        return ready
    partitions = {(topic, partition) for topic, partition, _offset, _max in wanted}
    return ctx.listener.fetches.park(partitions, max_wait_ms, attempt)


def _answer(
    cls: Any,
    wanted: list[tuple[str, int, int, int]],
    results: dict[tuple[str, int], tuple[int, int, int, bytes, int]],
    ids: dict[str, uuid.UUID],
    unknown: list[tuple[uuid.UUID, list[int]]],
) -> Any:
    """The Fetch response of ``results`` (and UNKNOWN_TOPIC_ID for ``unknown`` ids)."""
    topic_cls = nested(cls, "FetchableTopicResponse")
    part_cls = nested(cls, "PartitionData")
    by_topic: dict[str, list[Any]] = {}
    for topic, partition, _offset, _max in wanted:
        error, hwm, lso, records, last_stable = results[(topic, partition)]
        by_topic.setdefault(topic, []).append(
            make(
                part_cls,
                partition_index=partition,
                error_code=error,
                high_watermark=hwm,
                last_stable_offset=last_stable,
                log_start_offset=lso,
                aborted_transactions=None if error else (),
                preferred_read_replica=-1,
                records=records,
            )
        )
    return make(
        cls,
        throttle_time=0,
        error_code=0,
        session_id=0,
        responses=tuple(
            make(topic_cls, topic=name, topic_id=ids.get(name, ZERO_ID), partitions=tuple(parts))
            for name, parts in by_topic.items()
        )
        + tuple(
            make(
                topic_cls,
                topic="",
                topic_id=topic_id,
                partitions=tuple(
                    make(
                        part_cls,
                        partition_index=p,
                        error_code=UnknownTopicIdError.errno,
                        high_watermark=-1,
                        last_stable_offset=-1,
                        log_start_offset=-1,
                        aborted_transactions=None,
                        preferred_read_replica=-1,
                        records=None,
                    )
                    for p in parts
                ),
            )
            for topic_id, parts in unknown
        ),
    )
