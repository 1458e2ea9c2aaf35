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

import dataclasses
import io
import threading
import uuid
from collections.abc import Callable
from functools import cache
from typing import IO, TYPE_CHECKING, Any, cast

from kio.index import load_response_schema
from kio.serial import entity_writer
from kio.serial.writers import (
    Writable,
    compact_array_writer,
    legacy_array_writer,
    write_compact_array_length,
    write_legacy_array_length,
)
from kio.static.primitive import i32

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


def handle_metadata(ctx: HandlerContext, request: MetadataRequest) -> MetadataResponse:
    cls = load_response_schema(API_KEY, ctx.api_version)
    broker_cls = nested(cls, "MetadataResponseBroker")
    broker = ctx.broker
    brokers = kafka_brokers(broker)
    entries = ctx.listener.metadata_entries
    view = entries.view(broker, brokers)
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
            and entries.view(broker, kafka_brokers(broker)) is view
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
        cls, broker, view, [n for n in wanted if n in known or _internal(n)]
    )
    built = _built(broker, topic_cls, brokers, [n for n in wanted if n not in kept], known)
    _hits, after = entries.find(
        cls, broker, entries.view(broker, brokers), [n for n in built if n in inputs]
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


#: the name of the probe topic :meth:`TopicEntries.write` finds the topics array by (no
#: topic can have it: Kafka's names are letters, digits, '.', '_' and '-')
PROBE_NAME = "\x00sparklog metadata answer's topics array\x00"


class TopicEntries:
    """Each topic's entry of the Metadata answer, built once and encoded once by kio.

    An entry depends only on the answer's version (its kio class), the topic's document
    (in the metadata image, replaced whenever the topic changes: id, partitions, shards,
    replication factor), its leaders and replicas (what
    :meth:`Cluster.leadership_inputs` names besides the document) and which brokers
    have a Kafka listener; kept with those, it is rebuilt when any of them changes and
    never otherwise.  Its bytes are kio's encoding of it, so an answer whose topics are
    kept entries is written as kio would write it (:meth:`write`), without walking them
    again.  A kept entry is found by comparing what it was built from by identity,
    allocating nothing per topic (at 5,000 topics, a key tuple per topic and request
    cost more in garbage collection than it saved).  An all-topics answer for a request
    without ACL checks is the same while the image's topic documents and the view are
    (:meth:`whole`): its topics and their bytes are kept whole too.  One per listener;
    request threads share it (a race builds an entry twice, never keeps a wrong one: an
    entry is kept only if
    what it is built from held while it was built).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: answer class -> topic name -> the kept entry
        self._entries: dict[type, dict[str, _Kept]] = {}
        #: id of a kept entry -> (the entry, kio's bytes of it)
        self._encoded: dict[int, tuple[Any, bytes]] = {}
        #: the last request's view (reused while equal, so kept entries compare by identity)
        self._view: tuple[object, ...] = ()
        #: answer class -> (the image's topic documents, view, every topic's entry) of the
        #: last whole answer
        self._whole: dict[type, tuple[object, object, tuple[Any, ...]]] = {}
        #: answer class -> (a whole answer's topics, the bytes of its topics array's items)
        self._whole_bytes: dict[type, tuple[tuple[Any, ...], bytes]] = {}

    def view(
        self, broker: BrokerView, brokers: dict[int, tuple[str, int]]
    ) -> tuple[object, ...] | None:
        """What every topic's entry is built from besides its document: the leadership
        inputs and the brokers with a Kafka listener (None before the broker started:
        nothing is kept).  The same object while it is equal."""
        cluster = broker.cluster
        if cluster is None:
            return None
        live = tuple(sorted(cluster.live()))
        view = (cluster.leadership_inputs(live), tuple(sorted(brokers.items())))
        with self._lock:
            if view == self._view:
                return self._view
            self._view = view
        return view

    def whole(self, cls: type, docs: object, view: object) -> tuple[Any, ...] | None:
        """Every topic's entry (the internal topic's last) of the last all-topics answer of
        class ``cls``, if it was made from ``docs`` (the image's map of topic documents,
        replaced whenever a topic changes) and ``view``."""
        kept = self._whole.get(cls)
        if kept is None or kept[0] is not docs or kept[1] is not view:
            return None
        return kept[2]

    def keep_whole(self, cls: type, docs: object, view: object, topics: tuple[Any, ...]) -> None:
        """Keep an all-topics answer's ``topics``, made from ``docs`` and ``view``."""
        with self._lock:
            self._whole[cls] = (docs, view, topics)

    def find(
        self, cls: type, broker: BrokerView, view: object, names: list[str]
    ) -> tuple[dict[str, Any], dict[str, _Inputs]]:
        """({name: kept entry} of ``names`` whose entries hold, {name: what it is built
        from} of the others that may be kept once built); a topic not in the image now,
        or any topic when ``view`` is None, is in neither: it is built each time."""
        if view is None:
            return {}, {}
        kept = self._entries.get(cls, {})
        hits: dict[str, Any] = {}
        misses: dict[str, _Inputs] = {}
        # a topic's document in the image: replaced when the topic changes, never edited
        # (what LogRoot.describe_topic keeps its descriptions by)
        docs = broker.root.metadata.image().topics
        for name in names:
            if name == consumer_offsets.TOPIC:  # its leaders follow the Kafka brokers alone
                doc = None
            else:
                doc = docs.get(name)
                if doc is None:  # (deleted since it was listed: built, with its error)
                    continue
            entry = kept.get(name)
            if entry is not None and entry.doc is doc and entry.view is view:
                hits[name] = entry.entry
            else:
                misses[name] = (doc, view)
        return hits, misses

    def keep(self, cls: type, name: str, inputs: _Inputs, entry: Any, after: _Inputs) -> None:
        """Keep ``entry``, built from ``inputs``, with its bytes, unless they changed while
        it was built (``after``, taken after: the entry may mix both)."""
        if inputs[0] is not after[0] or inputs[1] is not after[1]:
            return
        data = _encoded(entity_writer(type(entry)), entry)
        with self._lock:
            entries = self._entries.setdefault(cls, {})
            old = entries.get(name)
            if old is not None:
                self._encoded.pop(id(old.entry), None)
            entries[name] = _Kept(*inputs, entry)
            self._encoded[id(entry)] = (entry, data)

    def is_kept(self, entry: Any) -> bool:
        """Whether ``entry`` is a kept entry (not one built for one answer)."""
        held = self._encoded.get(id(entry))
        return held is not None and held[0] is entry

    def forget_others(self, cls: type, names: set[str]) -> None:
        """Drop the entries of ``cls``'s answers whose topics are not in ``names`` (all the
        topics there are: those deleted go), when there are more entries than names."""
        entries = self._entries.get(cls, {})
        if len(entries) <= len(names) + 1:  # (+1: the internal topic)
            return
        with self._lock:
            for name in [n for n in entries if n not in names and not _internal(n)]:
                self._encoded.pop(id(entries.pop(name).entry), None)

    def write(self, out: IO[bytes], response: Any) -> None:
        """``response`` (a Metadata answer of any version) as kio's writer of its class
        writes it: what precedes and follows the topics array is cut from kio's encoding
        of the answer with one probe topic in the array (checked against kio's array
        writer for the version), the array's count is written by kio's writer of array
        lengths, and each entry is its kept bytes, or kio's encoding of it if not kept."""
        cls = type(response)
        topic_cls = nested(cls, "MetadataResponseTopic")
        probe = _probe(topic_cls)
        probe_bytes = _encoded(entity_writer(topic_cls), probe)
        array_writer = compact_array_writer if cls.__flexible__ else legacy_array_writer
        whole = _encoded(entity_writer(cls), dataclasses.replace(response, topics=(probe,)))
        array = _encoded(array_writer(entity_writer(topic_cls)), (probe,))
        start = whole.find(probe_bytes) - (len(array) - len(probe_bytes))
        if whole.count(probe_bytes) != 1 or whole[start : start + len(array)] != array:
            raise AssertionError(f"{cls.__name__}: its topics array is not where kio put it")
        out.write(whole[:start])
        # the array as kio's array writer writes it: the count by kio's writer of array
        # lengths for the version (as above), then each entry, kept bytes or kio's
        count = write_compact_array_length if cls.__flexible__ else write_legacy_array_length
        count(out, i32(len(response.topics)))
        out.write(self._items(cls, response.topics))
        out.write(whole[start + len(array) :])

    def _items(self, cls: type, topics: tuple[Any, ...]) -> bytes:
        """The bytes of ``topics``' entries, one after the other."""
        joined = self._whole_bytes.get(cls)
        if joined is not None and joined[0] is topics:
            return joined[1]
        encode: Callable[[Writable, Any], None] = entity_writer(
            nested(cls, "MetadataResponseTopic")
        )
        encoded = self._encoded
        pieces = []
        for topic in topics:
            held = encoded.get(id(topic))
            if held is not None and held[0] is topic:
                pieces.append(held[1])
            else:  # built for this answer alone (an error, a denied topic)
                pieces.append(_encoded(encode, topic))
        data = b"".join(pieces)
        whole = self._whole.get(cls)
        if whole is not None and whole[2] is topics:
            with self._lock:
                self._whole_bytes[cls] = (topics, data)
        return data


#: what a topic's entry is built from: its document in the metadata image (None: the
#: internal topic) and the request's view (leadership inputs, brokers with a Kafka
#: listener: :meth:`TopicEntries.view`)
_Inputs = tuple[Any, object]


@dataclasses.dataclass(frozen=True, slots=True)
class _Kept:
    """A kept entry and what it was built from (:data:`_Inputs`)."""

    doc: Any
    view: object
    entry: Any


@cache
def _probe(topic_cls: type) -> Any:
    return make(
        topic_cls,
        error_code=0,
        name=PROBE_NAME,
        topic_id=uuid.UUID(int=0),
        is_internal=False,
        partitions=(),
    )


def _encoded(writer: Callable[[Writable, Any], None], value: Any) -> bytes:
    buffer = io.BytesIO()
    writer(cast(IO[bytes], buffer), value)
    return buffer.getvalue()
