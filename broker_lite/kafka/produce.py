"""Produce (acks 0, 1 and all; idempotent producers) and InitProducerId.

Each partition's record batches are decoded (CRC checked, decompressed) into
Arrow and handed to ``Broker.produce``; an idempotent batch carries its
producer id, epoch and base sequence, which the broker's duplicate detection
uses, so a retried batch returns its first offsets instead of being written
twice.  Partitions of one request are produced concurrently (the broker's
per-topic batcher joins them into one object).  acks=0 gets no response.
"""

from __future__ import annotations

import time
from concurrent.futures import Future
from typing import Any

import pyarrow as pa
from kio.index import load_response_schema

from sparklog.broker_lite.kafka.fetch import remember_produced
from sparklog.broker_lite.kafka.messages import errno_of, make, nested
from sparklog.broker_lite.kafka.records import decode_batch, split_batches
from sparklog.errors import (
    InvalidRecordError,
    InvalidRequiredAcksError,
    MessageSizeTooLargeError,
    SparklogError,
    UnsupportedVersionError,
)

ACKS = {0: "0", 1: "1", -1: "all"}


def _produce_partition(
    broker: Any, topic: str, partition: int, records: bytes | None, acks: str
) -> tuple[int, int]:
    """(base offset, log append time or -1) of one partition's records."""
    if not records:
        raise InvalidRecordError(f"{topic}-{partition}: a produce request without records")
    topic_obj = broker.topic(topic)
    config = topic_obj.info.effective_config
    limit = int(config.get("max.message.bytes", 0) or 0)
    views = list(split_batches(records))
    for view in views:
        if limit and len(view) > limit:
            raise MessageSizeTooLargeError(
                f"{topic}-{partition}: a record batch of {len(view)} bytes exceeds the topic's "
                f"max.message.bytes={limit}"
            )
    decoded = [decode_batch(view) for view in views]
    if not decoded:
        raise InvalidRecordError(f"{topic}-{partition}: a produce request without records")
    first = decoded[0]
    if any(d.transactional or d.control for d in decoded):
        raise UnsupportedVersionError(
            "transactional record batches are not accepted; accepted: idempotent or plain "
            "producers (no transactional.id)"
        )
    table = pa.Table.from_batches([d.records for d in decoded])
    append_ms = -1
    if config.get("message.timestamp.type") == "LogAppendTime":
        append_ms = int(time.time() * 1000)
    kwargs: dict[str, Any] = {}
    if first.producer_id >= 0:
        kwargs = {
            "producer_id": first.producer_id,
            "producer_epoch": first.producer_epoch,
            "base_sequence": first.base_sequence,
        }
    outcomes = broker.produce(topic, [(partition, table)], acks=acks, **kwargs)
    outcome = outcomes[0]
    if (
        len(views) == 1
        and append_ms < 0
        and outcome.base_offset >= 0
        and not outcome.duplicate
        and first.count
        and pa.types.is_binary(topic_obj.info.record_schema.field("value").type)
    ):
        remember_produced(
            topic_obj.info.topic_id, partition, int(outcome.base_offset), first.count, views[0]
        )
    return int(outcome.base_offset), append_ms


def _idempotent(request: Any) -> bool:
    """Whether any batch carries a producer id (bytes 43-50 of a v2 batch header)."""
    for topic_data in request.topic_data:
        for pdata in topic_data.partition_data:
            records = pdata.records
            if records and len(records) >= 51 and records[43:51] != b"\xff" * 8:
                return True
    return False


def handle_produce(ctx: Any, request: Any) -> Any:
    broker = ctx.broker
    if ctx.previous_produce is not None and _idempotent(request):
        ctx.previous_produce.wait()
    acks = ACKS.get(int(request.acks))
    cls = load_response_schema(0, ctx.api_version)
    topic_cls = nested(cls, "TopicProduceResponse")
    part_cls = nested(cls, "PartitionProduceResponse")
    jobs: list[tuple[str, int, Future[tuple[int, int]] | BaseException]] = []
    # one partition (the common case at low rates) is produced on this thread: a
    # hand-off to the pool would only add a thread wake-up to the latency
    inline = sum(len(t.partition_data) for t in request.topic_data) == 1
    for topic_data in request.topic_data:
        for pdata in topic_data.partition_data:
            if acks is None:
                jobs.append(
                    (
                        topic_data.name,
                        pdata.index,
                        InvalidRequiredAcksError(f"acks={request.acks}; accepted: 0, 1, -1"),
                    )
                )
                continue
            args = (broker, topic_data.name, pdata.index, pdata.records, acks)
            if not inline:
                jobs.append(
                    (
                        topic_data.name,
                        pdata.index,
                        ctx.listener.pool.submit(_produce_partition, *args),
                    )
                )
                continue
            done: Future[tuple[int, int]] = Future()
            try:
                done.set_result(_produce_partition(*args))
            except Exception as exc:  # answered below, as a pool job's error would be
                done.set_exception(exc)
            jobs.append((topic_data.name, pdata.index, done))
    results: dict[str, list[Any]] = {}
    for topic, partition, job in jobs:
        base_offset, append_ms, error, message = -1, -1, 0, None
        try:
            if isinstance(job, BaseException):
                raise job
            base_offset, append_ms = job.result()
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


def handle_init_producer_id(ctx: Any, request: Any) -> Any:
    cls = load_response_schema(22, ctx.api_version)
    if request.transactional_id is not None:
        return make(
            cls,
            throttle_time=0,
            error_code=UnsupportedVersionError.errno,
            producer_id=-1,
            producer_epoch=-1,
        )
    try:
        producer_id = ctx.listener.producer_ids.allocate()
    except SparklogError as exc:
        return make(
            cls, throttle_time=0, error_code=errno_of(exc), producer_id=-1, producer_epoch=-1
        )
    return make(cls, throttle_time=0, error_code=0, producer_id=producer_id, producer_epoch=0)
