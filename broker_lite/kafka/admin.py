"""Admin APIs: topics, partitions, topic configs, DeleteRecords and OffsetDelete.

Topics are sparklog topics: CreateTopics makes one in the root, configs are
the topic configs sparklog knows (Kafka's names: retention.ms, cleanup.policy,
message.timestamp.type, max.message.bytes ...); an unknown key is refused by
the storage layer with INVALID_CONFIG.  Broker resources (type 4) are
described with no entries: brokers are configured by conf/broker.toml.
"""

from __future__ import annotations

import uuid
from functools import partial
from typing import TYPE_CHECKING, Any, cast

from kio.index import load_response_schema

from sparklog.broker_lite import topic_caps
from sparklog.broker_lite.kafka import consumer_offsets
from sparklog.broker_lite.kafka.messages import errno_of, make, nested, outcome
from sparklog.broker_lite.kafka.topic_ids import topic_uuid
from sparklog.errors import (
    InvalidRequestError,
    SecurityDisabledError,
    SparklogError,
    UnknownTopicIdError,
    UnknownTopicOrPartitionError,
)
from sparklog.storage.catalog import (
    replication_factor_of,
    validate_topic_name,
)
from sparklog.storage.config import (
    CONFIG_TYPES,
    TOPIC_CONFIG_KEYS,
)

if TYPE_CHECKING:
    from sparklog.broker_lite.kafka.api_types import (
        AlterConfigsRequest,
        AlterConfigsResponse,
        CreatePartitionsRequest,
        CreatePartitionsResponse,
        CreateTopicsRequest,
        CreateTopicsResponse,
        DeleteRecordsRequest,
        DeleteRecordsResponse,
        DeleteTopicsRequest,
        DeleteTopicsRequestById,
        DeleteTopicsRequestByName,
        DeleteTopicsResponse,
        DescribeAclsRequest,
        DescribeAclsResponse,
        DescribeConfigsRequest,
        DescribeConfigsResponse,
        IncrementalAlterConfigsRequest,
        IncrementalAlterConfigsResponse,
        OffsetDeleteRequest,
        OffsetDeleteResponse,
    )
    from sparklog.broker_lite.kafka.context import BrokerView, HandlerContext


TOPIC = 2
BROKER = 4
#: Kafka's config sources: DYNAMIC_TOPIC_CONFIG, STATIC_BROKER_CONFIG and DEFAULT_CONFIG.
SOURCE_TOPIC = 1
SOURCE_STATIC_BROKER = 4
SOURCE_DEFAULT = 5
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def handle_create_topics(ctx: HandlerContext, request: CreateTopicsRequest) -> CreateTopicsResponse:
    cls = load_response_schema(19, ctx.api_version)
    result_cls = nested(cls, "CreatableTopicResult")
    results = []
    principal = ctx.session.principal if ctx.session is not None else None
    pending = [0, 0]  # validate_only: topics and partitions this request would add
    for topic in request.topics:
        error, message, partitions, topic_id = 0, None, -1, uuid.UUID(int=0)
        factor = -1
        try:
            if topic.assignments:
                raise InvalidRequestError(
                    "manual replica assignments are not accepted; sparklog's data lives in the "
                    "shared root and leaders follow the live brokers"
                )
            count = int(topic.num_partitions)
            if count == -1:  # the broker's default, as Kafka's num.partitions
                count = int(ctx.broker.config.num_partitions)
            config = {c.name: c.value for c in topic.configs if c.value is not None}
            validate_topic_name(topic.name)
            consumer_offsets.refuse_create(topic.name)
            if request.validate_only:  # what the real request checks, nothing written
                cluster = ctx.broker.cluster
                live = max(1, len(cluster.live()) if cluster is not None else 0)
                factor = replication_factor_of(int(topic.replication_factor), live)
                ctx.broker.root.check_new_topic(topic.name, count, config)
                image = ctx.broker.root.metadata.image()
                topic_caps.check(
                    ctx.broker.config, image, principal, pending[0] + 1, pending[1] + count
                )
                pending[0], pending[1] = pending[0] + 1, pending[1] + count
            else:
                made = ctx.broker.create_topic(
                    topic.name,
                    count,
                    config,
                    replication_factor=int(topic.replication_factor),
                    created_by=principal,
                )
                topic_id = topic_uuid(made.get("topic_id", ""))
                factor = int(made["replication_factor"])
            partitions = count
        except SparklogError as exc:
            error, message = errno_of(exc), str(exc)
        results.append(
            make(
                result_cls,
                name=topic.name,
                topic_id=topic_id,
                error_code=error,
                error_message=message,
                topic_config_error_code=0,
                num_partitions=partitions,
                replication_factor=-1 if error else factor,
                configs=None if error else (),
            )
        )
    return make(cls, throttle_time=0, topics=tuple(results))


def handle_delete_topics(ctx: HandlerContext, request: DeleteTopicsRequest) -> DeleteTopicsResponse:
    cls = load_response_schema(20, ctx.api_version)
    result_cls = nested(cls, "DeletableTopicResult")
    results = []
    named: list[tuple[str | None, uuid.UUID | None]]
    if ctx.api_version >= 6:  # topics by name or by id
        named = [(t.name, t.topic_id) for t in cast("DeleteTopicsRequestById", request).topics]
    else:
        by_name = cast("DeleteTopicsRequestByName", request)
        named = [(name, uuid.UUID(int=0)) for name in by_name.topic_names]
    for name, topic_id in named:
        error, message, found = outcome(partial(_topic_name, ctx.broker, name, topic_id))
        if not error:
            error, message, _ = outcome(partial(_delete_topic, ctx.broker, found))
        results.append(
            make(
                result_cls,
                name=found if not error else name,
                topic_id=topic_id,
                error_code=error,
                error_message=message,
            )
        )
    return make(cls, throttle_time=0, responses=tuple(results))


def _delete_topic(broker: BrokerView, name: str) -> None:
    consumer_offsets.refuse_write(name, "DeleteTopics")
    broker.delete_topic(name)


def _topic_name(broker: BrokerView, name: str | None, topic_id: uuid.UUID | None) -> str:
    """The topic a DeleteTopics v6 entry names, by name or by id."""
    if name:
        return name
    for candidate in broker.root.list_topics():
        if topic_uuid(broker.topic(candidate).info.topic_id) == topic_id:
            return str(candidate)
    raise UnknownTopicIdError(f"no topic has id {topic_id}")


def handle_create_partitions(
    ctx: HandlerContext, request: CreatePartitionsRequest
) -> CreatePartitionsResponse:
    cls = load_response_schema(37, ctx.api_version)
    result_cls = nested(cls, "CreatePartitionsTopicResult")

    def add(topic: Any) -> None:
        consumer_offsets.refuse_write(topic.name, "CreatePartitions")
        if topic.assignments:
            raise InvalidRequestError("manual replica assignments are not accepted")
        # validate_only: what the real request checks, nothing written
        ctx.broker.add_partitions(
            topic.name, int(topic.count), validate_only=bool(request.validate_only)
        )

    results = []
    for topic in request.topics:
        error, message, _ = outcome(partial(add, topic))
        results.append(make(result_cls, name=topic.name, error_code=error, error_message=message))
    return make(cls, throttle_time=0, results=tuple(results))


def handle_delete_records(
    ctx: HandlerContext, request: DeleteRecordsRequest
) -> DeleteRecordsResponse:
    cls = load_response_schema(21, ctx.api_version)
    topic_cls = nested(cls, "DeleteRecordsTopicResult")
    part_cls = nested(cls, "DeleteRecordsPartitionResult")
    topics = []
    for t in request.topics:
        parts = []
        for p in t.partitions:
            error, _, low = outcome(
                partial(_delete_records, ctx.broker, t.name, int(p.partition_index), int(p.offset))
            )
            parts.append(
                make(
                    part_cls,
                    partition_index=p.partition_index,
                    low_watermark=-1 if error else low,
                    error_code=error,
                )
            )
        topics.append(make(topic_cls, name=t.name, partitions=tuple(parts)))
    return make(cls, throttle_time=0, topics=tuple(topics))


def _delete_records(broker: BrokerView, topic: str, partition: int, offset: int) -> int:
    consumer_offsets.refuse_write(topic, "DeleteRecords")
    return int(broker.delete_records(topic, partition, offset))


def broker_configs(broker: BrokerView, name: str) -> list[tuple[str, str]]:
    """A broker resource's read-only entries: its listeners, so a tool that reached the
    Kafka port learns the Flight address (``sparklog.flight.address``) too."""
    if name in ("", str(broker.config.broker_id)):
        broker_id = int(broker.config.broker_id)
    else:
        try:
            broker_id = int(name)
        except ValueError:
            raise InvalidRequestError(
                f"broker resource {name!r} is not accepted; accepted: a broker id or ''"
            ) from None
    info = broker.cluster.live().get(broker_id) if broker.cluster is not None else None
    if info is None:
        raise InvalidRequestError(f"broker {broker_id} is not live; accepted: a live broker's id")
    return [
        ("broker.id", str(broker_id)),
        ("advertised.listeners", f"PLAINTEXT://{info.kafka_address}" if info.kafka_address else ""),
        ("sparklog.flight.address", str(info.location)),
        ("auto.create.topics.enable", str(bool(broker.config.auto_create_topics_enable)).lower()),
        ("num.partitions", str(broker.config.num_partitions)),
    ]


def _config_entry(
    entry_cls: type,
    documented: bool,
    is_topic: bool,
    name: str,
    value: str | None,
    read_only: bool,
    source: int,
) -> Any:
    """One DescribeConfigs entry; a topic key carries Kafka's config type (and its meaning,
    when documentation is asked for)."""
    topic_key = TOPIC_CONFIG_KEYS.get(name) if is_topic else None
    return make(
        entry_cls,
        name=name,
        value=value,
        read_only=read_only,
        is_default=source == SOURCE_DEFAULT,
        config_source=source,
        is_sensitive=False,
        synonyms=(),
        config_type=CONFIG_TYPES.get(name, 0) if topic_key is not None else 0,
        documentation=topic_key.doc if topic_key is not None and documented else None,
    )


def handle_describe_configs(
    ctx: HandlerContext, request: DescribeConfigsRequest
) -> DescribeConfigsResponse:
    cls = load_response_schema(32, ctx.api_version)
    result_cls = nested(cls, "DescribeConfigsResult")
    entry_cls = nested(cls, "DescribeConfigsResourceResult")
    results = []
    for resource in request.resources:
        error, message, entries = 0, None, []
        documented = bool(getattr(request, "include_documentation", False))
        entry = partial(_config_entry, entry_cls, documented, resource.resource_type == TOPIC)
        wanted = resource.configuration_keys
        try:
            if resource.resource_type == TOPIC and consumer_offsets.is_topic(
                resource.resource_name
            ):
                entries = [
                    entry(name, value, True, SOURCE_DEFAULT)
                    for name, value in consumer_offsets.CONFIGS
                    if wanted is None or name in wanted
                ]
            elif resource.resource_type == TOPIC:
                ctx.broker.topic(resource.resource_name).reload()
                info = ctx.broker.topic(resource.resource_name).info
                for name, value in sorted(info.effective_config.items()):
                    if wanted is not None and name not in wanted:
                        continue
                    source = SOURCE_TOPIC if name in info.config else SOURCE_DEFAULT
                    entries.append(entry(name, _text(value), False, source))
            elif resource.resource_type == BROKER:
                entries = [
                    entry(name, value, True, SOURCE_STATIC_BROKER)
                    for name, value in broker_configs(ctx.broker, resource.resource_name)
                    if wanted is None or name in wanted
                ]
            else:
                raise InvalidRequestError(
                    f"resource type {resource.resource_type} is not accepted; accepted: 2 "
                    "(topic), 4 (broker)"
                )
        except SparklogError as exc:
            error, message, entries = errno_of(exc), str(exc), []
        results.append(
            make(
                result_cls,
                error_code=error,
                error_message=message,
                resource_type=resource.resource_type,
                resource_name=resource.resource_name,
                configs=tuple(entries),
            )
        )
    return make(cls, throttle_time=0, results=tuple(results))


def _alter(
    ctx: HandlerContext,
    request: AlterConfigsRequest | IncrementalAlterConfigsRequest,
    cls: type,
    incremental: bool,
) -> AlterConfigsResponse | IncrementalAlterConfigsResponse:
    result_cls = nested(cls, "AlterConfigsResourceResponse")
    results = []
    for resource in request.resources:
        error, message = 0, None
        try:
            if resource.resource_type != TOPIC:
                raise InvalidRequestError(
                    f"resource type {resource.resource_type} cannot be altered; accepted: 2 "
                    "(topic); brokers are configured by conf/broker.toml"
                )
            name = resource.resource_name
            consumer_offsets.refuse_write(name, "altering its configs")
            updates: dict[str, Any] = {}
            remove: list[str] = []
            for c in resource.configs:
                op = int(getattr(c, "config_operation", SET))
                if op == SET and c.value is not None:
                    updates[c.name] = c.value
                elif op == DELETE or c.value is None:
                    remove.append(c.name)
                else:
                    raise InvalidRequestError(
                        f"config operation {op} on {c.name!r} is not accepted; accepted: 0 "
                        "(set), 1 (delete)"
                    )
            # validate_only: what the real request checks, nothing written; AlterConfigs
            # replaces the whole set of alterable keys, as the metadata log holds them at the
            # change (this broker's topic handle may hold an older config)
            ctx.broker.alter_topic_config(
                name,
                updates,
                remove,
                validate_only=bool(request.validate_only),
                replace=not incremental,
            )
        except SparklogError as exc:
            error, message = errno_of(exc), str(exc)
        results.append(
            make(
                result_cls,
                error_code=error,
                error_message=message,
                resource_type=resource.resource_type,
                resource_name=resource.resource_name,
            )
        )
    return make(cls, throttle_time=0, responses=tuple(results))


def handle_alter_configs(ctx: HandlerContext, request: AlterConfigsRequest) -> AlterConfigsResponse:
    cls = load_response_schema(33, ctx.api_version)
    return cast("AlterConfigsResponse", _alter(ctx, request, cls, incremental=False))


def handle_incremental_alter_configs(
    ctx: HandlerContext, request: IncrementalAlterConfigsRequest
) -> IncrementalAlterConfigsResponse:
    cls = load_response_schema(44, ctx.api_version)
    return cast("IncrementalAlterConfigsResponse", _alter(ctx, request, cls, incremental=True))


def handle_offset_delete(ctx: HandlerContext, request: OffsetDeleteRequest) -> OffsetDeleteResponse:
    """OffsetDelete: drop a group's committed offsets, as the group coordinator allows.

    An unknown group is a top-level GROUP_ID_NOT_FOUND; per partition, a topic
    the broker does not know is UNKNOWN_TOPIC_OR_PARTITION and a topic active
    members are subscribed to GROUP_SUBSCRIBED_TO_TOPIC (its offset stays).
    """
    cls = load_response_schema(47, ctx.api_version)
    topic_cls = nested(cls, "OffsetDeleteResponseTopic")
    part_cls = nested(cls, "OffsetDeleteResponsePartition")
    errors: dict[tuple[str, int], int] = {}
    known: list[tuple[str, int]] = []
    for t in request.topics:
        try:
            ctx.broker.topic(t.name)
            exists = True
        except UnknownTopicOrPartitionError:
            exists = False
        for p in t.partitions:
            tp = (str(t.name), int(p.partition_index))
            if exists:
                known.append(tp)
            else:
                errors[tp] = UnknownTopicOrPartitionError.errno
    try:
        outcome = ctx.broker.groups.delete_offsets(request.group_id, known)
    except SparklogError as exc:
        return make(cls, error_code=errno_of(exc), throttle_time=0, topics=())
    errors.update({tp: 0 if err is None else errno_of(err) for tp, err in outcome.items()})
    topics = [
        make(
            topic_cls,
            name=t.name,
            partitions=tuple(
                make(
                    part_cls,
                    partition_index=p.partition_index,
                    error_code=errors.get((str(t.name), int(p.partition_index)), 0),
                )
                for p in t.partitions
            ),
        )
        for t in request.topics
    ]
    return make(cls, error_code=0, throttle_time=0, topics=tuple(topics))


def handle_describe_acls(ctx: HandlerContext, request: DescribeAclsRequest) -> DescribeAclsResponse:
    """DescribeAcls: SECURITY_DISABLED, Kafka's answer when no authorizer is configured.

    sparklog has no ACLs (access is the storage root's and the network's business),
    so tools listing ACLs get the clean error Kafka gives them without an authorizer.
    """
    cls = load_response_schema(29, ctx.api_version)
    return make(
        cls,
        throttle_time=0,
        error_code=SecurityDisabledError.errno,
        error_message="no authorizer is configured: sparklog has no ACLs",
        resources=(),
    )
