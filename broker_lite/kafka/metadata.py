"""Metadata and DescribeCluster: every live broker (node id = broker id) and leaders.

Any broker answers for the whole cluster, from memory: topics from the cluster
metadata log's image, the brokers from the live set (each registration carries
the broker's Kafka address), each partition's leader from its shard's.  A partition whose leader has
no Kafka listener is reported as LEADER_NOT_AVAILABLE, so clients retry.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from kio.index import load_response_schema

from sparklog.broker_lite.kafka import acl, auto_create, consumer_offsets, topic_ids
from sparklog.broker_lite.kafka.messages import errno_of, make, nested
from sparklog.broker_lite.kafka.topic_ids import topic_uuid
from sparklog.errors import LeaderNotAvailableError, SparklogError, UnknownTopicIdError
from sparklog.storage.catalog import validate_topic_name

if TYPE_CHECKING:
    from sparklog.broker_lite.kafka.api_types import (
        DescribeClusterRequest,
        DescribeClusterResponse,
        MetadataRequest,
        MetadataResponse,
    )
    from sparklog.broker_lite.kafka.context import BrokerView, HandlerContext


CLUSTER_ID = "sparklog"


def kafka_brokers(broker: BrokerView) -> dict[int, tuple[str, int]]:
    """Live brokers with a Kafka listener: id -> (host, port)."""
    out: dict[int, tuple[str, int]] = {}
    if broker.cluster is None:  # not started: no live broker
        return out
    for info in broker.cluster.live().values():
        address = getattr(info, "kafka_address", None)
        if address:
            host, _, port = address.rpartition(":")
            out[info.broker_id] = (host, int(port))
    return out


def controller_id(brokers: dict[int, tuple[str, int]]) -> int:
    return min(brokers) if brokers else -1


def _named_by_id(broker: BrokerView, topics: Any) -> tuple[list[str], list[uuid.UUID]]:
    """Metadata v10+ topics asked for by id alone (KIP-848 clients look up the ids their
    assignment names): (the names of those found, the ids not found)."""
    names, unknown = [], []
    for t in topics:
        topic_id = getattr(t, "topic_id", None)
        if t.name is not None or topic_id is None or topic_id.int == 0:
            continue
        name = topic_ids.name_of(broker, topic_id)
        if name is None:
            unknown.append(topic_id)
        else:
            names.append(name)
    return names, unknown


def handle_metadata(ctx: HandlerContext, request: MetadataRequest) -> MetadataResponse:
    cls = load_response_schema(3, ctx.api_version)
    broker_cls = nested(cls, "MetadataResponseBroker")
    topic_cls = nested(cls, "MetadataResponseTopic")
    partition_cls = nested(cls, "MetadataResponsePartition")
    broker = ctx.broker
    brokers = kafka_brokers(broker)
    if request.topics is None or (ctx.api_version == 0 and not request.topics):
        # every topic the caller may describe, and only those are built: another tenant's
        # topics and partitions cost this answer nothing (an ACL check each, not a build)
        wanted: list[str] = [
            name
            for name in (*broker.root.list_topics(), consumer_offsets.TOPIC)
            if acl.allowed(ctx, "DESCRIBE", "TOPIC", name)
        ]
    else:
        wanted = [t.name for t in request.topics if t.name is not None]
    by_id, unknown_ids = _named_by_id(broker, request.topics or ())
    wanted += [n for n in by_id if n not in wanted]
    known = set(broker.root.list_topics())
    if request.topics and getattr(request, "allow_auto_topic_creation", True):
        principal = ctx.session.principal if ctx.session is not None else None
        known = auto_create.create_missing(broker, wanted, known, principal)  # Kafka's
    try:
        found = broker.metadata([n for n in wanted if n in known])["topics"]
    except SparklogError:
        found = {}  # a damaged topic among them: answer one by one, each with its error
    topics = [
        make(
            topic_cls,
            error_code=UnknownTopicIdError.errno,
            name=None,
            topic_id=topic_id,
            is_internal=False,
            partitions=(),
        )
        for topic_id in unknown_ids
    ]
    for name in wanted:
        if consumer_offsets.is_topic(name):
            topics.append(_consumer_offsets(topic_cls, partition_cls, brokers))
            continue
        try:
            if name not in known:
                validate_topic_name(name)  # Kafka: INVALID_TOPIC_EXCEPTION for such a name
            meta = found.get(name) or broker.metadata([name])["topics"][name]
        except SparklogError as exc:
            topics.append(
                make(
                    topic_cls,
                    error_code=errno_of(exc),
                    name=name,
                    topic_id=uuid.UUID(int=0),
                    is_internal=False,
                    partitions=(),
                )
            )
            continue
        partitions = []
        for p in meta["partitions"]:
            leader = p["leader_id"]
            error = 0
            if leader not in brokers:
                error, leader = LeaderNotAvailableError.errno, -1
            # the leader, then the brokers that would take the partition over, as many as
            # the topic's replication factor (all in sync: they read one object store)
            nodes = (
                (leader, *(r for r in p.get("replicas", ()) if r != leader and r in brokers))
                if leader >= 0
                else ()
            )
            partitions.append(
                make(
                    partition_cls,
                    error_code=error,
                    partition_index=p["partition"],
                    leader_id=leader,
                    leader_epoch=-1,
                    replica_nodes=nodes,
                    isr_nodes=nodes,
                    offline_replicas=(),
                )
            )
        topics.append(
            make(
                topic_cls,
                error_code=0,
                name=name,
                topic_id=topic_uuid(meta.get("topic_id", "")),
                is_internal=False,
                partitions=tuple(partitions),
            )
        )
    return make(
        cls,
        throttle_time=0,
        brokers=tuple(
            make(broker_cls, node_id=bid, host=host, port=port, rack=None)
            for bid, (host, port) in sorted(brokers.items())
        ),
        cluster_id=CLUSTER_ID,
        controller_id=controller_id(brokers),
        topics=tuple(topics),
    )


def _consumer_offsets(topic_cls: type, partition_cls: type, brokers: dict[int, Any]) -> Any:
    """The derived internal topic (:mod:`~sparklog.broker_lite.kafka.consumer_offsets`)."""
    partitions = []
    for p in range(consumer_offsets.PARTITIONS):
        leader = consumer_offsets.leader_of(p, list(brokers))
        nodes = (leader,) if leader >= 0 else ()
        partitions.append(
            make(
                partition_cls,
                error_code=0 if leader >= 0 else LeaderNotAvailableError.errno,
                partition_index=p,
                leader_id=leader,
                leader_epoch=-1,
                replica_nodes=nodes,
                isr_nodes=nodes,
                offline_replicas=(),
            )
        )
    return make(
        topic_cls,
        error_code=0,
        name=consumer_offsets.TOPIC,
        topic_id=consumer_offsets.TOPIC_ID,
        is_internal=True,
        partitions=tuple(partitions),
    )


def handle_describe_cluster(
    ctx: HandlerContext, request: DescribeClusterRequest
) -> DescribeClusterResponse:
    cls = load_response_schema(60, ctx.api_version)
    broker_cls = nested(cls, "DescribeClusterBroker")
    brokers = kafka_brokers(ctx.broker)
    return make(
        cls,
        throttle_time=0,
        error_code=0,
        error_message=None,
        endpoint_type=1,
        cluster_id=CLUSTER_ID,
        controller_id=controller_id(brokers),
        brokers=tuple(
            make(broker_cls, broker_id=bid, host=host, port=port, rack=None)
            for bid, (host, port) in sorted(brokers.items())
        ),
        cluster_authorized_operations=-2147483648,
    )
