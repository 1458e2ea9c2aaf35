"""ListOffsets (earliest, latest, by timestamp), OffsetCommit and OffsetFetch.

Committed offsets live in the group coordinator, shared with sparklog's own
clients: a Kafka consumer and a sparklog Consumer of one group see each other's
commits.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any, cast

from kio.index import load_response_schema

from sparklog.broker_lite.kafka import consumer_offsets
from sparklog.broker_lite.kafka.messages import errno_of, make, nested, outcome
from sparklog.errors import InvalidRequestError, SparklogError, UnstableOffsetCommitError
from sparklog.topic_partition import TopicPartition

if TYPE_CHECKING:
    from sparklog.broker_lite.kafka.api_types import (
        ListOffsetsRequest,
        ListOffsetsResponse,
        OffsetCommitRequest,
        OffsetCommitResponse,
        OffsetFetchRequest,
        OffsetFetchRequestGroups,
        OffsetFetchRequestOneGroup,
        OffsetFetchResponse,
    )
    from sparklog.broker_lite.kafka.context import BrokerView, HandlerContext


LATEST = -1
EARLIEST = -2
#: KIP-734 (v7+): the offset of the record with the largest timestamp
MAX_TIMESTAMP = -3
#: KIP-405 (v8+): the earliest offset on local storage; all of a log is "local" here
EARLIEST_LOCAL = -4
#: KIP-1005 (v9+): the latest offset in tiered storage; none without tiered storage
LATEST_TIERED = -5


def _offset_for(
    broker: BrokerView, topic: str, partition: int, timestamp: int, read_committed: bool
) -> tuple[int, int]:
    """(offset, timestamp) Kafka answers for one ListOffsets partition; the latest offset
    of a read_committed request is the last stable offset, as Kafka's (what a
    read_committed consumer's ``end_offsets`` gives: the end it can read to)."""
    if consumer_offsets.is_topic(topic):
        return consumer_offsets.list_offset(broker, partition, timestamp)
    if timestamp == LATEST:
        end = broker.list_offsets(topic, partition, "latest")
        if read_committed:  # an empty read_committed fetch at the end answers the LSO
            end = broker.fetch(topic, partition, end, 1, 0, isolation_level="read_committed")[1]
        return end, -1
    if timestamp in (EARLIEST, EARLIEST_LOCAL):
        return broker.list_offsets(topic, partition, "earliest"), -1
    if timestamp == LATEST_TIERED:
        broker.list_offsets(topic, partition, "earliest")  # the partition's errors
        return -1, -1  # as Kafka without tiered storage
    if timestamp == MAX_TIMESTAMP:
        offset = broker.list_offsets(topic, partition, "max_timestamp")
    elif timestamp < 0:
        raise InvalidRequestError(
            f"ListOffsets timestamp {timestamp} is not accepted; accepted: -1 (latest), "
            "-2 (earliest), -3 (max timestamp), -4 (earliest local), -5 (latest tiered) or "
            "a timestamp in ms"
        )
    else:
        offset = broker.list_offsets(topic, partition, int(timestamp))
    batches, hwm, _lso, _schema = (
        broker.fetch(topic, partition, offset, 1, 0)
        if offset >= 0
        else (
            [],
            -1,
            -1,
            None,
        )
    )
    if offset < 0 or offset >= hwm:
        return -1, -1  # no record at or after the timestamp
    for batch in batches:
        offsets = batch.column("offset").to_pylist()
        if offset in offsets:
            stamp = batch.column("timestamp")[offsets.index(offset)].cast("int64").as_py()
            return offset, int(stamp)
    return offset, int(timestamp)


def handle_list_offsets(ctx: HandlerContext, request: ListOffsetsRequest) -> ListOffsetsResponse:
    cls = load_response_schema(2, ctx.api_version)
    topic_cls = nested(cls, "ListOffsetsTopicResponse")
    part_cls = nested(cls, "ListOffsetsPartitionResponse")
    read_committed = getattr(request, "isolation_level", 0) == 1  # v2+
    topics = []
    for t in request.topics:
        parts = []
        for p in t.partitions:
            error, _, found = outcome(
                partial(
                    _offset_for,
                    ctx.broker,
                    t.name,
                    p.partition_index,
                    p.timestamp,
                    read_committed,
                )
            )
            offset, stamp = (-1, -1) if error else found
            parts.append(
                make(
                    part_cls,
                    partition_index=p.partition_index,
                    error_code=error,
                    timestamp=stamp,
                    offset=offset,
                    leader_epoch=-1,
                    old_style_offsets=(offset,),
                )
            )
        topics.append(make(topic_cls, name=t.name, partitions=tuple(parts)))
    return make(cls, throttle_time=0, topics=tuple(topics))


def handle_offset_commit(ctx: HandlerContext, request: OffsetCommitRequest) -> OffsetCommitResponse:
    cls = load_response_schema(8, ctx.api_version)
    topic_cls = nested(cls, "OffsetCommitResponseTopic")
    part_cls = nested(cls, "OffsetCommitResponsePartition")
    generation = int(getattr(request, "generation_id_or_member_epoch", -1))
    member = request.member_id or ""
    offsets = {
        TopicPartition(str(t.name), int(p.partition_index)): int(p.committed_offset)
        for t in request.topics
        for p in t.partitions
    }
    metadata = next(
        (
            p.committed_metadata
            for t in request.topics
            for p in t.partitions
            if p.committed_metadata
        ),
        "",
    )
    error = 0
    try:
        ctx.broker.groups.commit_offsets(
            request.group_id, generation, member, offsets, metadata=metadata or ""
        )
    except SparklogError as exc:
        error = errno_of(exc)
    return commit_response(cls, topic_cls, part_cls, request.topics, error)


def commit_response(cls: type, topic_cls: type, part_cls: type, topics: Any, error: int) -> Any:
    """An offset commit's answer (OffsetCommit, TxnOffsetCommit): ``error`` for every
    partition of ``topics`` (a commit lands whole or not at all)."""
    return make(
        cls,
        throttle_time=0,
        topics=tuple(
            make(
                topic_cls,
                name=t.name,
                partitions=tuple(
                    make(part_cls, partition_index=p.partition_index, error_code=error)
                    for p in t.partitions
                ),
            )
            for t in topics
        ),
    )


def _committed(
    ctx: HandlerContext, group: str, topics: Any, require_stable: bool = False
) -> tuple[int, dict[str, list[tuple[int, int, int]]]]:
    """(error code, topic -> [(partition, committed offset or -1, error code)]) of one
    group's OffsetFetch; ``topics`` None = every partition the group has committed.
    ``require_stable`` (v7+, KIP-447): a partition an open transaction holds offsets of
    answers UNSTABLE_OFFSET_COMMIT (retriable) until the transaction ends, so a consumer
    taking over a transactional app's partitions does not start from the offset before it."""
    try:
        if require_stable:
            committed, unstable = ctx.broker.groups.fetch_offsets_and_unstable(group)
        else:
            committed, unstable = ctx.broker.groups.fetch_offsets(group), frozenset()
    except SparklogError as exc:
        return errno_of(exc), {}
    if topics is None:
        wanted: dict[str, list[int]] = {}
        for topic, partition in sorted(committed):
            wanted.setdefault(topic, []).append(partition)
    else:
        wanted = {t.name: list(t.partition_indexes) for t in topics}
    return 0, {
        name: [
            (p, -1, UnstableOffsetCommitError.errno)
            if TopicPartition(name, p) in unstable
            else (p, committed.get(TopicPartition(name, p), -1), 0)
            for p in parts
        ]
        for name, parts in wanted.items()
    }


def handle_offset_fetch(ctx: HandlerContext, request: OffsetFetchRequest) -> OffsetFetchResponse:
    if ctx.api_version >= 8:
        return _offset_fetch_groups(ctx, cast("OffsetFetchRequestGroups", request))
    one = cast("OffsetFetchRequestOneGroup", request)
    cls = load_response_schema(9, ctx.api_version)
    topic_cls = nested(cls, "OffsetFetchResponseTopic")
    part_cls = nested(cls, "OffsetFetchResponsePartition")
    error, found = _committed(
        ctx, one.group_id, one.topics, bool(getattr(one, "require_stable", False))
    )
    if error:
        return make(cls, throttle_time=0, topics=(), error_code=error)
    return make(
        cls,
        throttle_time=0,
        error_code=0,
        topics=_committed_topics(topic_cls, part_cls, found),
    )


def _committed_topics(topic_cls: type, part_cls: type, found: Any) -> tuple[Any, ...]:
    """OffsetFetch's topics of one group: each partition's committed offset."""
    return tuple(
        make(
            topic_cls,
            name=name,
            partitions=tuple(
                make(
                    part_cls,
                    partition_index=p,
                    committed_offset=offset,
                    committed_leader_epoch=-1,
                    metadata="",
                    error_code=error,
                )
                for p, offset, error in parts
            ),
        )
        for name, parts in found.items()
    )


def _offset_fetch_groups(
    ctx: HandlerContext, request: OffsetFetchRequestGroups
) -> OffsetFetchResponse:
    """OffsetFetch v8+ (KIP-709): several groups in one request, each answered alone."""
    cls = load_response_schema(9, ctx.api_version)
    group_cls = nested(cls, "OffsetFetchResponseGroup")
    topic_cls = nested(cls, "OffsetFetchResponseTopics")
    part_cls = nested(cls, "OffsetFetchResponsePartitions")
    groups = []
    for g in request.groups:
        error, found = _checked_member(ctx, g)
        if not error:
            error, found = _committed(ctx, g.group_id, g.topics, bool(request.require_stable))
        groups.append(
            make(
                group_cls,
                group_id=g.group_id,
                error_code=error,
                topics=_committed_topics(topic_cls, part_cls, found),
            )
        )
    return make(cls, throttle_time=0, groups=tuple(groups))


def _checked_member(
    ctx: HandlerContext, group: Any
) -> tuple[int, dict[str, list[tuple[int, int, int]]]]:
    """OffsetFetch v9 (KIP-848): a member id and epoch, if given, are checked as Kafka
    checks them (UNKNOWN_MEMBER_ID, STALE_MEMBER_EPOCH) for a consumer group."""
    member = getattr(group, "member_id", None)
    if not member:
        return 0, {}
    try:
        ctx.broker.groups.check_consumer_member(group.group_id, member, int(group.member_epoch))
    except SparklogError as exc:
        return errno_of(exc), {}
    return 0, {}
