"""KIP-848 on the Kafka listener: ConsumerGroupHeartbeat (68) and ConsumerGroupDescribe (69).

The wire side only: topic ids become names and back (the state machine,
:mod:`sparklog.groups.consumer_groups`, works with names), errors become
Kafka's codes with their messages.  Both are answered by the group's
coordinator (``broker.groups`` refuses others with NOT_COORDINATOR).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from kio.index import load_response_schema

from sparklog.broker_lite.kafka import acl, topic_ids
from sparklog.broker_lite.kafka.messages import errno_of, make, ms, nested
from sparklog.errors import SparklogError
from sparklog.groups.consumer_groups import Heartbeat

if TYPE_CHECKING:
    from sparklog.broker_lite.kafka.api_types import (
        ConsumerGroupDescribeRequest,
        ConsumerGroupDescribeResponse,
        ConsumerGroupHeartbeatRequest,
        ConsumerGroupHeartbeatResponse,
    )
    from sparklog.broker_lite.kafka.context import BrokerView, HandlerContext


#: ConsumerGroupDescribe's member_type of a KIP-848 member and of a classic one
CONSUMER_MEMBER, CLASSIC_MEMBER = 1, 0
NO_OPERATIONS = -2147483648


def _by_topic(partitions: Iterable[tuple[str, int]]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for topic, partition in partitions:
        out.setdefault(topic, []).append(partition)
    return {t: sorted(ps) for t, ps in sorted(out.items())}


def _owned(broker: BrokerView, topics: Any) -> list[tuple[str, int]] | None:
    """The heartbeat's owned partitions by name (None: unchanged; unknown ids dropped)."""
    if topics is None:
        return None
    out: list[tuple[str, int]] = []
    for entry in topics:
        name = topic_ids.name_of(broker, entry.topic_id)
        if name is not None:
            out.extend((name, int(p)) for p in entry.partitions)
    return out


def _principal(ctx: HandlerContext) -> str | None:
    """The member's principal where ACLs are checked (its regex sees what it may describe)."""
    return ctx.session.principal if ctx.session is not None and acl.checked(ctx) else None


def handle_consumer_group_heartbeat(
    ctx: HandlerContext, request: ConsumerGroupHeartbeatRequest
) -> ConsumerGroupHeartbeatResponse:
    cls = load_response_schema(68, ctx.api_version)
    assignment_cls = nested(cls, "Assignment")
    partitions_cls = nested(cls, "TopicPartitions")
    names = request.subscribed_topic_names
    heartbeat = Heartbeat(
        group=str(request.group_id),
        member_id=request.member_id or "",
        member_epoch=int(request.member_epoch),
        instance_id=request.instance_id,
        rack_id=request.rack_id,
        rebalance_timeout_ms=ms(request.rebalance_timeout),
        topic_names=None if names is None else [str(t) for t in names],
        topic_regex=getattr(request, "subscribed_topic_regex", None),
        assignor=request.server_assignor,
        owned=_owned(ctx.broker, request.topic_partitions),
        client_id=getattr(ctx, "client_id", "") or "",
        client_host=getattr(ctx, "client_host", "") or "",
        principal=_principal(ctx),
        principal_host=ctx.session.host if ctx.session is not None else "*",
    )
    try:
        answer = ctx.broker.groups.consumer_group_heartbeat(heartbeat.group, heartbeat)
    except SparklogError as exc:
        return make(
            cls,
            throttle_time=0,
            error_code=errno_of(exc),
            error_message=str(exc),
            member_id=None,
            member_epoch=-1,
            heartbeat_interval=0,
            assignment=None,
        )
    assignment = None
    if answer.assignment is not None:
        assignment = make(
            assignment_cls,
            topic_partitions=tuple(
                make(
                    partitions_cls,
                    topic_id=topic_ids.id_of(ctx.broker, topic),
                    partitions=tuple(ps),
                )
                for topic, ps in _by_topic(answer.assignment).items()
            ),
        )
    return make(
        cls,
        throttle_time=0,
        error_code=0,
        error_message=None,
        member_id=answer.member_id,
        member_epoch=answer.member_epoch,
        heartbeat_interval=answer.heartbeat_interval_ms,
        assignment=assignment,
    )


def handle_consumer_group_describe(
    ctx: HandlerContext, request: ConsumerGroupDescribeRequest
) -> ConsumerGroupDescribeResponse:
    cls = load_response_schema(69, ctx.api_version)
    group_cls = nested(cls, "DescribedGroup")
    member_cls = nested(cls, "Member")
    assignment_cls = nested(cls, "Assignment")
    partitions_cls = nested(cls, "TopicPartitions")

    def assignment(partitions: Iterable[tuple[str, int]]) -> Any:
        return make(
            assignment_cls,
            topic_partitions=tuple(
                make(
                    partitions_cls,
                    topic_id=topic_ids.id_of(ctx.broker, topic),
                    topic_name=topic,
                    partitions=tuple(ps),
                )
                for topic, ps in _by_topic(partitions).items()
            ),
        )

    out = []
    for group in request.group_ids:
        try:
            found = ctx.broker.groups.consumer_group_describe(str(group))
        except SparklogError as exc:
            out.append(
                make(
                    group_cls,
                    error_code=errno_of(exc),
                    error_message=str(exc),
                    group_id=group,
                    group_state="",
                    group_epoch=-1,
                    assignment_epoch=-1,
                    assignor_name="",
                    members=(),
                    authorized_operations=NO_OPERATIONS,
                )
            )
            continue
        members = tuple(
            make(
                member_cls,
                member_id=member,
                instance_id=entry["instance_id"],
                rack_id=entry["rack_id"],
                member_epoch=entry["member_epoch"],
                client_id=entry["client_id"],
                client_host=entry["client_host"],
                subscribed_topic_names=tuple(entry["topic_names"]),
                subscribed_topic_regex=entry["topic_regex"],
                assignment=assignment(entry["assigned"]),
                target_assignment=assignment(entry["target"]),
                member_type=CLASSIC_MEMBER if entry["classic"] else CONSUMER_MEMBER,
            )
            for member, entry in found["members"].items()
        )
        out.append(
            make(
                group_cls,
                error_code=0,
                error_message=None,
                group_id=group,
                group_state=found["state"],
                group_epoch=found["group_epoch"],
                assignment_epoch=found["assignment_epoch"],
                assignor_name=found["assignor"],
                members=members,
                authorized_operations=NO_OPERATIONS,
            )
        )
    return make(cls, throttle_time=0, groups=tuple(out))
