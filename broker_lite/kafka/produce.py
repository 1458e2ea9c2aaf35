"""Produce (acks 0, 1 and all; idempotent producers) and InitProducerId.

Each partition's record batches are decoded (CRC checked, decompressed) into
Arrow and handed to ``Broker.produce_each``; an idempotent batch carries its
producer id, epoch and base sequence, which the broker's duplicate detection
uses, so a retried batch returns its first offsets instead of being written
twice.  The partitions of one topic in a request go to the broker as one call
(``Broker.produce_each``: leadership checked per shard, records normalised once
per request, one object per flush), with errors answered per partition; the
topics of a request are produced concurrently.  acks=0 gets no response.
"""

from __future__ import annotations

import dataclasses
import threading
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from kio.index import load_response_schema

from sparklog.broker_lite.kafka import auto_create, consumer_offsets
from sparklog.broker_lite.kafka.fetch import remember_produced
from sparklog.broker_lite.kafka.messages import errno_of, make, nested
from sparklog.broker_lite.kafka.records import (
    CONTROL_BIT,
    ReadBatch,
    read_batch,
    split_batches,
    to_arrow,
)
from sparklog.broker_lite.kafka.transactions import init_transactional
from sparklog.broker_lite.produce import ProduceItem
from sparklog.clock import now_ms
from sparklog.errors import (
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidRequiredAcksError,
    MessageSizeTooLargeError,
    ProducerFencedError,
    SparklogError,
    UnknownTopicOrPartitionError,
)

if TYPE_CHECKING:
    from sparklog.broker_lite.kafka.api_types import (
        InitProducerIdRequest,
        InitProducerIdResponse,
        ProduceRequest,
        ProduceResponse,
    )
    from sparklog.broker_lite.kafka.context import BrokerView, HandlerContext


ACKS = {0: "0", 1: "1", -1: "all"}


@dataclass
class _Decoded:
    """One partition's records of a request, decoded: what ``Broker.produce_each`` takes."""

    item: ProduceItem
    views: list[memoryview]
    count: int
    transactional: bool = False


def _read_partition(
    limit: int, topic: str, partition: int, records: bytes | None
) -> tuple[list[memoryview], list[ReadBatch]]:
    """Check and read one partition's record batches (CRC checked, decompressed); ``limit``
    is the topic's ``max.message.bytes`` (0: none)."""
    if not records:
        raise InvalidRecordError(f"{topic}-{partition}: a produce request without records")
    views = list(split_batches(records))
    for view in views:
        if limit and len(view) > limit:
            raise MessageSizeTooLargeError(
                f"{topic}-{partition}: a record batch of {len(view)} bytes exceeds the topic's "
                f"max.message.bytes={limit}"
            )
    read = [read_batch(view) for view in views]
    if not read:
        raise InvalidRecordError(f"{topic}-{partition}: a produce request without records")
    if any(r.attributes & CONTROL_BIT for r in read):
        raise InvalidRecordError(
            f"{topic}-{partition}: control batches are written by the transaction "
            "coordinator, not by producers"
        )
    return views, read


def _decode_partitions(
    topic_obj: Any, topic: str, partitions: list[tuple[int, bytes | None]]
) -> dict[int, _Decoded | BaseException]:
    """Each partition's records decoded, or its error; the Arrow columns made once for all."""
    out: dict[int, _Decoded | BaseException] = {}
    read: dict[int, tuple[list[memoryview], list[ReadBatch]]] = {}
    limit = int(topic_obj.info.effective_config.get("max.message.bytes", 0) or 0)
    for i, (partition, records) in enumerate(partitions):
        try:
            read[i] = _read_partition(limit, topic, partition, records)
        except Exception as exc:  # this partition's answer, not the whole request's
            out[i] = exc
    if not read:
        return out
    decoded = iter(to_arrow([r for _, batches in read.values() for r in batches]))
    for i, (views, batches) in read.items():
        mine = [next(decoded) for _ in batches]
        first = mine[0]
        # one batch (the usual case) goes as it is: a Table per partition cost 10 µs each
        table = first.records if len(mine) == 1 else pa.Table.from_batches(d.records for d in mine)
        producer = None
        if first.producer_id >= 0:
            producer = (first.producer_id, first.producer_epoch, first.base_sequence)
        out[i] = _Decoded(
            ProduceItem(partitions[i][0], table, producer),
            views,
            first.count,
            any(d.transactional for d in mine),
        )
    return out


def _produce_topic(
    broker: BrokerView,
    topic: str,
    partitions: list[tuple[int, bytes | None]],
    acks: str,
    principal: str | None,
    queued: threading.Event,
) -> list[tuple[int, int] | BaseException]:
    """(base offset, log append time or -1), or the error, of each partition of one topic.

    The partitions' records go to the broker as ONE call (``produce_each``): it
    checks leadership per shard and normalises the request once, and its
    batcher writes them in one object; errors stay per partition.  ``queued`` is
    set once the records are in the batcher (the caller sets it on every other
    way out).
    """
    try:
        consumer_offsets.refuse_write(topic, "Produce")
        topic_obj = broker.topic(topic)
    except UnknownTopicOrPartitionError as exc:
        if not auto_create.enabled(broker):
            return [exc for _ in partitions]
        try:  # Kafka's auto.create.topics.enable: create it, then produce
            auto_create.create_missing(broker, [topic], set(), principal)
            topic_obj = broker.topic(topic)
        except SparklogError as again:
            return [again for _ in partitions]
    except SparklogError as exc:
        return [exc for _ in partitions]
    out: list[tuple[int, int] | BaseException] = []
    decoded: dict[int, _Decoded] = {}
    found = _decode_partitions(topic_obj, topic, partitions)
    for i in range(len(partitions)):
        one = found[i]
        if isinstance(one, _Decoded) and one.transactional:
            one = _in_transaction(broker, topic, one)
        if isinstance(one, _Decoded):
            decoded[i] = one
            out.append((-1, -1))
        else:
            out.append(one)
    append_ms = -1
    if topic_obj.info.effective_config.get("message.timestamp.type") == "LogAppendTime":
        append_ms = now_ms()
    if not decoded:
        return out
    order = sorted(decoded)
    try:
        outcomes = broker.produce_each(
            topic, [decoded[i].item for i in order], acks=acks, on_queued=queued.set
        )
    except SparklogError as exc:
        outcomes = [exc for _ in order]
    binary = pa.types.is_binary(topic_obj.info.record_schema.field("value").type)
    for i, outcome in zip(order, outcomes, strict=True):
        if isinstance(outcome, BaseException):
            out[i] = outcome
            continue
        d = decoded[i]
        if (
            len(d.views) == 1
            and append_ms < 0
            and outcome.base_offset >= 0
            and not outcome.duplicate
            and d.count
            and binary
            and not d.transactional
        ):
            remember_produced(
                topic_obj.info.topic_id,
                d.item.partition,
                int(outcome.base_offset),
                d.count,
                d.views[0],
            )
        out[i] = (int(outcome.base_offset), append_ms)
    return out


def _produce_topic_then_queued(*args: Any) -> list[tuple[int, int] | BaseException]:
    """``_produce_topic``, its ``queued`` event set however it ends (refusals too)."""
    try:
        return _produce_topic(*args)
    finally:
        args[-1].set()


def _in_transaction(broker: BrokerView, topic: str, one: _Decoded) -> _Decoded | BaseException:
    """A transactional partition's records with their transaction's number, or the refusal.

    The partition must be in the producer's ongoing transaction (KIP-890's
    verification); the number lets the partition refuse a late write of an
    ended transaction.
    """
    producer = one.item.producer
    if producer is None:
        return InvalidRecordError(f"{topic}: a transactional batch without a producer id")
    try:
        number = broker.transactions.verify(producer[0], producer[1], topic, one.item.partition)
    except SparklogError as exc:
        return exc
    return dataclasses.replace(one, item=dataclasses.replace(one.item, txn=number))


def _idempotent(request: ProduceRequest) -> bool:
    """Whether any batch carries a producer id (bytes 43-50 of a v2 batch header)."""
    for topic_data in request.topic_data:
        for pdata in topic_data.partition_data:
            records = pdata.records
            if records and len(records) >= 51 and records[43:51] != b"\xff" * 8:
                return True
    return False


def handle_produce(ctx: HandlerContext, request: ProduceRequest) -> ProduceResponse | None:
    broker = ctx.broker
    turn = ctx.produce_turn
    if turn is not None:  # the connection's requests are appended in the order sent
        turn.wait_for_previous(committed=_idempotent(request))
    acks = ACKS.get(int(request.acks))
    cls = load_response_schema(0, ctx.api_version)
    topic_cls = nested(cls, "TopicProduceResponse")
    part_cls = nested(cls, "PartitionProduceResponse")
    # one call per topic; several topics' calls run on the pool (each waits for its commit)
    calls: list[tuple[str, list[int], Future[list[tuple[int, int] | BaseException]]]] = []
    queued: list[threading.Event] = []
    inline = len(request.topic_data) == 1
    for topic_data in request.topic_data:
        indexes = [int(pdata.index) for pdata in topic_data.partition_data]
        done: Future[list[tuple[int, int] | BaseException]] = Future()
        if acks is None:
            refused = InvalidRequiredAcksError(f"acks={request.acks}; accepted: 0, 1, -1")
            done.set_result([refused for _ in indexes])
        else:
            # one topic: its records queued are the request's (the next may queue then)
            queued.append(turn.queued if inline and turn is not None else threading.Event())
            args = (
                broker,
                topic_data.name,
                [(pdata.index, pdata.records) for pdata in topic_data.partition_data],
                acks,
                ctx.session.principal if ctx.session is not None else None,
                queued[-1],  # last: _produce_topic_then_queued sets it
            )
            if not inline:
                done = ctx.listener.pool.submit(_produce_topic_then_queued, *args)
            else:
                try:
                    done.set_result(_produce_topic_then_queued(*args))
                except Exception as exc:  # answered below, as a pool job's error would be
                    done.set_exception(exc)
        calls.append((str(topic_data.name), indexes, done))
    for each in queued:  # every topic's records are in line: the next request may queue
        each.wait()
    if turn is not None:
        turn.queued.set()
    jobs: list[tuple[str, int, tuple[int, int] | BaseException]] = []
    for topic, indexes, call in calls:
        try:
            answers: list[tuple[int, int] | BaseException] = call.result()
        except Exception as exc:  # a bug must not kill the connection of everyone's batch
            answers = [exc for _ in indexes]
        jobs.extend((topic, index, answer) for index, answer in zip(indexes, answers, strict=True))
    results: dict[str, list[Any]] = {}
    for topic, partition, job in jobs:
        base_offset, append_ms, error, message = -1, -1, 0, None
        try:
            if isinstance(job, BaseException):
                raise job
            base_offset, append_ms = job
        except ProducerFencedError as exc:
            # Kafka (2.7 on) answers a Produce from an older epoch INVALID_PRODUCER_EPOCH, so
            # the client can abort its transaction; PRODUCER_FENCED comes from the coordinator
            error, message = int(InvalidProducerEpochError.errno), str(exc)
        except SparklogError as exc:
            error, message = errno_of(exc), str(exc)
        except Exception as exc:  # a bug must not kill the connection of everyone's batch
            error, message = errno_of(exc), f"{type(exc).__name__}: {exc}"
        results.setdefault(topic, []).append(
            make(
                part_cls,
                index=partition,
                error_code=error,
                base_offset=base_offset,
                log_append_time=append_ms,
                log_start_offset=-1,
                record_errors=(),
                error_message=message,
            )
        )
    if acks == "0":
        return None
    return make(
        cls,
        responses=tuple(
            make(topic_cls, name=name, partition_responses=tuple(parts))
            for name, parts in results.items()
        ),
        throttle_time=0,
    )


def handle_init_producer_id(
    ctx: HandlerContext, request: InitProducerIdRequest
) -> InitProducerIdResponse:
    cls = load_response_schema(22, ctx.api_version)
    if request.transactional_id is not None:
        return init_transactional(ctx, request)
    try:
        producer_id = ctx.listener.producer_ids.allocate()
    except SparklogError as exc:
        return make(
            cls, throttle_time=0, error_code=errno_of(exc), producer_id=-1, producer_epoch=-1
        )
    return make(cls, throttle_time=0, error_code=0, producer_id=producer_id, producer_epoch=0)
