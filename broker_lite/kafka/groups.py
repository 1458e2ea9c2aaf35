"""Group APIs: FindCoordinator, Join/Sync/Heartbeat/Leave, Describe/List/Delete groups.

Kafka clients assign on the client side: JoinGroup hands the leader every
member's opaque protocol metadata, the leader's SyncGroup brings opaque
assignments back.  The coordinator (``broker.groups``, shared with sparklog's
own clients and stored in the root) keeps them, together with the partitions
decoded from Kafka's consumer protocol, so one group may mix both kinds of
members, commits are shared and ``sparklog groups describe`` shows lag.
A group's state is held in memory by its coordinator, the live broker the
group's rendezvous hash picks; FindCoordinator names it and the other brokers
answer NOT_COORDINATOR (``broker_lite/group_routing.py``).
"""

from __future__ import annotations

import base64
import importlib
import io
import struct
from collections.abc import Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, cast

from kio.index import load_response_schema
from kio.schema.consumer_protocol_assignment.v0.data import (
    ConsumerProtocolAssignment as AssignmentV0,
)
from kio.schema.consumer_protocol_assignment.v0.data import TopicPartition as AssignedV0
from kio.schema.consumer_protocol_subscription.v0.data import (
    ConsumerProtocolSubscription as SubscriptionV0,
)
from kio.serial import entity_reader, entity_writer

from sparklog.broker_lite.cluster import rendezvous_weight
from sparklog.broker_lite.kafka.messages import errno_of, make, ms, nested
from sparklog.broker_lite.kafka.metadata import kafka_brokers
from sparklog.broker_lite.kafka.parking import then
from sparklog.errors import (
    CoordinatorNotAvailableError,
    GroupIdNotFoundError,
    NonEmptyGroupError,
    SparklogError,
)
from sparklog.groups.consumer_groups import is_consumer_group
from sparklog.groups.coordinator import JoinResult
from sparklog.topic_partition import TopicPartition

if TYPE_CHECKING:
    from sparklog.broker_lite.kafka.api_types import (
        DeleteGroupsRequest,
        DeleteGroupsResponse,
        DescribeGroupsRequest,
        DescribeGroupsResponse,
        FindCoordinatorRequestOneKey,
        FindCoordinatorResponseOneKey,
        HeartbeatRequest,
        HeartbeatResponse,
        JoinGroupRequest,
        JoinGroupResponse,
        LeaveGroupRequest,
        LeaveGroupRequestBatched,
        LeaveGroupRequestOneMember,
        LeaveGroupResponse,
        ListGroupsRequest,
        ListGroupsResponse,
        SyncGroupRequest,
        SyncGroupResponse,
    )
    from sparklog.broker_lite.kafka.context import BrokerView, HandlerContext


CONSUMER = "consumer"
#: ListGroups v5's group types: classic (JoinGroup/SyncGroup) and consumer (KIP-848)
CLASSIC = "classic"


# -- Kafka's consumer protocol (the opaque bytes, decoded for the coordinator) ----------
def _data_cls(kind: str, version: int) -> type:
    module = importlib.import_module(f"kio.schema.consumer_protocol_{kind}.v{min(version, 3)}.data")
    name = (
        "ConsumerProtocolSubscription" if kind == "subscription" else "ConsumerProtocolAssignment"
    )
    found = getattr(module, name)
    assert isinstance(found, type)
    return found


def decode_subscription(data: bytes) -> list[str]:
    """The topics in a consumer's subscription metadata ([] if not Kafka's format)."""
    try:
        (version,) = struct.unpack_from(">h", data, 0)
        sub: Any
        sub, _ = entity_reader(_data_cls("subscription", max(version, 0)))(data, 2)
        return [str(t) for t in sub.topics]
    except Exception:  # another protocol type's bytes: no topics known
        return []


def decode_owned_partitions(data: bytes) -> list[TopicPartition] | None:
    """The partitions a consumer's subscription (v1+) says it owns (None: v0 or not
    Kafka's format; the member owns nothing as far as the coordinator can tell)."""
    try:
        (version,) = struct.unpack_from(">h", data, 0)
        if version < 1:
            return None
        sub: Any
        sub, _ = entity_reader(_data_cls("subscription", version))(data, 2)
        return [
            TopicPartition(str(tp.topic), int(p))
            for tp in sub.owned_partitions
            for p in tp.partitions
        ]
    except Exception:  # another protocol type's bytes
        return None


def decode_assignment(data: bytes) -> list[TopicPartition]:
    """The partitions in a consumer's assignment bytes ([] if not Kafka's format)."""
    if not data:
        return []
    try:
        (version,) = struct.unpack_from(">h", data, 0)
        assignment: Any
        assignment, _ = entity_reader(_data_cls("assignment", max(version, 0)))(data, 2)
        return [
            TopicPartition(str(tp.topic), int(p))
            for tp in assignment.assigned_partitions
            for p in tp.partitions
        ]
    except Exception:
        return []


def encode_subscription(topics: list[str]) -> bytes:
    buf = io.BytesIO()
    buf.write(struct.pack(">h", 0))
    entity_writer(SubscriptionV0)(buf, SubscriptionV0(topics=tuple(topics), user_data=None))
    return buf.getvalue()


def encode_assignment(partitions: Sequence[TopicPartition]) -> bytes:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    buf = io.BytesIO()
    buf.write(struct.pack(">h", 0))
    entity_writer(AssignmentV0)(
        buf,
        AssignmentV0(
            assigned_partitions=tuple(
                make(AssignedV0, topic=t, partitions=tuple(sorted(ps)))
                for t, ps in sorted(by_topic.items())
            ),
            user_data=None,
        ),
    )
    return buf.getvalue()


# -- handlers -----------------------------------------------------------------------------
def coordinator_of(
    broker: BrokerView, key: str, key_type: int
) -> tuple[int, str | None, int, str, int]:
    """(error code, message, node id, host, port) of ``key``'s coordinator: key type 0 a
    group, 1 a transactional id, both chosen the same way over the live brokers."""
    brokers = kafka_brokers(broker)
    if key_type not in (0, 1) or not brokers:
        message = "unknown coordinator key type" if brokers else "no live broker"
        return CoordinatorNotAvailableError.errno, message, -1, "", -1
    node = max(brokers, key=lambda b: rendezvous_weight(key, 0, b))
    host, port = brokers[node]
    return 0, None, node, host, port


def handle_find_coordinator(
    ctx: HandlerContext, request: FindCoordinatorRequestOneKey
) -> FindCoordinatorResponseOneKey:
    """FindCoordinator v0-v3: one key (v4+: :mod:`~sparklog.broker_lite.kafka.coordinators`)."""
    cls = load_response_schema(10, ctx.api_version)
    error, message, node, host, port = coordinator_of(
        ctx.broker, request.key, getattr(request, "key_type", 0)
    )
    return make(
        cls,
        throttle_time=0,
        error_code=error,
        error_message=message,
        node_id=node,
        host=host,
        port=port,
    )


def handle_join_group(
    ctx: HandlerContext, request: JoinGroupRequest
) -> JoinGroupResponse | Future[JoinGroupResponse]:
    cls = load_response_schema(11, ctx.api_version)
    member_cls = nested(cls, "JoinGroupResponseMember")
    protocols = {p.name: bytes(p.metadata) for p in request.protocols}
    topics = sorted(
        {t for data in protocols.values() for t in decode_subscription(data)}
        if request.protocol_type == CONSUMER
        else set()
    )
    first = next(iter(protocols.values()), b"")
    owned = decode_owned_partitions(first) if request.protocol_type == CONSUMER else None
    session_ms = ms(request.session_timeout)
    rebalance_ms = ms(getattr(request, "rebalance_timeout", session_ms))

    def refused(exc: BaseException) -> Any:
        if not isinstance(exc, SparklogError):
            return None
        return make(
            cls,
            throttle_time=0,
            error_code=errno_of(exc),
            generation_id=-1,
            protocol_type=None,
            protocol_name="" if ctx.api_version < 7 else None,
            leader="",
            member_id=request.member_id or "",
            members=(),
        )

    def answer(joined: JoinResult) -> Any:
        members = ()
        if joined.leader_id == joined.member_id:
            members = tuple(
                make(
                    member_cls,
                    member_id=m,
                    group_instance_id=joined.instance_ids.get(m),
                    metadata=joined.member_metadata.get(m) or encode_subscription(list(ts)),
                )
                for m, ts in sorted(joined.members.items())
            )
        return make(
            cls,
            throttle_time=0,
            error_code=0,
            generation_id=joined.generation,
            protocol_type=request.protocol_type,
            protocol_name=joined.protocol,
            leader=joined.leader_id,
            member_id=joined.member_id,
            members=members,
        )

    try:
        # parked until the rebalance completes: no thread waits (parking.py)
        waiting = ctx.broker.groups.join_group_parked(
            request.group_id,
            request.member_id or "",
            topics,
            session_timeout_ms=session_ms,
            rebalance_timeout_ms=rebalance_ms,
            protocol_metadata=protocols,
            group_instance_id=getattr(request, "group_instance_id", None) or None,
            protocol_type=request.protocol_type,
            owned_partitions=owned,
        )
    except SparklogError as exc:
        return refused(exc)
    return then(waiting, answer, refused)


def handle_sync_group(
    ctx: HandlerContext, request: SyncGroupRequest
) -> SyncGroupResponse | Future[SyncGroupResponse]:
    cls = load_response_schema(14, ctx.api_version)
    opaque = {a.member_id: bytes(a.assignment) for a in request.assignments} or None
    decoded = {m: decode_assignment(data) for m, data in opaque.items()} if opaque else None

    def refused(exc: BaseException) -> Any:
        if not isinstance(exc, SparklogError):
            return None
        return make(
            cls,
            throttle_time=0,
            error_code=errno_of(exc),
            protocol_type=None,
            protocol_name=None,
            assignment=b"",
        )

    def answer(synced: tuple[list[TopicPartition], bytes | None]) -> Any:
        partitions, raw = synced
        return make(
            cls,
            throttle_time=0,
            error_code=0,
            protocol_type=getattr(request, "protocol_type", None),
            protocol_name=getattr(request, "protocol_name", None),
            assignment=raw if raw is not None else encode_assignment(partitions),
        )

    try:
        # a follower's sync is parked until the leader's (parking.py)
        waiting = ctx.broker.groups.sync_group_parked(
            request.group_id, request.generation_id, request.member_id, decoded, opaque
        )
    except SparklogError as exc:
        return refused(exc)
    return then(waiting, answer, refused)


def handle_heartbeat(ctx: HandlerContext, request: HeartbeatRequest) -> HeartbeatResponse:
    cls = load_response_schema(12, ctx.api_version)
    error = 0
    try:
        ctx.broker.groups.heartbeat(request.group_id, request.generation_id, request.member_id)
    except SparklogError as exc:
        error = errno_of(exc)
    return make(cls, throttle_time=0, error_code=error)


def handle_leave_group(ctx: HandlerContext, request: LeaveGroupRequest) -> LeaveGroupResponse:
    cls = load_response_schema(13, ctx.api_version)
    leaving: list[tuple[str, str | None]]
    if ctx.api_version < 3:
        leaving = [(cast("LeaveGroupRequestOneMember", request).member_id, None)]
    else:
        batched = cast("LeaveGroupRequestBatched", request)
        leaving = [(m.member_id, getattr(m, "group_instance_id", None)) for m in batched.members]
    results = []
    top = 0
    for member, instance in leaving:
        error = 0
        try:
            ctx.broker.groups.leave_group(request.group_id, member or "", instance or None)
        except SparklogError as exc:
            error = top = errno_of(exc)
        results.append((member, instance, error))
    if ctx.api_version < 3:
        return make(cls, throttle_time=0, error_code=top)
    member_cls = nested(cls, "MemberResponse")
    return make(
        cls,
        throttle_time=0,
        error_code=0,
        members=tuple(
            make(member_cls, member_id=m, group_instance_id=i, error_code=e) for m, i, e in results
        ),
    )


def _no_group(group_cls: type, group: str, state: str, error: int) -> Any:
    """A DescribeGroups entry without members: an unknown (Dead) group or an error."""
    return make(
        group_cls,
        error_code=error,
        group_id=group,
        group_state=state,
        protocol_type="",
        protocol_data="",
        members=(),
        authorized_operations=-2147483648,
    )


def handle_describe_groups(
    ctx: HandlerContext, request: DescribeGroupsRequest
) -> DescribeGroupsResponse:
    cls = load_response_schema(15, ctx.api_version)
    group_cls = nested(cls, "DescribedGroup")
    member_cls = nested(cls, "DescribedGroupMember")
    known = set(ctx.broker.groups.list_groups())
    out = []
    for group in request.groups:
        try:
            if group not in known:
                out.append(_no_group(group_cls, group, "Dead", 0))
                continue
            doc = ctx.broker.groups.group_state(group)
        except SparklogError as exc:
            out.append(_no_group(group_cls, group, "", errno_of(exc)))
            continue
        if is_consumer_group(doc):  # KIP-848: shown as the classic layout can show it
            out.append(_consumer_group(group_cls, member_cls, doc))
            continue
        members = []
        for member, entry in sorted(doc["members"].items()):
            metadata = (entry.get("metadata") or {}).get(doc["protocol"])
            raw = doc.get("opaque_assignment", {}).get(member)
            assigned = [
                TopicPartition(str(t), int(p)) for t, p in doc["assignment"].get(member, [])
            ]
            members.append(
                make(
                    member_cls,
                    member_id=member,
                    group_instance_id=entry.get("instance_id"),
                    client_id=member,
                    client_host="",
                    member_metadata=base64.b64decode(metadata)
                    if metadata
                    else encode_subscription(list(entry["topics"])),
                    member_assignment=base64.b64decode(raw) if raw else encode_assignment(assigned),
                )
            )
        out.append(
            make(
                group_cls,
                error_code=0,
                group_id=group,
                group_state=doc["state"],
                protocol_type=CONSUMER,
                protocol_data=doc["protocol"],
                members=tuple(members),
                authorized_operations=-2147483648,
            )
        )
    return make(cls, throttle_time=0, groups=tuple(out))


def _consumer_group(group_cls: type, member_cls: type, doc: dict[str, Any]) -> Any:
    """A KIP-848 group in DescribeGroups: its state, assignor and members, each with its
    subscription and owned partitions in the consumer protocol's encoding."""
    found = doc["consumer"]
    return make(
        group_cls,
        error_code=0,
        group_id=doc["group"],
        group_state=doc["state"],
        protocol_type=CONSUMER,
        protocol_data=found["assignor"],
        members=tuple(
            make(
                member_cls,
                member_id=member,
                group_instance_id=entry.get("instance_id"),
                client_id=entry.get("client_id") or member,
                client_host=entry.get("client_host", ""),
                member_metadata=encode_subscription(list(entry["topic_names"])),
                member_assignment=encode_assignment(
                    [TopicPartition(str(t), int(p)) for t, p in entry["assigned"]]
                ),
            )
            for member, entry in sorted(found["members"].items())
        ),
        authorized_operations=-2147483648,
    )


def handle_list_groups(ctx: HandlerContext, request: ListGroupsRequest) -> ListGroupsResponse:
    cls = load_response_schema(16, ctx.api_version)
    group_cls = nested(cls, "ListedGroup")
    wanted = set(getattr(request, "states_filter", ()) or ())
    # v5 (KIP-848): classic or consumer; Kafka matches types case-insensitively
    types = {t.lower() for t in getattr(request, "types_filter", ()) or ()}
    out = []
    try:
        for group in ctx.broker.groups.list_groups():
            doc = ctx.broker.coordinator.group_state(group)  # any broker lists every group
            kind = CONSUMER if is_consumer_group(doc) else CLASSIC
            if (wanted and doc["state"] not in wanted) or (types and kind not in types):
                continue
            out.append(
                make(
                    group_cls,
                    group_id=group,
                    protocol_type=CONSUMER,
                    group_state=doc["state"],
                    group_type=kind,
                )
            )
    except SparklogError as exc:
        return make(cls, throttle_time=0, error_code=errno_of(exc), groups=())
    return make(cls, throttle_time=0, error_code=0, groups=tuple(out))


def handle_delete_groups(ctx: HandlerContext, request: DeleteGroupsRequest) -> DeleteGroupsResponse:
    cls = load_response_schema(42, ctx.api_version)
    result_cls = nested(cls, "DeletableGroupResult")
    known = set(ctx.broker.groups.list_groups())
    results = []
    for group in request.groups_names:
        error = 0
        try:
            if group not in known:
                raise GroupIdNotFoundError(f"group {group!r} does not exist")
            if ctx.broker.groups.group_state(group)["members"]:
                raise NonEmptyGroupError(f"group {group!r} has active members")
            ctx.broker.groups.delete_group(group)
        except SparklogError as exc:
            error = errno_of(exc)
        results.append(make(result_cls, group_id=group, error_code=error))
    return make(cls, throttle_time=0, results=tuple(results))
