"""The cluster metadata log: every change of cluster state as one create-only append.

Kafka keeps topics, brokers, credentials, ACLs, quotas and transaction state in
KRaft's ``__cluster_metadata`` log and answers from the controller's memory;
sparklog keeps them in one log on the root (docs/architecture.md, "The control plane")::

    <root>/cluster/metadata/log/<v:020d>.json       commits {"records": [...]}, checksummed
    <root>/cluster/metadata/log/<v:020d>.snapshot   the whole image every K versions

It runs on the engine of the shard and group logs (:class:`MetaLog`): writers
race with optimistic concurrency, a lost answer is resolved by re-reading
(commit ids), and readers follow the log by probing the next version (one GET,
never a LIST).  Every broker and every embedded client keeps the
:class:`MetadataImage`, the state after the newest version, in memory.

A commit holds one or more records, applied together.  The record types
(``type``), fixed here so that every layer writes the same shapes:

========================  ===============================================================
``format``                ``format``: the metadata format; written once, first
``topic``                 ``doc``: a topic's whole document (created or changed)
``topic_deleted``         ``name``, ``id``
``broker_registered``     ``id``, ``location`` (Flight), ``kafka_address``, ``incarnation``,
                          ``flight_security`` (the Flight listener's protocol; absent
                          in records written before it: PLAINTEXT)
``broker_unregistered``   ``id``, ``incarnation`` (a graceful stop)
``broker_fenced``         ``id``, ``incarnation``, ``by``: a monitor saw its lease expire
``producer_ids``          ``first``, ``count``: a block of producer ids taken
``scram_credential``      keyed: ``key`` = ``user/mechanism``, ``value`` = salted hashes or null
``acl``                   keyed: ``key`` = the binding, ``value`` = the binding or null
``client_quota``          keyed: ``key`` = the entity, ``value`` = its quotas or null
``transactional_id``      keyed: ``key`` = the transactional id, ``value`` = its producer id,
                          epoch and timeout (its state is in its own log,
                          :mod:`sparklog.storage.transactions`; an older broker wrote
                          the whole state here) or null
``mirror_link``           keyed: ``key`` = the link's name, ``value`` = its definition or null
========================  ===============================================================

Keyed records set (``value``) or delete (``value: null``) one entry of their
section of the image; their value shapes belong to the layer that owns them.

**Upgrade.** A root written before this log existed keeps its topics in
``topics/<name>/meta/<v>.json`` documents.  Until it is upgraded, readers see
those documents (listing them, as the older code did); the first write (a
broker's start, an admin call) upgrades it in place, once: one commit holding
the ``format`` record and every live topic's document, together with the
write's own records.  A root whose log says a newer format is refused.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, NotRequired, TypedDict

from sparklog.errors import CorruptRecordError, InvalidConfigurationError, SparklogError
from sparklog.storage.documents import VersionedDocument
from sparklog.storage.metalog import DEFAULT_SNAPSHOT_INTERVAL, Commit, LogStateBase, MetaLog
from sparklog.storage.objectstore import ObjectStore

METADATA_LOG_PREFIX = "cluster/metadata/log"
#: The metadata format this code writes; roots of a newer one are refused.
METADATA_FORMAT = 1
KNOWN_METADATA_FORMATS = (1,)
#: keyed record type -> the image's section it sets
KEYED_SECTIONS = {
    "scram_credential": "scram_credentials",
    "acl": "acls",
    "client_quota": "client_quotas",
    "transactional_id": "transactional_ids",
    "mirror_link": "mirror_links",
}


class FormatRecord(TypedDict):
    type: Literal["format"]
    format: int


class TopicRecord(TypedDict):
    type: Literal["topic"]
    #: the topic's whole document (``topic_info.TopicInfo.to_doc``)
    doc: dict[str, Any]


class TopicDeletedRecord(TypedDict):
    type: Literal["topic_deleted"]
    name: str
    id: str


class BrokerRegisteredRecord(TypedDict):
    type: Literal["broker_registered"]
    id: int
    #: the broker's Flight location and Kafka listener address (None: no Kafka listener)
    location: str
    kafka_address: str | None
    incarnation: str
    #: the Flight listener's security protocol (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL):
    #: brokerless writers hand commits only to a PLAINTEXT one (they hold no credentials)
    flight_security: NotRequired[str]


class BrokerUnregisteredRecord(TypedDict):
    type: Literal["broker_unregistered"]
    id: int
    incarnation: str


class BrokerFencedRecord(TypedDict):
    type: Literal["broker_fenced"]
    id: int
    incarnation: str
    #: the broker that saw the lease expire
    by: int


class ProducerIdsRecord(TypedDict):
    type: Literal["producer_ids"]
    first: int
    count: int


class KeyedRecord(TypedDict):
    """Sets (``value``) or deletes (``value: None``) one entry of a section of the image;
    the value's shape belongs to the layer that owns the section."""

    type: Literal["scram_credential", "acl", "client_quota", "transactional_id", "mirror_link"]
    key: str
    value: Any


#: One record of a metadata commit: mypy checks every writer's shape against these.
Record = (
    FormatRecord
    | TopicRecord
    | TopicDeletedRecord
    | BrokerRegisteredRecord
    | BrokerUnregisteredRecord
    | BrokerFencedRecord
    | ProducerIdsRecord
    | KeyedRecord
)


@dataclass
class MetadataImage(LogStateBase):
    """The cluster's state after ``version``: what every broker answers from.

    Sections are replaced, never changed in place, when a commit applies
    (copy on write), so a reader holding one of them sees a consistent map.
    """

    version: int = 0
    commits_since_snapshot: int = 0
    format: int = 0
    #: topic name -> its document (``topic_info.TopicInfo.to_doc``), with ``version``: the
    #: metadata version of its last change
    topics: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: broker id (as text: JSON keys) -> registration
    brokers: dict[str, dict[str, Any]] = field(default_factory=dict)
    next_producer_id: int = 1
    scram_credentials: dict[str, Any] = field(default_factory=dict)
    acls: dict[str, Any] = field(default_factory=dict)
    client_quotas: dict[str, Any] = field(default_factory=dict)
    transactional_ids: dict[str, Any] = field(default_factory=dict)
    mirror_links: dict[str, Any] = field(default_factory=dict)

    def broker(self, broker_id: int) -> dict[str, Any] | None:
        return self.brokers.get(str(broker_id))


def apply_record(image: MetadataImage, record: Record, version: int) -> None:
    """Advance ``image`` by one record of the commit at ``version``."""
    if record["type"] == "format":
        image.format = int(record["format"])
    elif record["type"] == "topic":
        doc = dict(record["doc"])
        doc["version"] = version
        image.topics = {**image.topics, str(doc["name"]): doc}
    elif record["type"] == "topic_deleted":
        current = image.topics.get(record["name"])
        if current is not None and current["id"] == record["id"]:
            image.topics = {k: v for k, v in image.topics.items() if k != record["name"]}
    elif record["type"] == "broker_registered":
        entry = {
            "id": record["id"],
            "location": record["location"],
            "kafka_address": record["kafka_address"],
            "incarnation": record["incarnation"],
            "flight_security": record.get("flight_security", "PLAINTEXT"),
            "version": version,
        }
        image.brokers = {**image.brokers, str(record["id"]): entry}
    elif record["type"] == "broker_fenced":
        current = image.brokers.get(str(record["id"]))
        if current is not None and current["incarnation"] == record["incarnation"]:
            image.brokers = {**image.brokers, str(record["id"]): {**current, "fenced": True}}
    elif record["type"] == "broker_unregistered":
        current = image.brokers.get(str(record["id"]))
        if current is not None and current["incarnation"] == record["incarnation"]:
            image.brokers = {k: v for k, v in image.brokers.items() if k != str(record["id"])}
    elif record["type"] == "producer_ids":
        image.next_producer_id = max(
            image.next_producer_id, int(record["first"]) + int(record["count"])
        )
    elif record["type"] in KEYED_SECTIONS:
        section = KEYED_SECTIONS[record["type"]]
        entries = dict(getattr(image, section))
        if record["value"] is None:
            entries.pop(str(record["key"]), None)
        else:
            entries[str(record["key"])] = record["value"]
        setattr(image, section, entries)
    else:
        raise ValueError(f"unknown metadata record type {record['type']!r}")


class MetadataCodec:
    """How the metadata log builds, advances and snapshots its image (JSON snapshots)."""

    def empty(self) -> MetadataImage:
        return MetadataImage()

    def apply(self, state: MetadataImage, commit: Commit) -> None:
        for record in commit["records"]:
            apply_record(state, record, commit["v"])

    def snapshot(self, state: MetadataImage) -> bytes:
        return json.dumps(asdict(state), separators=(",", ":")).encode()

    def restore(self, payload: memoryview, where: str) -> MetadataImage:
        try:
            return MetadataImage(**json.loads(bytes(payload)))
        except (ValueError, TypeError) as exc:
            raise CorruptRecordError(f"metadata snapshot {where} cannot be read: {exc}") from None


class ClusterMetadata:
    """A root's cluster metadata log and the image it keeps in memory.

    ``max_staleness_ms`` says how reads stay current: 0 (embedded clients, the
    CLI) probes the next version before every answer, so a change made by any
    other process is seen at once; a positive value probes at most that often;
    ``None`` never probes on a read: a follower (the broker's background loop)
    calls :meth:`refresh`, and requests are answered from memory even while
    the store is unreachable.
    """

    def __init__(
        self,
        store: ObjectStore,
        *,
        snapshot_interval: int = DEFAULT_SNAPSHOT_INTERVAL,
        max_staleness_ms: int | None = 0,
    ) -> None:
        self.store = store
        self.max_staleness_ms = max_staleness_ms
        self.log: MetaLog[MetadataImage] = MetaLog(
            store,
            METADATA_LOG_PREFIX,
            MetadataCodec(),
            name="cluster metadata",
            snapshot_interval=snapshot_interval,
        )

    # -- reading ------------------------------------------------------------
    def image(self) -> MetadataImage:
        """The newest image as this reader's policy allows (see the class docstring)."""
        if self.max_staleness_ms is None:
            image = self.log.state
        else:
            image = self.log.refresh(self.max_staleness_ms)
        if image.format == 0 and image.version == 0:
            return self._legacy_image()
        self._check_format(image)
        return image

    def refresh(self) -> MetadataImage:
        """Catch up with the log now (one probe when nothing changed)."""
        self.log.refresh()
        return self.image()

    def refresh_on_miss(self) -> MetadataImage:
        """A follower asked for something its image lacks (a topic created through another
        broker a moment ago): probe the next version now (one GET; never a listing), so a
        change made elsewhere is seen by the next request that needs it."""
        if self.max_staleness_ms is None:
            self.log.refresh()
        return self.image()

    def _check_format(self, image: MetadataImage) -> None:
        if image.format not in KNOWN_METADATA_FORMATS:
            raise InvalidConfigurationError(
                f"the root {self.store.url} has cluster metadata format {image.format} "
                f"({self.store.url}/{METADATA_LOG_PREFIX}); this code knows format"
                f" {', '.join(map(str, KNOWN_METADATA_FORMATS))}: upgrade sparklog to open it"
            )

    def _legacy_image(self) -> MetadataImage:
        """A root not yet upgraded: its topics as the older code kept them (documents)."""
        image = MetadataImage()
        image.topics = {name: doc for name, doc in self._legacy_topics().items()}
        return image

    def _legacy_topics(self) -> dict[str, dict[str, Any]]:
        found: dict[str, dict[str, Any]] = {}
        for name in self.store.list_names("topics"):
            meta = VersionedDocument(self.store, f"topics/{name}/meta")
            version, doc = meta.latest()
            if doc is not None and not doc.get("deleted"):
                found[name] = {**doc, "version": version}
        return found

    # -- writing ------------------------------------------------------------
    def append(self, build: Callable[[MetadataImage], list[Record] | None]) -> MetadataImage:
        """Commit the records ``build(image)`` returns (None: nothing to write).

        ``build`` sees the newest image and may raise to refuse (a topic that
        exists already); on a lost race it runs again on the newer image.  A
        refusal stands only on the log's head: a follower's image may be older
        than the change the caller acted on (another broker wrote it), so the
        log is re-read and ``build`` runs again before a refusal is raised.  A
        root not yet upgraded is upgraded in the same commit.
        """
        refused: list[tuple[int, BaseException]] = []

        def checked(image: MetadataImage) -> list[Record] | None:
            try:
                return build(image)
            except SparklogError as exc:
                refused.append((image.version, exc))
                raise

        while True:
            refused.clear()
            try:
                return self._append(checked)
            except SparklogError as exc:
                if not refused or refused[-1][1] is not exc:
                    raise  # not a refusal of build's
                if self.log.refresh().version <= refused[-1][0]:
                    raise  # refused on the head

    def _append(self, build: Callable[[MetadataImage], list[Record] | None]) -> MetadataImage:

        def commit_body(image: MetadataImage) -> Commit | None:
            upgrade: list[Record] = []
            if image.format == 0:
                if image.version != 0:
                    raise CorruptRecordError(
                        f"cluster metadata {self.store.url}/{METADATA_LOG_PREFIX} has commits "
                        "but no format record"
                    )
                upgrade = self._upgrade_records()
                seen = MetadataImage()
                for record in upgrade:
                    apply_record(seen, record, 1)
                records = build(seen)
            else:
                self._check_format(image)
                records = build(image)
            if records is None and not upgrade:
                return None
            return {"records": [*upgrade, *(records or [])]}

        self.log.commit(commit_body)
        return self.log.state

    def upgrade(self) -> MetadataImage:
        """Make sure the root has its metadata log (a broker's start): a no-op once done."""
        self.append(lambda image: None)
        return self.image()

    def _upgrade_records(self) -> list[Record]:
        records: list[Record] = [{"type": "format", "format": METADATA_FORMAT}]
        for doc in self._legacy_topics().values():
            records.append(
                {"type": "topic", "doc": {k: v for k, v in doc.items() if k != "version"}}
            )
        return records


def topic_record(doc: Mapping[str, Any]) -> Record:
    """The record that creates or changes a topic (its whole document)."""
    return {"type": "topic", "doc": copy.deepcopy(dict(doc))}
