"""ACL checks around every Kafka API handler (``authorizer = "acl"``), as Kafka's KafkaApis.

:func:`run` sits between the listener's dispatch and the handler.  A request
about several topics (Produce, Fetch, ListOffsets, ...) runs the handler on
the topics the principal may act on, and answers the others with
TOPIC_AUTHORIZATION_FAILED in the same response, as Kafka does; a group API
the principal may not use on its group answers GROUP_AUTHORIZATION_FAILED;
cluster-wide APIs answer CLUSTER_AUTHORIZATION_FAILED.  Metadata leaves out
the topics the principal may not describe when it asks for all of them.  An
API this module does not know is allowed to super users only (deny by
default).  Without an authorizer :func:`run` only calls the handler.
"""

from __future__ import annotations

import dataclasses
import datetime
import sys
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from types import SimpleNamespace
from typing import TYPE_CHECKING, Protocol, TypeAlias, TypeVar, cast

from kio.index import load_response_schema
from kio.schema.errors import ErrorCode

from sparklog.broker_lite.kafka import acl
from sparklog.broker_lite.kafka.coordinators import ONE_KEY_VERSION
from sparklog.broker_lite.kafka.messages import _field_info, make, nested
from sparklog.broker_lite.kafka.parking import then

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

    from sparklog.broker_lite.kafka import api_types as api
    from sparklog.broker_lite.kafka.context import Handler, HandlerContext

    #: the requests whose topics :func:`_topics_guard` sorts (:data:`TOPIC_APIS`)
    TopicsRequest: TypeAlias = (
        api.ProduceRequest
        | api.FetchRequest
        | api.ListOffsetsRequest
        | api.OffsetCommitRequest
        | api.CreateTopicsRequest
        | api.DeleteTopicsRequest
        | api.DeleteRecordsRequest
        | api.OffsetForLeaderEpochRequest
        | api.CreatePartitionsRequest
    )
    #: the config APIs (:func:`_configs`)
    ConfigsRequest: TypeAlias = (
        api.DescribeConfigsRequest | api.AlterConfigsRequest | api.IncrementalAlterConfigsRequest
    )

#: a kio message (or a legacy version's namespace of the same shape)
Message = TypeVar("Message")
#: A guard as :data:`GUARDS` holds it: ``guard(handler, ctx, request)``, each typed with its
#: API's request (a kio union, or a Protocol of the fields it reads) and answering ``object``:
#: the handler's response, its future (a parked request) or None (Produce with acks=0), or a
#: refusal built from the response class of the request's version, looked up at run time.
#: The table holds guards of different request types, so it erases them.
Guard: TypeAlias = Callable[..., object]


class GroupKeyed(Protocol):
    """A request about one group (JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetFetch
    before v8): checked on that group alone (:func:`_group_whole`)."""

    @property
    def group_id(self) -> str: ...


class Resource(Protocol):
    """A config API's resource: its kind (2: a topic; else the broker) and its name."""

    @property
    def resource_type(self) -> int: ...

    @property
    def resource_name(self) -> str: ...


class RefusedTopic(Protocol):
    """A transactional request's topic: its name and partitions (indexes or entities)."""

    @property
    def name(self) -> str: ...

    @property
    def partitions(self) -> Sequence[int | Indexed]: ...


class Indexed(Protocol):
    """A partition named by an entity (TxnOffsetCommit's), not by its bare index."""

    @property
    def partition_index(self) -> int: ...


CLUSTER = acl.CLUSTER_NAME
#: APIs every connection may send (authentication and version discovery)
OPEN_APIS = frozenset({17, 18, 36, 50, 51})
TOPIC_DENIED = acl.DENIED["TOPIC"].errno
GROUP_DENIED = acl.DENIED["GROUP"].errno
CLUSTER_DENIED = acl.DENIED["CLUSTER"].errno
TXN_DENIED = acl.DENIED["TRANSACTIONAL_ID"].errno
ZERO_ID = uuid.UUID(int=0)


def blank(cls: type, **values: object) -> object:
    """An instance of a kio entity from ``values``, its other required fields zero-like."""
    filled = dict(values)
    for f in dataclasses.fields(cls):  # type: ignore[arg-type,unused-ignore]
        if f.name in filled:
            continue
        kafka_type, required = _field_info(cls)[f.name]
        if not required:
            continue
        text = str(f.type)
        if text.startswith("tuple") or "tuple[" in text:
            filled[f.name] = ()
        elif kafka_type in ("string",):
            filled[f.name] = None if "None" in text else ""
        elif kafka_type == "uuid":
            filled[f.name] = None if "None" in text else ZERO_ID
        elif kafka_type == "bool":
            filled[f.name] = False
        elif kafka_type in ("records", "bytes"):
            filled[f.name] = None if "None" in text else b""
        elif kafka_type in ("error_code", "timedelta_i32", "timedelta_i64"):
            filled[f.name] = 0
        elif kafka_type is not None and kafka_type.startswith(("int", "uint", "float", "date")):
            filled[f.name] = -1
        elif "None" in text:
            filled[f.name] = None
        else:  # a nested entity
            inner = getattr(sys.modules[cls.__module__], text.rsplit(".", 1)[-1], None)
            filled[f.name] = blank(inner) if isinstance(inner, type) else None
    return make(cls, **filled)


def _replace(request: Message, **changes: object) -> Message:
    """``request`` with ``changes``: a kio entity, or a legacy version's namespace."""
    if isinstance(request, SimpleNamespace):
        return cast("Message", SimpleNamespace(**{**vars(request), **changes}))
    return cast("Message", dataclasses.replace(cast("DataclassInstance", request), **changes))


def _response_cls(ctx: HandlerContext) -> type:
    return load_response_schema(ctx.api_key, ctx.api_version)


def _refuse_all(ctx: HandlerContext, errno: int) -> object:
    """The API's response with ``errno`` as its error (lists empty)."""
    from sparklog.errors import error_for_errno

    return blank(
        _response_cls(ctx),
        error_code=errno,
        error_message=f"{error_for_errno(errno).code}: not authorized",
        throttle_time=0,
    )


def _first_field(obj: object, *names: str) -> str:
    for name in names:
        if hasattr(obj, name):
            return name
    raise AttributeError(names)


# -- requests about topics ------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class TopicApi:
    """Where one API keeps its topics and partitions, in the request and the response."""

    operation: str
    request_topics: str
    response_topics: str
    response_topic: str
    response_partition: str | None = None


TOPIC_APIS: dict[int, TopicApi] = {
    0: TopicApi("WRITE", "topic_data", "responses", "TopicProduceResponse",
                "PartitionProduceResponse"),
    1: TopicApi("READ", "topics", "responses", "FetchableTopicResponse", "PartitionData"),
    2: TopicApi("DESCRIBE", "topics", "topics", "ListOffsetsTopicResponse",
                "ListOffsetsPartitionResponse"),
    8: TopicApi("READ", "topics", "topics", "OffsetCommitResponseTopic",
                "OffsetCommitResponsePartition"),
    19: TopicApi("CREATE", "topics", "topics", "CreatableTopicResult"),
    20: TopicApi("DELETE", "topics", "responses", "DeletableTopicResult"),
    21: TopicApi("DELETE", "topics", "topics", "DeleteRecordsTopicResult",
                 "DeleteRecordsPartitionResult"),
    23: TopicApi("DESCRIBE", "topics", "topics", "OffsetForLeaderTopicResult", "EpochEndOffset"),
    37: TopicApi("ALTER", "topics", "results", "CreatePartitionsTopicResult"),
}  # fmt: skip


def _topic_name(ctx: HandlerContext, item: object) -> str:
    name = getattr(item, "name", None) or getattr(item, "topic", None)
    if name:
        return str(name)
    topic_id = getattr(item, "topic_id", None)
    if topic_id is not None:
        from sparklog.broker_lite.kafka import topic_ids

        found = topic_ids.name_of(ctx.broker, topic_id)
        if found:
            return str(found)
    return ""


def _partitions_of(item: object) -> list[int]:
    for field in ("partition_data", "partitions", "partition_indexes"):
        parts = getattr(item, field, None)
        if parts is None:
            continue
        out = []
        for p in parts:
            if isinstance(p, int):
                out.append(int(p))
            else:
                name = _first_field(p, "index", "partition_index", "partition")
                out.append(int(getattr(p, name)))
        return out
    return []


def _may_topic(ctx: HandlerContext, operation: str, name: str) -> bool:
    if operation == "CREATE":
        return acl.allowed(ctx, "CREATE", "CLUSTER", CLUSTER) or acl.allowed(
            ctx, "CREATE", "TOPIC", name
        )
    return acl.allowed(ctx, operation, "TOPIC", name)


def _shown_name(ctx: HandlerContext, item: object, name: str) -> str | None:
    """The name a refusal may carry: the one the request gave, or for a topic asked by id
    its name only if the principal may describe it (Kafka answers ``null`` otherwise)."""
    given = getattr(item, "name", None) or getattr(item, "topic", None)
    if given:
        return str(given)
    return name if name and _may_topic(ctx, "DESCRIBE", name) else None


def _denied_topic(
    ctx: HandlerContext, api: TopicApi, item: object, name: str, errno: int
) -> object:
    cls = _response_cls(ctx)
    topic_cls = nested(cls, api.response_topic)
    shown = _shown_name(ctx, item, name)
    message = (
        f"not authorized to {api.operation.lower()} topic {shown!r}"
        if shown
        else f"not authorized to {api.operation.lower()} this topic"
    )
    values: dict[str, object] = {
        "name": shown,
        "topic": shown,
        "topic_id": getattr(item, "topic_id", None) or ZERO_ID,
        "error_code": errno,
        "error_message": message,
    }
    if api.response_partition is not None:
        part_cls = nested(cls, api.response_partition)
        part_field = next(
            f for f in ("partition_responses", "partitions") if f in _field_info(topic_cls)
        )
        values[part_field] = tuple(
            blank(
                part_cls,
                **{
                    k: v
                    for k, v in {
                        "index": p,
                        "partition_index": p,
                        "partition": p,
                        "error_code": errno,
                        "error_message": message,
                        "records": None,
                    }.items()
                    if k in _field_info(part_cls)
                },
            )
            for p in _partitions_of(item)
        )
    info = _field_info(topic_cls)
    # a hidden name is left to blank(): null where the field takes it, else ""
    return blank(topic_cls, **{k: v for k, v in values.items() if k in info and v is not None})


def _topics_guard(
    handler: Handler, ctx: HandlerContext, request: TopicsRequest, errno: int = TOPIC_DENIED
) -> object:
    api = TOPIC_APIS[ctx.api_key]
    items = getattr(request, api.request_topics, None)
    topic_names = getattr(request, "topic_names", None)
    if ctx.api_key == 20 and not items and topic_names:
        # DeleteTopics before v6: names only
        names = list(topic_names)
        keep_names = tuple(n for n in names if _may_topic(ctx, "DELETE", n))
        denied_names = [n for n in names if n not in keep_names]
        response = handler(ctx, _replace(request, topic_names=keep_names))
        extra = tuple(
            blank(nested(_response_cls(ctx), api.response_topic), name=n, error_code=errno)
            for n in denied_names
        )
        return dataclasses.replace(response, responses=tuple(response.responses) + extra)
    keep: list[tuple[object, str]] = []
    denied: list[tuple[object, str]] = []
    for item in items or ():
        name = _topic_name(ctx, item)
        (keep if name and _may_topic(ctx, api.operation, name) else denied).append((item, name))
    if not denied:
        return handler(ctx, request)
    reduced = _replace(request, **{api.request_topics: tuple(i for i, _ in keep)})
    extra = tuple(_denied_topic(ctx, api, item, name, errno) for item, name in denied)

    def with_denied(response: DataclassInstance | None) -> DataclassInstance | None:
        if response is None:  # acks=0
            return None
        current = tuple(getattr(response, api.response_topics))
        return dataclasses.replace(response, **{api.response_topics: current + extra})

    response = handler(ctx, reduced)
    if isinstance(response, Future):  # a parked long-poll Fetch: completed when answered
        return then(response, with_denied)
    return with_denied(response)


def _offset_commit(
    handler: Handler, ctx: HandlerContext, request: api.OffsetCommitRequest
) -> object:
    if not acl.allowed(ctx, "READ", "GROUP", request.group_id):
        return _topics_denied_all(ctx, request, GROUP_DENIED)
    return _topics_guard(handler, ctx, request)


def _topics_denied_all(ctx: HandlerContext, request: TopicsRequest, errno: int) -> object:
    api = TOPIC_APIS[ctx.api_key]
    items = getattr(request, api.request_topics, None)
    topics = tuple(
        _denied_topic(ctx, api, item, _topic_name(ctx, item), errno) for item in items or ()
    )
    return blank(_response_cls(ctx), throttle_time=0, **{api.response_topics: topics})


# -- Metadata ---------------------------------------------------------------------------
def _metadata(handler: Handler, ctx: HandlerContext, request: api.MetadataRequest) -> object:
    topics = request.topics
    if topics is None or (ctx.api_version == 0 and not topics):
        # every topic: the handler lists and builds only the describable ones
        return handler(ctx, request)
    keep: list[tuple[object, str]] = []
    denied: list[tuple[object, str]] = []
    for item in topics:
        name = _topic_name(ctx, item)
        (keep if name and _may_topic(ctx, "DESCRIBE", name) else denied).append((item, name))
    changes: dict[str, object] = {"topics": tuple(i for i, _ in keep)}
    if getattr(request, "allow_auto_topic_creation", False) and not all(
        _may_topic(ctx, "CREATE", name) for _, name in keep
    ):
        changes["allow_auto_topic_creation"] = False
    response = handler(ctx, _replace(request, **changes)) if keep else None
    topic_cls = nested(_response_cls(ctx), "MetadataResponseTopic")
    extra = tuple(
        blank(
            topic_cls,
            error_code=TOPIC_DENIED,
            name=_shown_name(ctx, item, name),
            topic_id=getattr(item, "topic_id", None) or ZERO_ID,
            is_internal=False,
            topic_authorized_operations=-(2**31),
        )
        for item, name in denied
    )
    if response is None:
        response = handler(
            ctx,
            _replace(request, topics=(), allow_auto_topic_creation=False),
        )
        return dataclasses.replace(response, topics=extra)
    return dataclasses.replace(response, topics=tuple(response.topics) + extra)


# -- groups ---------------------------------------------------------------------------
def _group_whole(
    operation: str,
) -> Callable[[Handler, HandlerContext, GroupKeyed], object]:
    def guard(handler: Handler, ctx: HandlerContext, request: GroupKeyed) -> object:
        if acl.allowed(ctx, operation, "GROUP", str(request.group_id)):
            return handler(ctx, request)
        return _refuse_all(ctx, GROUP_DENIED)

    return guard


def _offset_fetch(handler: Handler, ctx: HandlerContext, request: api.OffsetFetchRequest) -> object:
    if ctx.api_version < 8:  # one group
        return _group_whole("DESCRIBE")(
            handler, ctx, cast("api.OffsetFetchRequestOneGroup", request)
        )
    groups = cast("api.OffsetFetchRequestGroups", request).groups
    keep = tuple(g for g in groups if acl.allowed(ctx, "DESCRIBE", "GROUP", g.group_id))
    denied = [g for g in groups if g not in keep]
    if not denied:
        return handler(ctx, request)
    response = handler(ctx, _replace(request, groups=keep))
    group_cls = nested(_response_cls(ctx), "OffsetFetchResponseGroup")
    extra = tuple(blank(group_cls, group_id=g.group_id, error_code=GROUP_DENIED) for g in denied)
    return dataclasses.replace(response, groups=tuple(response.groups) + extra)


def _find_coordinator(
    handler: Handler, ctx: HandlerContext, request: api.FindCoordinatorRequest
) -> object:
    # FindCoordinator v0 has no key type: a group's coordinator
    kind = "TRANSACTIONAL_ID" if int(getattr(request, "key_type", 0)) == 1 else "GROUP"
    errno = TXN_DENIED if kind == "TRANSACTIONAL_ID" else GROUP_DENIED
    if ctx.api_version <= ONE_KEY_VERSION:
        key = cast("api.FindCoordinatorRequestOneKey", request).key
        if acl.allowed(ctx, "DESCRIBE", kind, str(key)):
            return handler(ctx, request)
        return blank(_response_cls(ctx), error_code=errno, throttle_time=0, node_id=-1, port=-1)
    keys = cast("api.FindCoordinatorRequestBatched", request).coordinator_keys
    keep = tuple(k for k in keys if acl.allowed(ctx, "DESCRIBE", kind, str(k)))
    denied = [k for k in keys if k not in keep]
    if not denied:
        return handler(ctx, request)
    response = handler(ctx, _replace(request, coordinator_keys=keep))
    coordinator_cls = nested(_response_cls(ctx), "Coordinator")
    extra = tuple(
        blank(coordinator_cls, key=k, node_id=-1, port=-1, error_code=errno) for k in denied
    )
    return dataclasses.replace(response, coordinators=tuple(response.coordinators) + extra)


def _describe_groups(
    handler: Handler,
    ctx: HandlerContext,
    request: api.DescribeGroupsRequest | api.ConsumerGroupDescribeRequest,
    name: str = "groups",
) -> object:
    asked = getattr(request, name)
    keep = tuple(g for g in asked if acl.allowed(ctx, "DESCRIBE", "GROUP", str(g)))
    denied = [g for g in asked if g not in keep]
    if not denied:
        return handler(ctx, request)
    response = handler(ctx, _replace(request, **{name: keep}))
    group_cls = nested(_response_cls(ctx), "DescribedGroup")
    extra = tuple(
        blank(group_cls, group_id=g, error_code=GROUP_DENIED, authorized_operations=-(2**31))
        for g in denied
    )
    return dataclasses.replace(response, groups=tuple(response.groups) + extra)


def _consumer_group_heartbeat(
    handler: Handler, ctx: HandlerContext, request: api.ConsumerGroupHeartbeatRequest
) -> object:
    """Read on the group, and Describe on every topic it names: a heartbeat naming one the
    member may not describe is refused whole, as Kafka refuses it (KAFKA-18813), so that
    neither its assignment nor its answer tells the topic exists. (A regex subscription
    is resolved to the topics the member may describe: ConsumerGroupProtocol.may_describe.)"""
    if not acl.allowed(ctx, "READ", "GROUP", str(request.group_id)):
        return _refuse_all(ctx, GROUP_DENIED)
    names = request.subscribed_topic_names or ()
    if all(acl.allowed(ctx, "DESCRIBE", "TOPIC", str(t)) for t in names):
        return handler(ctx, request)
    return blank(
        _response_cls(ctx),
        error_code=TOPIC_DENIED,
        error_message="TOPIC_AUTHORIZATION_FAILED: the subscription names topics the client "
        "is not authorized to describe",
        member_epoch=-1,
        heartbeat_interval=0,
        throttle_time=0,
    )


def _consumer_group_describe(
    handler: Handler, ctx: HandlerContext, request: api.ConsumerGroupDescribeRequest
) -> object:
    """Groups the principal may not describe: GROUP_AUTHORIZATION_FAILED; a group whose
    members subscribe to or are assigned a topic the principal may not describe:
    TOPIC_AUTHORIZATION_FAILED and no members, as Kafka answers (KAFKA-18813)."""
    response = cast(
        "api.ConsumerGroupDescribeResponse", _describe_groups(handler, ctx, request, "group_ids")
    )
    groups = []
    for group in response.groups:
        topics = {
            str(name)
            for member in group.members
            for name in (
                *(member.subscribed_topic_names or ()),
                *(tp.topic_name for tp in member.assignment.topic_partitions),
                *(tp.topic_name for tp in member.target_assignment.topic_partitions),
            )
        }
        if group.error_code == 0 and not all(
            acl.allowed(ctx, "DESCRIBE", "TOPIC", t) for t in topics
        ):
            group = _replace(
                group,
                error_code=ErrorCode(TOPIC_DENIED),
                error_message="The described group uses topics that the client is not "
                "authorized to describe.",
                members=(),
            )
        groups.append(group)
    return _replace(response, groups=tuple(groups))


def _list_groups(handler: Handler, ctx: HandlerContext, request: api.ListGroupsRequest) -> object:
    response = handler(ctx, request)
    if acl.allowed(ctx, "DESCRIBE", "CLUSTER", CLUSTER):
        return response
    return dataclasses.replace(
        response,
        groups=tuple(
            g for g in response.groups if acl.allowed(ctx, "DESCRIBE", "GROUP", str(g.group_id))
        ),
    )


def _delete_groups(
    handler: Handler, ctx: HandlerContext, request: api.DeleteGroupsRequest
) -> object:
    names = list(request.groups_names)
    keep = tuple(g for g in names if acl.allowed(ctx, "DELETE", "GROUP", str(g)))
    denied = [g for g in names if g not in keep]
    if not denied:
        return handler(ctx, request)
    response = handler(ctx, _replace(request, groups_names=keep))
    result_cls = nested(_response_cls(ctx), "DeletableGroupResult")
    extra = tuple(blank(result_cls, group_id=g, error_code=GROUP_DENIED) for g in denied)
    return dataclasses.replace(response, results=tuple(response.results) + extra)


def _offset_delete(
    handler: Handler, ctx: HandlerContext, request: api.OffsetDeleteRequest
) -> object:
    if not acl.allowed(ctx, "DELETE", "GROUP", str(request.group_id)):
        return _refuse_all(ctx, GROUP_DENIED)
    for topic in request.topics:
        if not acl.allowed(ctx, "READ", "TOPIC", str(topic.name)):
            return _refuse_all(ctx, TOPIC_DENIED)
    return handler(ctx, request)


# -- configs --------------------------------------------------------------------------
def _configs(
    operation: str, results: str, result_cls_name: str
) -> Callable[[Handler, HandlerContext, ConfigsRequest], object]:
    def guard(handler: Handler, ctx: HandlerContext, request: ConfigsRequest) -> object:
        def may(resource: Resource) -> bool:
            if int(resource.resource_type) == 2:
                return acl.allowed(ctx, operation, "TOPIC", str(resource.resource_name))
            return acl.allowed(ctx, operation, "CLUSTER", CLUSTER)

        keep = tuple(r for r in request.resources if may(r))
        denied = [r for r in request.resources if r not in keep]
        if not denied:
            return handler(ctx, request)
        response = handler(ctx, _replace(request, resources=keep))
        result_cls = nested(_response_cls(ctx), result_cls_name)
        extra = tuple(
            blank(
                result_cls,
                error_code=TOPIC_DENIED if int(r.resource_type) == 2 else CLUSTER_DENIED,
                error_message=f"not authorized to {operation.lower()} {r.resource_name!r}",
                resource_type=int(r.resource_type),
                resource_name=r.resource_name,
            )
            for r in denied
        )
        return dataclasses.replace(response, **{results: tuple(getattr(response, results)) + extra})

    return guard


# -- cluster ---------------------------------------------------------------------------
def _cluster(operation: str) -> Callable[[Handler, HandlerContext, object], object]:
    """A check on the cluster for an API answered whole (its request passed on as it is)."""

    def guard(handler: Handler, ctx: HandlerContext, request: object) -> object:
        if acl.allowed(ctx, operation, "CLUSTER", CLUSTER):
            return handler(ctx, request)
        return _refuse_all(ctx, CLUSTER_DENIED)

    return guard


def _cluster_items(
    operation: str, items: str, result_name: str
) -> Callable[[Handler, HandlerContext, object], object]:
    """A cluster check for an API whose answer has one result per request item: refused,
    each item gets CLUSTER_AUTHORIZATION_FAILED, as Kafka's ``getErrorResponse`` answers
    (CreateAcls, DeleteAcls, AlterClientQuotas); an empty list would read as success."""

    def guard(handler: Handler, ctx: HandlerContext, request: object) -> object:
        if acl.allowed(ctx, operation, "CLUSTER", CLUSTER):
            return handler(ctx, request)
        cls = _response_cls(ctx)
        field = next(f for f in dataclasses.fields(cls) if f.name != "throttle_time")
        result_cls = nested(cls, result_name)
        message = f"CLUSTER_AUTHORIZATION_FAILED: not authorized to {operation.lower()} the cluster"
        entity_cls = nested(cls, "EntityData") if items == "entries" else None
        results = []
        for item in getattr(request, items):
            echo: dict[str, object] = {}
            if entity_cls is not None:  # AlterClientQuotas names each entry's entity back
                echo["entity"] = tuple(
                    entity_cls(entity_type=e.entity_type, entity_name=e.entity_name)
                    for e in item.entity
                )
            results.append(
                blank(result_cls, error_code=CLUSTER_DENIED, error_message=message, **echo)
            )
        return blank(cls, throttle_time=0, **{field.name: tuple(results)})

    return guard


def _init_producer_id(
    handler: Handler, ctx: HandlerContext, request: api.InitProducerIdRequest
) -> object:
    txn = getattr(request, "transactional_id", None)
    if txn is not None:
        if acl.allowed(ctx, "WRITE", "TRANSACTIONAL_ID", str(txn)):
            return handler(ctx, request)
        return blank(_response_cls(ctx), error_code=TXN_DENIED, producer_id=-1, producer_epoch=-1)
    # Kafka 3: an idempotent producer needs IdempotentWrite on the cluster or Write on a topic
    if acl.allowed(ctx, "IDEMPOTENT_WRITE", "CLUSTER", CLUSTER) or any(
        acl.allowed(ctx, "WRITE", "TOPIC", name) for name in ctx.broker.root.metadata.image().topics
    ):
        return handler(ctx, request)
    return blank(_response_cls(ctx), error_code=CLUSTER_DENIED, producer_id=-1, producer_epoch=-1)


def _produce(handler: Handler, ctx: HandlerContext, request: api.ProduceRequest) -> object:
    txn = getattr(request, "transactional_id", None)
    if txn is not None and not acl.allowed(ctx, "WRITE", "TRANSACTIONAL_ID", str(txn)):
        return _topics_denied_all(ctx, request, TXN_DENIED)
    return _topics_guard(handler, ctx, request)


# -- transactions (Kafka's KafkaApis: Write on the transactional id, and on topics/groups) ----
#: Kafka's OPERATION_NOT_ATTEMPTED: a partition refused because another one of the request was
OPERATION_NOT_ATTEMPTED = 55


def _txn_allowed(ctx: HandlerContext, txn: str | None) -> bool:
    return acl.allowed(ctx, "WRITE", "TRANSACTIONAL_ID", str(txn))


def _per_partition_refusal(
    ctx: HandlerContext,
    topics: Sequence[RefusedTopic],
    code_of: Callable[[str], int],
    names: tuple[str, str, str, str, str],
) -> object:
    """The response refusing every partition of ``topics``: (results field, topic class,
    partitions field, partition class, error field) name the response's shape."""
    results, topic_name, parts_field, part_name, error_field = names
    cls = _response_cls(ctx)
    topic_cls, part_cls = nested(cls, topic_name), nested(cls, part_name)
    out = tuple(
        blank(
            topic_cls,
            name=t.name,
            **{
                parts_field: tuple(
                    blank(part_cls, partition_index=_index(p), **{error_field: code_of(t.name)})
                    for p in t.partitions
                )
            },
        )
        for t in topics
    )
    return blank(cls, throttle_time=0, **{results: out})


def _index(partition: int | Indexed) -> int:
    return partition if isinstance(partition, int) else int(partition.partition_index)


def _add_partitions_to_txn(
    handler: Handler, ctx: HandlerContext, request: api.AddPartitionsToTxnRequest
) -> object:
    if ctx.api_version >= 4:  # the brokers' batched form: not a client's
        return _cluster("CLUSTER_ACTION")(handler, ctx, request)
    txn_ok = _txn_allowed(ctx, request.v3_and_below_transactional_id)
    topics = request.v3_and_below_topics
    denied = {t.name for t in topics if not acl.allowed(ctx, "WRITE", "TOPIC", str(t.name))}
    if txn_ok and not denied:
        return handler(ctx, request)

    def code_of(name: str) -> int:
        if not txn_ok:
            return TXN_DENIED
        return TOPIC_DENIED if name in denied else OPERATION_NOT_ATTEMPTED

    names = (
        "results_by_topic_v3_and_below",
        "AddPartitionsToTxnTopicResult",
        "results_by_partition",
        "AddPartitionsToTxnPartitionResult",
        "partition_error_code",
    )
    return _per_partition_refusal(ctx, topics, code_of, names)


def _add_offsets_to_txn(
    handler: Handler, ctx: HandlerContext, request: api.AddOffsetsToTxnRequest
) -> object:
    if not _txn_allowed(ctx, request.transactional_id):
        return _refuse_all(ctx, TXN_DENIED)
    if not acl.allowed(ctx, "READ", "GROUP", str(request.group_id)):
        return _refuse_all(ctx, GROUP_DENIED)
    return handler(ctx, request)


def _end_txn(handler: Handler, ctx: HandlerContext, request: api.EndTxnRequest) -> object:
    if not _txn_allowed(ctx, request.transactional_id):
        return _refuse_all(ctx, TXN_DENIED)
    return handler(ctx, request)


def _txn_offset_commit(
    handler: Handler, ctx: HandlerContext, request: api.TxnOffsetCommitRequest
) -> object:
    txn_ok = _txn_allowed(ctx, request.transactional_id)
    group_ok = acl.allowed(ctx, "READ", "GROUP", str(request.group_id))
    denied = {t.name for t in request.topics if not acl.allowed(ctx, "READ", "TOPIC", str(t.name))}
    if txn_ok and group_ok and not denied:
        return handler(ctx, request)

    def code_of(name: str) -> int:
        if not txn_ok:
            return TXN_DENIED
        if not group_ok:
            return GROUP_DENIED
        return TOPIC_DENIED if name in denied else OPERATION_NOT_ATTEMPTED

    names = (
        "topics",
        "TxnOffsetCommitResponseTopic",
        "partitions",
        "TxnOffsetCommitResponsePartition",
        "error_code",
    )
    return _per_partition_refusal(ctx, request.topics, code_of, names)


def _describe_producers(
    handler: Handler, ctx: HandlerContext, request: api.DescribeProducersRequest
) -> object:
    denied = {t.name for t in request.topics if not acl.allowed(ctx, "READ", "TOPIC", str(t.name))}
    if not denied:
        return handler(ctx, request)
    keep = tuple(t for t in request.topics if t.name not in denied)
    response = handler(ctx, _replace(request, topics=keep))
    cls = _response_cls(ctx)
    topic_cls, part_cls = nested(cls, "TopicResponse"), nested(cls, "PartitionResponse")
    extra = tuple(
        blank(
            topic_cls,
            name=t.name,
            partitions=tuple(
                blank(part_cls, partition_index=int(p), error_code=TOPIC_DENIED)
                for p in t.partition_indexes
            ),
        )
        for t in request.topics
        if t.name in denied
    )
    return dataclasses.replace(response, topics=tuple(response.topics) + extra)


def _describe_transactions(
    handler: Handler, ctx: HandlerContext, request: api.DescribeTransactionsRequest
) -> object:
    ids = list(request.transactional_ids)
    keep = tuple(t for t in ids if acl.allowed(ctx, "DESCRIBE", "TRANSACTIONAL_ID", str(t)))
    denied = [t for t in ids if t not in keep]
    if not denied:
        return handler(ctx, request)
    response = handler(ctx, _replace(request, transactional_ids=keep))
    state_cls = nested(_response_cls(ctx), "TransactionState")
    never = datetime.datetime.fromtimestamp(0, datetime.UTC)
    extra = tuple(
        blank(
            state_cls,
            transactional_id=t,
            error_code=TXN_DENIED,
            producer_id=-1,
            producer_epoch=-1,
            transaction_state="",
            transaction_timeout=datetime.timedelta(0),
            transaction_start_time=never,
        )
        for t in denied
    )
    return dataclasses.replace(
        response, transaction_states=tuple(response.transaction_states) + extra
    )


def _list_transactions(
    handler: Handler, ctx: HandlerContext, request: api.ListTransactionsRequest
) -> object:
    """Only the transactional ids the principal may describe are listed, as Kafka does."""
    response = handler(ctx, request)
    visible = tuple(
        t
        for t in response.transaction_states
        if acl.allowed(ctx, "DESCRIBE", "TRANSACTIONAL_ID", str(t.transactional_id))
    )
    return dataclasses.replace(response, transaction_states=visible)


GUARDS: dict[int, Guard] = {
    0: _produce,
    1: _topics_guard,
    2: _topics_guard,
    3: _metadata,
    8: _offset_commit,
    9: _offset_fetch,
    10: _find_coordinator,
    11: _group_whole("READ"),
    12: _group_whole("READ"),
    13: _group_whole("READ"),
    14: _group_whole("READ"),
    15: _describe_groups,
    16: _list_groups,
    19: _topics_guard,
    20: _topics_guard,
    21: _topics_guard,
    22: _init_producer_id,
    23: _topics_guard,
    29: _cluster("DESCRIBE"),
    30: _cluster_items("ALTER", "creations", "AclCreationResult"),
    31: _cluster_items("ALTER", "filters", "DeleteAclsFilterResult"),
    32: _configs("DESCRIBE_CONFIGS", "results", "DescribeConfigsResult"),
    33: _configs("ALTER_CONFIGS", "responses", "AlterConfigsResourceResponse"),
    35: _cluster("DESCRIBE"),
    37: _topics_guard,
    42: _delete_groups,
    44: _configs("ALTER_CONFIGS", "responses", "AlterConfigsResourceResponse"),
    47: _offset_delete,
    48: _cluster("DESCRIBE_CONFIGS"),
    49: _cluster_items("ALTER_CONFIGS", "entries", "EntryData"),
    60: _cluster("DESCRIBE"),
    24: _add_partitions_to_txn,
    25: _add_offsets_to_txn,
    26: _end_txn,
    28: _txn_offset_commit,
    61: _describe_producers,
    65: _describe_transactions,
    66: _list_transactions,
    68: _consumer_group_heartbeat,
    69: _consumer_group_describe,
}


def run(handler: Handler, ctx: HandlerContext, request: object) -> object:
    """The handler's answer, within what the request's principal may do."""
    if ctx.api_key in OPEN_APIS or not acl.checked(ctx):
        return handler(ctx, request)
    guard = GUARDS.get(ctx.api_key)
    if guard is None:  # an API without a check here: super users only
        return _cluster("CLUSTER_ACTION")(handler, ctx, request)
    return guard(handler, ctx, request)
