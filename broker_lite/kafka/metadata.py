"""Metadata and DescribeCluster: every live broker (node id = broker id) and leaders.

Any broker answers for the whole cluster, from memory: topics from the cluster
metadata log's image, the brokers from the live set (each registration carries
the broker's Kafka address), each partition's leader from its shard's.  A partition whose leader has
no Kafka listener is reported as LEADER_NOT_AVAILABLE, so clients retry.

A topic's entry in the answer depends only on the answer's version, the topic's
document version and its leaders (as :meth:`Cluster.leadership_inputs` and
:meth:`Cluster.shard_count` name them, and the brokers with a Kafka listener), so
:class:`TopicEntries` keeps each
entry, built once and encoded once by kio, under those; the answer is written as
kio writes it, the topics array spliced from the kept bytes (:meth:`TopicEntries.write`).
An all-topics answer at 5,000 topics was some 200,000 small pure-Python writes of kio's
(issue 37 item 6: CPU within 5x of 1,000 topics'); it is now a few thousand.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from kio.index import load_response_schema

from sparklog.broker_lite.kafka import acl, auto_create, consumer_offsets, topic_ids
from sparklog.broker_lite.kafka.messages import errno_of, make, nested
from sparklog.broker_lite.kafka.metadata_entries import TopicEntries
from sparklog.broker_lite.kafka.topic_ids import topic_uuid
from sparklog.errors import (
    InvalidRequestError,
    LeaderNotAvailableError,
    SparklogError,
    UnknownTopicIdError,
)
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
#: Kafka's key of the Metadata API
API_KEY = 3


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


def _refused_by_id(cls: type, request: MetadataRequest) -> MetadataResponse:
    """Kafka's answer to a Metadata v10-v11 request naming a topic by id: those versions
    carry the field but answer only names, so the request is INVALID_REQUEST on each
    topic it asks for (a missing name answered as "", as Kafka's error answer does)."""
    topic_cls = nested(cls, "MetadataResponseTopic")
    return make(
        cls,
        throttle_time=0,
        brokers=(),
        cluster_id=None,
        controller_id=-1,
        topics=tuple(
            make(
                topic_cls,
                error_code=InvalidRequestError.errno,
                name=t.name if t.name is not None else "",
                topic_id=getattr(t, "topic_id", None) or uuid.UUID(int=0),
                is_internal=False,
                partitions=(),
            )
            for t in request.topics or ()
        ),
    )


def handle_metadata(ctx: HandlerContext, request: MetadataRequest) -> MetadataResponse:
    cls = load_response_schema(API_KEY, ctx.api_version)
    if 10 <= ctx.api_version < 12 and any(
        t.name is None or (getattr(t, "topic_id", None) or uuid.UUID(int=0)).int
        for t in request.topics or ()
    ):
        return _refused_by_id(cls, request)
    broker_cls = nested(cls, "MetadataResponseBroker")
    broker = ctx.broker
    brokers = kafka_brokers(broker)
    entries = ctx.listener.metadata_entries
    view = entries.view(entries_view(broker, brokers))
    # the image's topic documents: a new map whenever a topic changes (copy on write)
    docs = broker.root.metadata.image().topics
    every = request.topics is None or (ctx.api_version == 0 and not request.topics)
    everyone = not acl.checked(ctx)
    # an all-topics answer with no ACL checks: the same image and view, the same answer
    topics = entries.whole(cls, docs, view) if every and everyone else None
    if topics is None:
        topics = tuple(_topics(ctx, request, cls, view, every, everyone))
        if (
            every
            and everyone
            and view is not None
            and broker.root.metadata.image().topics is docs
            and entries.view(entries_view(broker, kafka_brokers(broker))) is view
            and all(entries.is_kept(t) for t in topics)
        ):
            entries.keep_whole(cls, docs, view, topics)
    return make(
        cls,
        throttle_time=0,
        brokers=tuple(
            make(broker_cls, node_id=bid, host=host, port=port, rack=None)
            for bid, (host, port) in sorted(brokers.items())
        ),
        cluster_id=CLUSTER_ID,
        controller_id=controller_id(brokers),
        topics=topics,
    )


def _topics(
    ctx: HandlerContext,
    request: MetadataRequest,
    cls: type,
    view: object,
    every: bool,
    everyone: bool,
) -> list[Any]:
    """The answer's topics: each kept entry that holds, the others built (and kept)."""
    broker = ctx.broker
    brokers = kafka_brokers(broker)
    topic_cls = nested(cls, "MetadataResponseTopic")
    listed = broker.root.list_topics()
    if every:
        # every topic the caller may describe, and only those are built: another tenant's
        # topics and partitions cost this answer nothing (an ACL check each, not a build;
        # none where the request's checks do not run)
        wanted: list[str] = [
            name
            for name in (*listed, consumer_offsets.TOPIC)
            if everyone or acl.allowed(ctx, "DESCRIBE", "TOPIC", name)
        ]
    else:
        wanted = [t.name for t in request.topics or () if t.name is not None]
    by_id, unknown_ids = _named_by_id(broker, request.topics or ())
    wanted += [n for n in by_id if n not in wanted]
    known = set(listed)
    if request.topics and getattr(request, "allow_auto_topic_creation", True):
        principal = ctx.session.principal if ctx.session is not None else None
        known = auto_create.create_missing(broker, wanted, known, principal)  # Kafka's
    entries = ctx.listener.metadata_entries
    if every:
        entries.forget_others(cls, known)
    kept, inputs = entries.find(
        cls,
        broker.root.metadata.image().topics,
        view,
        [n for n in wanted if n in known or _internal(n)],
    )
    built = _built(broker, topic_cls, brokers, [n for n in wanted if n not in kept], known)
    _hits, after = entries.find(
        cls,
        broker.root.metadata.image().topics,
        entries.view(entries_view(broker, brokers)),
        [n for n in built if n in inputs],
    )
    for name, topic in built.items():
        if name in inputs and name in after and not topic.error_code:
            entries.keep(cls, name, inputs[name], topic, after[name])
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
    topics += [kept.get(name) or built[name] for name in wanted]
    return topics


def _built(
    broker: BrokerView,
    topic_cls: type,
    brokers: dict[int, tuple[str, int]],
    names: list[str],
    known: set[str],
) -> dict[str, Any]:
    """The answer's entries of ``names`` built afresh (those not kept): each topic with its
    partitions and leaders, or with the error that stands for it."""
    partition_cls = nested(topic_cls, "MetadataResponsePartition")
    try:
        found = broker.metadata([n for n in names if n in known and not _internal(n)])["topics"]
    except SparklogError:
        found = {}  # a damaged topic among them: answer one by one, each with its error
    out: dict[str, Any] = {}
    for name in names:
        if _internal(name):
            out[name] = _consumer_offsets(topic_cls, partition_cls, brokers)
            continue
        try:
            if name not in known:
                validate_topic_name(name)  # Kafka: INVALID_TOPIC_EXCEPTION for such a name
            meta = found.get(name) or broker.metadata([name])["topics"][name]
        except SparklogError as exc:
            out[name] = make(
                topic_cls,
                error_code=errno_of(exc),
                name=name,
                topic_id=uuid.UUID(int=0),
                is_internal=False,
                partitions=(),
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
        out[name] = make(
            topic_cls,
            error_code=0,
            name=name,
            topic_id=topic_uuid(meta.get("topic_id", "")),
            is_internal=False,
            partitions=tuple(partitions),
        )
    return out


def _internal(name: str) -> bool:
    return consumer_offsets.is_topic(name)


def topic_entries() -> TopicEntries:
    """A listener's kept Metadata entries (the internal topic's follow the brokers)."""
    return TopicEntries(undocumented=(consumer_offsets.TOPIC,))


def entries_view(
    broker: BrokerView, brokers: dict[int, tuple[str, int]]
) -> tuple[object, ...] | None:
    """What every topic's entry is built from besides its document: the leadership
    inputs (:meth:`Cluster.leadership_inputs`) and the brokers with a Kafka listener;
    None before the broker started (nothing is kept)."""
    cluster = broker.cluster
    if cluster is None:
        return None
    live = tuple(sorted(cluster.live()))
    return (cluster.leadership_inputs(live), tuple(sorted(brokers.items())))


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
