"""OffsetForLeaderEpoch (API 23): the end offset of a leader epoch, for truncation checks.

A partition's leader epoch here is its shard's (``ShardLog.leader_epoch``, raised
by each new leader).  sparklog never truncates a committed record (the log is in
the root, and a new leader continues it), so the end offset of the current epoch
is the high watermark and an earlier epoch ends no later: it is answered with the
epoch asked for and the high watermark, which tells a client that nothing it
read was truncated.  Kafka keeps per-epoch start offsets and would answer an
earlier epoch with the first offset of the next one; that history is not kept.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from kio.index import load_response_schema

from sparklog.broker_lite.kafka.messages import make, nested, outcome
from sparklog.errors import FencedLeaderEpochError, UnknownLeaderEpochError

if TYPE_CHECKING:
    from sparklog.broker_lite.kafka.api_types import (
        OffsetForLeaderEpochRequest,
        OffsetForLeaderEpochResponse,
    )
    from sparklog.broker_lite.kafka.context import BrokerView, HandlerContext


#: Kafka's UNDEFINED_EPOCH / UNDEFINED_EPOCH_OFFSET
UNDEFINED = -1


def epoch_end(
    broker: BrokerView, topic: str, partition: int, current: int, asked: int
) -> tuple[int, int]:
    """(leader epoch, end offset) for ``asked``, checking the client's ``current`` epoch."""
    epoch, hwm = broker.leader_epoch_end(topic, partition)
    if current >= 0 and current < epoch:
        raise FencedLeaderEpochError(
            f"leader epoch {current} of {topic}-{partition} is fenced; the current one is {epoch}"
        )
    if current > epoch:
        raise UnknownLeaderEpochError(
            f"leader epoch {current} of {topic}-{partition} is newer than this broker's "
            f"{epoch}; refresh metadata and retry"
        )
    if asked > epoch or asked < 0:
        return UNDEFINED, UNDEFINED
    return asked, hwm


def handle_offset_for_leader_epoch(
    ctx: HandlerContext, request: OffsetForLeaderEpochRequest
) -> OffsetForLeaderEpochResponse:
    cls = load_response_schema(23, ctx.api_version)
    topic_cls = nested(cls, "OffsetForLeaderTopicResult")
    part_cls = nested(cls, "EpochEndOffset")
    topics = []
    for t in request.topics:
        parts = []
        for p in t.partitions:
            current = int(getattr(p, "current_leader_epoch", -1))
            error, _, found = outcome(
                partial(
                    epoch_end, ctx.broker, t.topic, int(p.partition), current, int(p.leader_epoch)
                )
            )
            epoch, end = (UNDEFINED, UNDEFINED) if error else found
            parts.append(
                make(
                    part_cls,
                    error_code=error,
                    partition=p.partition,
                    leader_epoch=epoch,
                    end_offset=end,
                )
            )
        topics.append(make(topic_cls, topic=t.topic, partitions=tuple(parts)))
    return make(cls, throttle_time=0, topics=tuple(topics))
