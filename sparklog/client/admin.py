"""Admin: topics (create, delete, list, describe, alter, grow) and groups (lag, reset, delete)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sparklog.client.config import client_settings
from sparklog.client.security import KEYS as SECURITY_KEYS
from sparklog.client.transports import Backend, open_backend
from sparklog.client.types import (
    ConfigResource,
    ConfigResourceType,
    GroupDescription,
    MemberDescription,
    NewPartitions,
    NewTopic,
    OffsetAndMetadata,
    PartitionLag,
    TopicDescription,
    TopicPartition,
)
from sparklog.errors import (
    GroupError,
    InvalidConfigurationError,
    SparklogError,
    TransactionalIdNotFoundError,
    UnknownTopicOrPartitionError,
)
from sparklog.protocol import actions

if TYPE_CHECKING:
    import pyarrow as pa

#: kafka-python admin settings accepted and ignored (they tune its network layer).
_IGNORED_KEYS = ("client_id", "request_timeout_ms", "api_version")


def _struct(value_type: pa.DataType | pa.Schema | None) -> pa.DataType | None:
    """A typed topic's value type: an Arrow struct (a schema is taken as its fields)."""
    if value_type is None:
        return None
    import pyarrow as pa

    if isinstance(value_type, pa.Schema):
        return pa.struct(list(value_type))
    if isinstance(value_type, pa.DataType) and pa.types.is_struct(value_type):
        return value_type
    raise InvalidConfigurationError(
        f"value_type {value_type!r} is not accepted; accepted: a pyarrow struct type or schema"
    )


def _topic_resource(resource: ConfigResource) -> str:
    kind = resource.resource_type
    if kind not in (ConfigResourceType.TOPIC, "TOPIC", "topic"):
        raise InvalidConfigurationError(
            f"config resource type {kind!r} is not accepted; accepted: ConfigResourceType.TOPIC "
            "(brokers are configured in conf/broker.toml)"
        )
    return resource.name


@dataclass(frozen=True)
class OffsetReset:
    """One line of a reset plan: a partition's committed offset now and after the reset."""

    topic: str
    partition: int
    current: int | None
    new: int


class Admin:
    """Manage topics and consumer groups at one address (storage root or brokers)."""

    def __init__(
        self,
        address: Any = None,
        *,
        storage_options: Mapping[str, Any] | None = None,
        backend: Backend | None = None,
        retry_timeout_ms: int | None = None,
        **config: Any,
    ) -> None:
        """``Admin(address)``, ``Admin(bootstrap_servers=...)`` (kafka-python's
        KafkaAdminClient) or ``Admin({"bootstrap.servers": ...})`` (confluent-kafka's)."""
        address, rest = client_settings("admin", address, config)
        security: dict[str, Any] = {}
        for key in list(rest):
            name = key.replace(".", "_")
            if name == "storage_options":
                storage_options = rest.pop(key)
            elif name == "retry_timeout_ms":
                retry_timeout_ms = int(rest.pop(key))
            elif name in SECURITY_KEYS:
                security[name] = rest.pop(key)
            elif name in _IGNORED_KEYS:
                rest.pop(key)
        if rest:
            raise InvalidConfigurationError(
                f"unknown admin config {sorted(rest)[0]!r}; accepted: bootstrap_servers, "
                f"storage_options, retry_timeout_ms, {', '.join(SECURITY_KEYS)}, "
                f"{', '.join(_IGNORED_KEYS)}"
            )
        self._backend = backend or open_backend(
            address, storage_options, retry_timeout_ms=retry_timeout_ms, security=security
        )
        self._owns_backend = backend is None

    def close(self) -> None:
        if self._owns_backend:
            self._backend.close()

    def __enter__(self) -> Admin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- topics -----------------------------------------------------------------
    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        config: Mapping[str, Any] | None = None,
        value_type: pa.DataType | pa.Schema | None = None,
        replication_factor: int = 1,
    ) -> TopicDescription:
        """Create a topic; ``value_type`` (an Arrow struct or schema) makes it a typed topic.

        ``replication_factor``: 1 to the live brokers, or -1 (the default, 1), as Kafka
        accepts it; stored and described back (the object store holds the only copy)."""
        self._backend.create_topic(
            name, partitions, dict(config or {}), _struct(value_type), replication_factor
        )
        return self._backend.describe_topic(name)

    def delete_topic(self, name: str) -> None:
        self._backend.delete_topic(name)

    def list_topics(self) -> list[str]:
        return sorted(self._backend.list_topics())

    def describe_topic(self, name: str, *, sizes: bool = True) -> TopicDescription:
        return self._backend.describe_topic(name, sizes=sizes)

    def alter_topic_config(
        self, name: str, updates: Mapping[str, Any], remove: Iterable[str] = ()
    ) -> TopicDescription:
        """Set ``updates`` and remove the keys in ``remove`` (they go back to their defaults)."""
        removed = [remove] if isinstance(remove, str) else list(remove)
        if not updates and not removed:
            raise InvalidConfigurationError(
                "no config given; accepted: one or more key=value pairs, or keys to remove"
            )
        both = sorted(set(updates) & set(removed))
        if both:
            raise InvalidConfigurationError(f"{both[0]!r} is both set and removed; choose one")
        self._backend.alter_topic_config(name, dict(updates), removed)
        return self._backend.describe_topic(name)

    def add_partitions(self, name: str, total: int) -> TopicDescription:
        self._backend.add_partitions(name, total)
        return self._backend.describe_topic(name)

    def list_offsets(self, topic: str, spec: str | int = "latest") -> dict[int, int]:
        """Per partition: the earliest / latest offset, or the first at or after a ms timestamp."""
        count = self._backend.topic_layout(topic)[0]
        return {p: self._backend.list_offsets(topic, p, spec) for p in range(count)}

    # -- transactions ----------------------------------------------------------------
    def list_transactions(self) -> dict[str, dict[str, Any]]:
        """Kafka transactional ids and their coordinator state (``state``, ``pid``,
        ``epoch``, ``timeout_ms``, ``started_ms``, ``partitions``, ``groups``)."""
        return dict(sorted(self._backend.call(actions.LIST_TRANSACTIONS).items()))

    def describe_transaction(self, transactional_id: str) -> dict[str, Any]:
        found = self._backend.call(actions.LIST_TRANSACTIONS).get(transactional_id)
        if found is None:
            raise TransactionalIdNotFoundError(f"no transactional id {transactional_id!r}")
        return dict(found)

    def abort_transaction(self, transactional_id: str) -> None:
        """Abort the id's open transaction now (its producer is fenced), as
        kafka-transactions abort does for a hanging transaction."""
        self._backend.call(actions.ABORT_TRANSACTION, transactional_id=transactional_id)

    # -- SCRAM users ---------------------------------------------------------------
    def create_user(
        self,
        name: str,
        password: str,
        mechanism: str = "SCRAM-SHA-256",
        iterations: int = 4096,
    ) -> None:
        """Create ``name`` (the principal ``User:name``) or set its password, as Kafka's
        AlterUserScramCredentials: salted and hashed here, the password is never sent."""
        from sparklog.security import users

        self._backend.call(
            actions.SET_SCRAM_CREDENTIAL,
            user=name,
            mechanism=mechanism,
            **users.salted(mechanism, password, iterations),
        )

    def delete_user(self, name: str, mechanism: str | None = None) -> list[str]:
        """Delete the user's credentials (one mechanism's, or all); the mechanisms deleted."""
        return self._backend.call(actions.DELETE_SCRAM_CREDENTIAL, user=name, mechanism=mechanism)

    def list_users(self) -> dict[str, list[tuple[str, int]]]:
        """user -> [(mechanism, iterations)]: never a password or hash."""
        return self._backend.call(actions.LIST_USERS)

    # -- mirror links (docs/mirroring.md) -------------------------------------------
    def create_mirror_link(
        self,
        name: str,
        *,
        source: str,
        topics: str,
        groups: str = "",
        prefix: str = "",
        source_options: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Create a link on this cluster (the destination); its document."""
        return self._backend.call(
            actions.CREATE_MIRROR_LINK,
            name=name,
            source=source,
            topics=topics,
            groups=groups,
            prefix=prefix,
            source_options=dict(source_options or {}),
        )

    def list_mirror_links(self) -> list[dict[str, Any]]:
        return self._backend.call(actions.LIST_MIRROR_LINKS)

    def describe_mirror_link(self, name: str) -> dict[str, Any]:
        """The link and each mirror partition's lag (``source_error`` if unreachable)."""
        return self._backend.call(actions.DESCRIBE_MIRROR_LINK, name=name)

    def pause_mirror_link(self, name: str, paused: bool = True) -> dict[str, Any]:
        return self._backend.call(actions.PAUSE_MIRROR_LINK, name=name, paused=paused)

    def delete_mirror_link(self, name: str) -> None:
        self._backend.call(actions.DELETE_MIRROR_LINK, name=name)

    def promote_mirror_topic(self, topic: str) -> dict[str, Any]:
        """Stop mirroring ``topic`` and make it writable; its provenance afterwards."""
        return self._backend.call(actions.PROMOTE_MIRROR_TOPIC, topic=topic)

    def reverse_mirror_link(
        self,
        name: str,
        *,
        reverse_name: str = "",
        source_options: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Fail back after a promote: create on the link's source (the old primary, a root)
        the reverse link, continuing from where the copy ended (docs/mirroring.md)."""
        return self._backend.call(
            actions.REVERSE_MIRROR_LINK,
            name=name,
            reverse_name=reverse_name,
            source_options=dict(source_options or {}),
        )

    # -- groups -------------------------------------------------------------------
    def list_groups(self) -> list[str]:
        return sorted(self._backend.list_groups())

    def describe_group(self, group: str) -> GroupDescription:
        """State, members and per-partition lag (committed offset vs high watermark)."""
        info = self._backend.describe_group(group)
        committed = self._backend.fetch_offsets(group)
        members = [
            MemberDescription(
                m["member_id"],
                list(m.get("topics", [])),
                [TopicPartition(t, int(p)) for t, p in m.get("assignment", [])],
            )
            for m in info.get("members", [])
        ]
        unknown = not members and not committed and info.get("generation", 0) <= 0
        if unknown and group not in self._backend.list_groups():
            raise GroupError(f"unknown group {group!r}")
        owner = {tp: m.member_id for m in members for tp in m.assignment}
        topics = sorted({t for t, _ in committed} | {tp.topic for tp in owner})
        lag = []
        for topic in topics:
            try:
                described = self._backend.describe_topic(topic)
            except UnknownTopicOrPartitionError:
                continue
            for part in described.partitions:
                tp = TopicPartition(topic, part.partition)
                found = committed.get(tp)
                if found is None and tp not in owner:
                    continue
                lag.append(
                    PartitionLag(
                        topic,
                        part.partition,
                        None if found is None else found.offset,
                        part.high_watermark,
                        part.log_start_offset,
                        owner.get(tp),
                    )
                )
        return GroupDescription(
            group,
            info.get("state", "Empty"),
            int(info.get("generation", 0)),
            info.get("strategy", ""),
            members,
            lag,
        )

    def reset_group_offsets(
        self,
        group: str,
        topic: str,
        *,
        to_earliest: bool = False,
        to_latest: bool = False,
        to_offset: int | None = None,
        to_timestamp_ms: int | None = None,
        shift_by: int | None = None,
        partitions: Iterable[int] | None = None,
        execute: bool = False,
    ) -> list[OffsetReset]:
        """Plan (and with ``execute`` apply) new committed offsets, like kafka-consumer-groups.sh.

        Exactly one of the ``to_*`` / ``shift_by`` choices; targets are clamped to
        ``[log_start_offset, high_watermark]``.  Executing needs the group to have
        no active members, so nobody overwrites the reset.
        """
        chosen = [
            n
            for n, v in (
                ("to_earliest", to_earliest),
                ("to_latest", to_latest),
                ("to_offset", to_offset is not None),
                ("to_datetime", to_timestamp_ms is not None),
                ("shift_by", shift_by is not None),
            )
            if v
        ]
        if len(chosen) != 1:
            raise InvalidConfigurationError(
                f"choose exactly one reset ({', '.join(chosen) or 'none given'}); accepted: "
                "to-earliest, to-latest, to-offset, to-datetime, shift-by"
            )
        described = self._backend.describe_topic(topic)
        wanted = set(partitions) if partitions is not None else None
        committed = self._backend.fetch_offsets(group)
        plan = []
        for part in described.partitions:
            if wanted is not None and part.partition not in wanted:
                continue
            current = committed.get(TopicPartition(topic, part.partition))
            now = None if current is None else current.offset
            if to_earliest:
                target = part.log_start_offset
            elif to_latest:
                target = part.high_watermark
            elif to_offset is not None:
                target = to_offset
            elif to_timestamp_ms is not None:
                target = self._backend.list_offsets(topic, part.partition, to_timestamp_ms)
            else:
                assert shift_by is not None
                base = now if now is not None else part.log_start_offset
                target = base + shift_by
            target = min(max(target, part.log_start_offset), part.high_watermark)
            plan.append(OffsetReset(topic, part.partition, now, target))
        if wanted is not None:
            unknown = wanted - {p.partition for p in described.partitions}
            if unknown:
                raise UnknownTopicOrPartitionError(
                    f"topic {topic!r} has no partition {min(unknown)}; accepted: 0-"
                    f"{len(described.partitions) - 1}"
                )
        if execute and plan:
            info = self._backend.describe_group(group)
            if info.get("members"):
                raise GroupError(
                    f"group {group!r} has {len(info['members'])} active member(s); stop its "
                    "consumers before resetting offsets"
                )
            self._backend.commit_offsets(
                group,
                -1,
                "",
                {
                    TopicPartition(r.topic, r.partition): OffsetAndMetadata(r.new, "reset")
                    for r in plan
                },
            )
        return plan

    def delete_group(self, group: str) -> None:
        self._backend.delete_group(group)

    # -- kafka-python's KafkaAdminClient calls ----------------------------------------------
    def create_topics(
        self,
        new_topics: Sequence[NewTopic],
        timeout_ms: int | None = None,
        validate_only: bool = False,
    ) -> dict[str, TopicDescription | None]:
        """Create each NewTopic; with ``validate_only`` only check the names are free."""
        out: dict[str, TopicDescription | None] = {}
        for topic in new_topics:
            if not isinstance(topic, NewTopic):
                raise InvalidConfigurationError(
                    f"{topic!r} is not accepted; accepted: NewTopic(...)"
                )
            if validate_only:
                if topic.name in self._backend.list_topics():
                    from sparklog.errors import TopicAlreadyExistsError

                    raise TopicAlreadyExistsError(f"topic {topic.name!r} already exists")
                out[topic.name] = None
                continue
            out[topic.name] = self.create_topic(
                topic.name,
                topic.num_partitions,
                topic.topic_configs,
                topic.value_type,
                topic.replication_factor,
            )
        return out

    def delete_topics(self, topics: Iterable[str], timeout_ms: int | None = None) -> None:
        for name in topics:
            self._backend.delete_topic(name)

    def create_partitions(
        self,
        topic_partitions: Mapping[str, NewPartitions | int],
        timeout_ms: int | None = None,
        validate_only: bool = False,
    ) -> dict[str, int]:
        """Grow topics to ``NewPartitions(total_count)``; the new totals."""
        out = {}
        for name, wanted in topic_partitions.items():
            total = wanted.total_count if isinstance(wanted, NewPartitions) else int(wanted)
            if validate_only:
                out[name] = total
                continue
            out[name] = len(self.add_partitions(name, total).partitions)
        return out

    def describe_configs(
        self, config_resources: Sequence[ConfigResource], include_synonyms: bool = False
    ) -> list[ConfigResource]:
        """Each topic resource with its effective config (defaults included)."""
        return [
            ConfigResource(
                ConfigResourceType.TOPIC,
                name,
                dict(self._backend.describe_topic(name).config),
            )
            for name in map(_topic_resource, config_resources)
        ]

    def alter_configs(self, config_resources: Sequence[ConfigResource]) -> None:
        """Set the given keys of each topic resource (Kafka's names, e.g. retention.ms)."""
        for resource in config_resources:
            self.alter_topic_config(_topic_resource(resource), resource.configs or {})

    def delete_records(
        self,
        records_to_delete: Mapping[TopicPartition | tuple[str, int], int],
        timeout_ms: int | None = None,
        partition_leader_id: int | None = None,
    ) -> dict[TopicPartition, int]:
        """Kafka's DeleteRecords: records below each offset (-1: all) become unreadable.

        Returns each partition's new log start offset (its low watermark).
        """
        out = {}
        for key, offset in records_to_delete.items():
            tp = TopicPartition(str(key[0]), int(key[1]))
            out[tp] = self._backend.delete_records(tp.topic, tp.partition, int(offset))
        return out

    def list_consumer_groups(self) -> list[tuple[str, str]]:
        """``(group_id, protocol_type)`` of every group."""
        return [(group, "consumer") for group in self.list_groups()]

    def describe_consumer_groups(self, group_ids: Iterable[str]) -> list[GroupDescription]:
        return [self.describe_group(group) for group in group_ids]

    def list_consumer_group_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition] | None = None
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """The group's committed offsets (all, or those of ``partitions``)."""
        found = {
            TopicPartition(t, p): om for (t, p), om in self._backend.fetch_offsets(group_id).items()
        }
        if partitions is None:
            return found
        wanted = [TopicPartition(str(t), int(p)) for t, p in partitions]
        return {tp: found[tp] for tp in wanted if tp in found}

    def alter_consumer_group_offsets(
        self,
        group_id: str,
        offsets: Mapping[TopicPartition | tuple[str, int], OffsetAndMetadata | int],
    ) -> None:
        """Set committed offsets of a group with no active members (kafka-python's call)."""
        info = self._backend.describe_group(group_id)
        if info.get("members"):
            raise GroupError(
                f"group {group_id!r} has {len(info['members'])} active member(s); stop its "
                "consumers before altering offsets"
            )
        chosen = {
            TopicPartition(str(k[0]), int(k[1])): v
            if isinstance(v, OffsetAndMetadata)
            else OffsetAndMetadata(v)
            for k, v in offsets.items()
        }
        self._backend.commit_offsets(group_id, -1, "", chosen)

    def delete_consumer_groups(
        self, group_ids: Iterable[str]
    ) -> list[tuple[str, SparklogError | None]]:
        """Delete each group; ``(group_id, error or None)`` per group, as kafka-python answers."""
        out: list[tuple[str, SparklogError | None]] = []
        for group in group_ids:
            try:
                self._backend.delete_group(group)
                out.append((group, None))
            except SparklogError as exc:
                out.append((group, exc))
        return out

    def delete_consumer_group_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition | tuple[str, int]]
    ) -> dict[TopicPartition, SparklogError | None]:
        """Drop a group's committed offsets (Kafka's OffsetDelete, kafka-consumer-groups
        ``--delete-offsets``); per partition None, or the error that kept its offset.

        The name is the Java AdminClient's ``deleteConsumerGroupOffsets``, in the
        snake case of this client's other ``*_consumer_group_offsets`` calls.  A
        partition of a topic the group's active members are subscribed to keeps its
        offset (GroupSubscribedToTopicError); an unknown group raises
        GroupIdNotFoundError.  A partition without an offset is answered None.
        """
        wanted = sorted({TopicPartition(str(t), int(p)) for t, p in partitions})
        found = self._backend.delete_offsets(group_id, wanted)
        return {tp: found.get(tp) for tp in wanted}

    def describe_topics(self, topics: Iterable[str] | None = None) -> list[TopicDescription]:
        names = self.list_topics() if topics is None else list(topics)
        return [self.describe_topic(name) for name in names]
