"""The catalog: topics' names, ids, partitions, configs and value schemas; the root holding them.

A topic's metadata is a document in the cluster metadata log
(:mod:`sparklog.storage.cluster_metadata`) recording the storage ``format``
(2: shard logs) and ``commit.shards``; every create, change and deletion is
one append to that log, and reads answer from its in-memory image.
Each incarnation of a name gets a fresh UUID and keeps its data under
``topics/<name>/<id>/``, so a topic deleted and created again never mixes with
its old data, and a handle on the old incarnation notices.  A topic written
by a storage format this code does not know (format 1's per-partition logs
included) is refused with an error naming its metadata file.

Metadata only: this module imports neither pyarrow, numpy nor fsspec when it
loads (a metadata command on a local root never needs them).  pyarrow is
imported by the functions that parse or build value types, and a topic's data
handle (:class:`sparklog.storage.topics.Topic`, over the shard logs) by
:meth:`LogRoot.topic`.
"""

from __future__ import annotations

import copy
import os
import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from sparklog.clock import now_ms
from sparklog.errors import (
    CorruptRecordError,
    InvalidConfigurationError,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    InvalidTopicError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from sparklog.storage.cluster_metadata import (
    METADATA_LOG_PREFIX,
    ClusterMetadata,
    MetadataImage,
    Record,
    topic_record,
)
from sparklog.storage.config import (
    TOPIC_CONFIG_KEYS,
    check_combination,
    effective_config,
    unknown_topic_key,
    validate_config,
)
from sparklog.storage.metalog import DEFAULT_SNAPSHOT_INTERVAL
from sparklog.storage.objectstore import ObjectStore, local_root
from sparklog.storage.topic_info import (
    KNOWN_FORMATS,
    TopicInfo,
    schema_id_of,
    value_type_to_text,
)

if TYPE_CHECKING:
    import pyarrow as pa

    from sparklog.storage.groups import GroupStore
    from sparklog.storage.topics import Topic
    from sparklog.storage.transactions import TransactionStore

TOPIC_NAME_RE = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")
MAX_PARTITIONS = 10_000
#: Topic config keys that cannot change after creation.
FIXED_AT_CREATION = ("commit.shards",)


def validate_topic_name(name: str) -> str:
    """Kafka's rule: ``[a-zA-Z0-9._-]``, 1-249 characters, not ``.`` or ``..``."""
    if not isinstance(name, str) or not TOPIC_NAME_RE.match(name) or name in (".", ".."):
        raise InvalidTopicError(
            f"invalid topic name {name!r}; accepted: 1-249 characters from [a-zA-Z0-9._-], "
            "not '.' or '..'"
        )
    return name


def replication_factor_of(asked: int, brokers: int) -> int:
    """A CreateTopics replication factor as Kafka accepts it: 1 to the live brokers, or -1
    for the default (1); InvalidReplicationFactorError naming the value otherwise."""
    if isinstance(asked, int) and not isinstance(asked, bool):
        if asked == -1:
            return 1
        if 1 <= asked <= brokers:
            return asked
    raise InvalidReplicationFactorError(
        f"replication factor {asked!r} is not accepted; accepted: 1 to {brokers} (the live "
        "brokers) or -1 for the default (1); the data is stored once, on the object store, "
        "and the factor is kept for Kafka compatibility"
    )


class LogRoot:
    """A storage root: the topics it holds and the stores below it.

    This is the embedded, brokerless entry point (as a pyiceberg catalog is):
    ``open_root("file:///tmp/sl").create_topic("events", partitions=3)``.
    """

    def __init__(
        self,
        url: str,
        storage_options: Mapping[str, Any] | None = None,
        *,
        snapshot_interval: int = DEFAULT_SNAPSHOT_INTERVAL,
        fsync: bool = False,
        metadata_max_staleness_ms: int | None = 0,
    ) -> None:
        """``metadata_max_staleness_ms``: how reads of topics stay current (0: every read
        sees every process's changes; None: a follower refreshes, reads never touch the
        store; see :class:`ClusterMetadata`)."""
        self.store = ObjectStore(url, storage_options, fsync=fsync)
        self.snapshot_interval = snapshot_interval
        self.metadata_max_staleness_ms = metadata_max_staleness_ms

    @property
    def url(self) -> str:
        return self.store.url

    def __repr__(self) -> str:
        return f"LogRoot({self.url!r})"

    def __getstate__(self) -> dict[str, Any]:
        return {
            "store": self.store,
            "snapshot_interval": self.snapshot_interval,
            "metadata_max_staleness_ms": self.metadata_max_staleness_ms,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.store = state["store"]
        self.snapshot_interval = state["snapshot_interval"]
        self.metadata_max_staleness_ms = state.get("metadata_max_staleness_ms", 0)

    @property
    def groups(self) -> GroupStore:
        """Committed offsets of the consumer groups in this root (their group logs)."""
        found: GroupStore | None = self.__dict__.get("_groups")
        if found is None:
            from sparklog.storage.groups import GroupStore

            found = GroupStore(self.store, snapshot_interval=self.snapshot_interval)
            self.__dict__["_groups"] = found
        return found

    @property
    def transactions(self) -> TransactionStore:
        """The transactional ids' state (their logs; the metadata log registers the ids)."""
        found: TransactionStore | None = self.__dict__.get("_transactions")
        if found is None:
            from sparklog.storage.transactions import TransactionStore

            found = TransactionStore(self.store, snapshot_interval=self.snapshot_interval)
            self.__dict__["_transactions"] = found
        return found

    @property
    def metadata(self) -> ClusterMetadata:
        """The root's cluster metadata log and its in-memory image (topics, brokers, ...)."""
        found: ClusterMetadata | None = self.__dict__.get("_metadata")
        if found is None:
            found = ClusterMetadata(
                self.store,
                snapshot_interval=self.snapshot_interval,
                max_staleness_ms=self.metadata_max_staleness_ms,
            )
            self.__dict__["_metadata"] = found
        return found

    def check_new_topic(
        self, name: str, partitions: int, config: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """What :meth:`create_topic` checks before it writes (name, partition count,
        config, a live topic of that name), so a validate-only request checks the same;
        the config parsed."""
        validate_topic_name(name)
        if not isinstance(partitions, int) or not 1 <= partitions <= MAX_PARTITIONS:
            raise InvalidPartitionsError(
                f"partitions={partitions!r} is not accepted; accepted: 1-{MAX_PARTITIONS}"
            )
        parsed = validate_config(config)
        check_combination(parsed)
        if name in self.metadata.image().topics:
            raise TopicAlreadyExistsError(f"topic {name!r} already exists")
        return parsed

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        config: Mapping[str, Any] | None = None,
        value_type: pa.DataType | None = None,
        *,
        mirror: Mapping[str, Any] | None = None,
        replication_factor: int = 1,
        live_brokers: int | None = None,
        created_by: str | None = None,
        admit: Callable[[MetadataImage], None] | None = None,
        shards_per_broker: int = 1,
    ) -> TopicInfo:
        """Create a topic; TopicAlreadyExistsError if a live topic has the name.

        ``mirror`` makes it a mirror topic (see :attr:`TopicInfo.mirror`): read-only to
        producers until promoted.  ``replication_factor`` (-1: the default, 1) is accepted
        up to ``live_brokers`` (a broker's live set; without it, the brokers registered
        on the root, at least 1), as Kafka accepts it, and stored to be reported back.
        ``created_by``: the principal a broker created it for (its per-principal caps).
        ``admit(image)`` may refuse the topic on the image it is added to, inside the
        commit: two creates racing each see the other's topic (a cap they share holds).
        Without ``commit.shards`` the topic gets ``shards_per_broker`` shards per
        registered broker, at most one per partition (a broker journalling its records
        asks for 4: a shard then costs no commit per flush, and finer shards spread a
        dead broker's work over the survivors and give a joining broker a share)."""
        parsed = self.check_new_topic(name, partitions, config)
        if value_type is not None and not _is_struct(value_type):
            raise InvalidConfigurationError(
                f"value schema {value_type} is not accepted; a typed topic's value is a struct"
            )
        sid = schema_id_of(value_type) if value_type is not None else ""
        doc = TopicInfo(
            name=name,
            topic_id=uuid.uuid4().hex,
            partitions=partitions,
            config=parsed,
            version=0,
            created_ms=now_ms(),
            value_type=value_type,
            value_schema_id=sid,
            value_types={sid: value_type} if value_type is not None else {},
            mirror=dict(mirror) if mirror is not None else None,
        ).to_doc()

        def build(image: MetadataImage) -> list[Record]:
            if name in image.topics:
                raise TopicAlreadyExistsError(f"topic {name!r} already exists")
            if admit is not None:
                admit(image)
            live = sum(1 for b in image.brokers.values() if not b.get("fenced"))
            factor = replication_factor_of(
                replication_factor, max(1, live) if live_brokers is None else live_brokers
            )
            if factor != 1:
                doc["replication_factor"] = factor
            if created_by is not None:
                doc["created_by"] = created_by
            if "commit.shards" not in parsed:
                # shards_per_broker per registered broker (at most one per partition), so
                # the partitions' leaders spread over the cluster as Kafka's do
                shards = max(1, min(partitions, shards_per_broker * live))
                if shards > 1:  # (1 is the default: the config stays as the user gave it)
                    config = {**doc["config"], "commit.shards": shards}
                    return [topic_record({**doc, "config": config})]
            return [topic_record(doc)]

        image = self.metadata.append(build)
        return TopicInfo.from_doc(image.topics[name]["version"], image.topics[name])

    def describe_topic(self, name: str) -> TopicInfo:
        """The topic as the metadata image holds it.  Its description is built once per
        version of its document (an image replaces a document that changes, never edits
        it): a broker's Metadata answer and its once-a-second reload of every open topic
        described each topic afresh, CPU growing with topics (issue 37 item 6)."""
        doc = self.metadata.image().topics.get(name)
        if doc is None:
            doc = self.metadata.refresh_on_miss().topics.get(name)
        infos: dict[str, tuple[Mapping[str, Any], TopicInfo]] = self.__dict__.setdefault(
            "_topic_infos", {}
        )
        if doc is None:
            infos.pop(name, None)
            raise UnknownTopicOrPartitionError(f"unknown topic {name!r}")
        cached = infos.get(name)
        if cached is not None and cached[0] is doc:
            return cached[1]
        info = _topic_info(self.store.url, doc)
        infos[name] = (doc, info)
        return info

    def topic(self, name: str) -> Topic:
        """A data handle on the topic (its shard and partition logs: loads pyarrow)."""
        from sparklog.storage.topics import Topic

        return Topic(self, self.describe_topic(name))

    def list_topics(self) -> list[str]:
        return sorted(self.metadata.image().topics)

    def _update(
        self,
        name: str,
        change: Callable[[dict[str, Any]], dict[str, Any]],
        dry_run: bool = False,
        admit: Callable[[MetadataImage, dict[str, Any], dict[str, Any]], None] | None = None,
    ) -> TopicInfo:
        """Apply ``change`` to the topic's document; with ``dry_run``, every check of the
        change on the newest image and nothing written (Kafka's ``validate_only``).
        ``admit(image, before, after)`` may refuse the change on the image it is made to,
        inside the commit (racing changes see each other)."""

        def changed(image: MetadataImage) -> dict[str, Any]:
            current = image.topics.get(name)
            if current is None:
                raise UnknownTopicOrPartitionError(f"unknown topic {name!r}")
            doc = {k: v for k, v in copy.deepcopy(current).items() if k != "version"}
            after = change(copy.deepcopy(doc))
            if admit is not None:
                admit(image, doc, after)
            return after

        def build(image: MetadataImage) -> list[Record]:
            return [topic_record(changed(image))]

        if dry_run:
            return _topic_info(self.store.url, {**changed(self.metadata.refresh()), "version": 0})
        image = self.metadata.append(build)
        return _topic_info(self.store.url, image.topics[name])

    def alter_topic_config(
        self,
        name: str,
        updates: Mapping[str, Any],
        remove: Sequence[str] = (),
        *,
        dry_run: bool = False,
        replace: bool = False,
    ) -> TopicInfo:
        """Set (and remove, returning to defaults) topic config keys (``dry_run``: only check).
        ``replace``: Kafka's AlterConfigs, the whole set: every key not in ``updates`` (and
        not fixed at creation) returns to its default, as the log holds the topic at the
        change (never an older view of it)."""
        parsed = validate_config(updates)
        unknown = [k for k in remove if k not in TOPIC_CONFIG_KEYS]
        if unknown:
            raise unknown_topic_key(unknown[0])

        def change(doc: dict[str, Any]) -> dict[str, Any]:
            # a fixed key may be restated with its value (Kafka tools send the whole set)
            now = effective_config(doc["config"])
            fixed = [
                k
                for k in (*parsed, *remove)
                if k in FIXED_AT_CREATION and (k in remove or parsed[k] != now[k])
            ]
            if fixed:
                raise InvalidConfigurationError(
                    f"topic config {fixed[0]!r} is fixed when the topic is created; accepted: "
                    f"changes to other keys"
                )
            gone = set(remove)
            if replace:
                gone |= {k for k in doc["config"] if k not in parsed and k not in FIXED_AT_CREATION}
            config = {k: v for k, v in doc["config"].items() if k not in gone}
            config.update(parsed)
            check_combination(config)
            doc["config"] = config
            return doc

        return self._update(name, change, dry_run)

    def set_mirror(self, name: str, mirror: Mapping[str, Any] | None) -> TopicInfo:
        """Replace the topic's mirror provenance (promote: ``state`` "promoted")."""

        def change(doc: dict[str, Any]) -> dict[str, Any]:
            if mirror is None:
                doc.pop("mirror", None)
            else:
                doc["mirror"] = dict(mirror)
            return doc

        return self._update(name, change)

    def add_partitions(
        self,
        name: str,
        total: int,
        *,
        dry_run: bool = False,
        admit: Callable[[MetadataImage, dict[str, Any], dict[str, Any]], None] | None = None,
    ) -> TopicInfo:
        """Grow a topic to ``total`` partitions (never shrink, as in Kafka; ``dry_run``: only
        check); ``admit(image, before, after)`` may refuse it inside the commit."""

        def change(doc: dict[str, Any]) -> dict[str, Any]:
            if not isinstance(total, int) or total <= doc["partitions"] or total > MAX_PARTITIONS:
                raise InvalidPartitionsError(
                    f"partitions={total!r} is not accepted for topic {name!r}; accepted: more "
                    f"than the current {doc['partitions']} and at most {MAX_PARTITIONS}"
                )
            doc["partitions"] = total
            return doc

        return self._update(name, change, dry_run, admit)

    def evolve_value_type(self, name: str, value_type: pa.DataType) -> TopicInfo:
        """Change a typed topic's value struct by adding nullable fields only."""

        def change(doc: dict[str, Any]) -> dict[str, Any]:
            info = TopicInfo.from_doc(0, doc)
            old = info.value_type
            if old is None or not _is_struct(value_type):
                raise InvalidConfigurationError(
                    f"topic {name!r} is not typed or {value_type} is not a struct; only typed "
                    "topics' struct schemas can evolve"
                )
            new_fields = {f.name: f for f in value_type}
            for f in old:
                if f.name not in new_fields or not new_fields[f.name].type.equals(f.type):
                    raise InvalidConfigurationError(
                        f"value field {f.name!r} must stay as {f.type}; accepted changes: add "
                        "nullable fields"
                    )
            added = [f for f in value_type if f.name not in {g.name for g in old}]
            if any(not f.nullable for f in added):
                raise InvalidConfigurationError(
                    f"new value fields {[f.name for f in added if not f.nullable]} must be nullable"
                )
            sid = schema_id_of(value_type)
            doc["value_schema_id"] = sid
            doc["value_schemas"] = {
                **doc["value_schemas"],
                sid: value_type_to_text(value_type),
            }
            return doc

        return self._update(name, change)

    def delete_topic(self, name: str) -> None:
        """Record the topic deleted, then remove its data."""
        info = self.describe_topic(name)

        def build(image: MetadataImage) -> list[Record]:
            current = image.topics.get(name)
            if current is None or current["id"] != info.topic_id:
                raise UnknownTopicOrPartitionError(f"unknown topic {name!r}")
            return [{"type": "topic_deleted", "name": name, "id": info.topic_id}]

        self.metadata.append(build)
        self.store.delete_prefix(f"topics/{name}/{info.topic_id}")


def _topic_info(url: str, doc: Mapping[str, Any]) -> TopicInfo:
    """The topic a metadata document describes; refused if written by an unknown format."""
    version = int(doc.get("version", 0))
    name = str(doc.get("name", "?"))
    where = f"{url}/{METADATA_LOG_PREFIX} (version {version})"
    try:  # damage first: a document that does not parse is corrupt, whatever its format
        info = TopicInfo.from_doc(version, doc)
    except CorruptRecordError as exc:
        raise CorruptRecordError(f"topic metadata {where}: {exc}") from None
    found = doc.get("format", 1)
    if found not in KNOWN_FORMATS:
        raise InvalidConfigurationError(
            f"topic {name!r} ({where}) was written by storage format {found!r}; this code "
            f"knows formats {', '.join(map(str, KNOWN_FORMATS))} (format 1 roots are not "
            "migrated: copy the records into a new root)"
        )
    return info


def _is_struct(value_type: pa.DataType) -> bool:
    import pyarrow as pa

    return bool(pa.types.is_struct(value_type))


def open_root(
    url: str,
    storage_options: Mapping[str, Any] | None = None,
    *,
    create: bool | None = None,
    **settings: Any,
) -> LogRoot:
    """Open a storage root (a local path, ``file://``, ``memory://`` or ``s3://`` URL).

    ``storage_options`` None takes them from ``SPARKLOG_STORAGE_<KEY>`` variables, the
    one spelling every sparklog layer reads (:mod:`sparklog.storage_options`).

    ``create=True`` makes the root (folder or bucket) if it is missing, for writers;
    ``create=False`` is the read-only open: a missing root is an error, never made,
    so a mistyped path or bucket is reported instead of silently created; ``None``
    (default) touches nothing until the first call.
    """
    if storage_options is None:
        from sparklog.storage_options import storage_options_from_env

        storage_options = storage_options_from_env() or None
    root = LogRoot(url, storage_options, **settings)
    if create is not None and root.store.is_local and os.path.isfile(local_root(root.store.url)):
        raise InvalidConfigurationError(
            f"storage root {root.store.url!r} is a file; accepted: a folder (made by the first "
            "topic created in it) or an s3://bucket/prefix URL"
        )
    if create:
        root.store.ensure_root()
    elif create is not None and not root.store.root_exists():
        raise InvalidConfigurationError(
            f"no sparklog root at {root.store.url!r} (nothing exists there; it is not created "
            "by a read-only command); accepted: an existing root, or create a topic first"
        )
    return root


__all__ = ["LogRoot", "TopicInfo", "open_root", "validate_topic_name"]
