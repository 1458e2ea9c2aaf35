"""The client's value types, named and shaped as in Kafka's clients."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

from sparklog.topic_partition import TopicPartition as TopicPartition  # re-exported

Header = tuple[str, bytes | None]


class OffsetAndMetadata(NamedTuple):
    """A committed position: the next offset to consume, plus free-form metadata."""

    offset: int
    metadata: str = ""


class RecordMetadata(NamedTuple):
    """Where a produced record landed (kafka-python's RecordMetadata fields)."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    serialized_key_size: int = -1
    serialized_value_size: int = -1
    log_start_offset: int = -1
    checksum: None = None

    @property
    def timestamp(self) -> int:
        """The record's timestamp in ms (kafka-python's name)."""
        return self.timestamp_ms

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


class BatchMetadata(NamedTuple):
    """Where the records of one ``send_batch`` landed: ``(partition, base_offset, count)``."""

    topic: str
    ranges: list[tuple[int, int, int]]

    @property
    def record_count(self) -> int:
        return sum(count for _, _, count in self.ranges)


#: Kafka's timestamp types (ConsumerRecord.timestamp_type).
CREATE_TIME = 0
LOG_APPEND_TIME = 1


class ConsumerRecord(NamedTuple):
    """One consumed record, with kafka-python's fields.

    ``checksum`` is always None (record batch v2 has no per-record checksum);
    the serialized sizes are those of the stored key and value (-1 for null);
    ``leader_epoch`` is -1 (not tracked per record).
    """

    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int
    key: Any
    value: Any
    headers: list[Header]
    checksum: None = None
    serialized_key_size: int = -1
    serialized_value_size: int = -1
    leader_epoch: int = -1

    @property
    def timestamp_ms(self) -> int:
        """The timestamp in ms (the name sparklog used before kafka-python's)."""
        return self.timestamp

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


class OffsetAndTimestamp(NamedTuple):
    """``offsets_for_times``' answer: the first offset at or after a time, and its timestamp."""

    offset: int
    timestamp: int
    leader_epoch: int = -1


class ConsumerRebalanceListener:
    """Called around rebalances (kafka-python's and Kafka's interface); override both.

    ``on_partitions_revoked`` runs before a member gives its partitions up (after
    the auto-commit of what it delivered) and on ``close()``;
    ``on_partitions_assigned`` once the new assignment is known.
    """

    def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        """Partitions this member is about to lose."""

    def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        """Partitions this member now owns."""


#: The ``leader`` a storage root reports: embedded writers commit with optimistic concurrency.
EMBEDDED_LEADER = "embedded"


@dataclass(frozen=True)
class PartitionDescription:
    """A partition's leader (``id@host:port``, or ``"embedded"`` on a storage root), offsets
    and stored bytes."""

    partition: int
    leader: str | None
    log_start_offset: int
    high_watermark: int
    size_bytes: int | None = None


@dataclass(frozen=True)
class TopicDescription:
    """A topic's id, partitions and effective config; ``value_type`` on typed topics."""

    name: str
    topic_id: str
    partitions: list[PartitionDescription]
    config: dict[str, Any]
    value_type: Any = None  # a pyarrow struct type on typed topics
    #: as created (kept for Kafka compatibility: the object store holds the only copy)
    replication_factor: int = 1


@dataclass(frozen=True)
class MemberDescription:
    member_id: str
    topics: list[str]
    assignment: list[TopicPartition]


@dataclass(frozen=True)
class PartitionLag:
    """A group's committed offset in one partition against its high watermark."""

    topic: str
    partition: int
    committed: int | None
    high_watermark: int
    log_start_offset: int
    member: str | None

    @property
    def lag(self) -> int | None:
        if self.committed is None:
            return None
        return max(self.high_watermark - max(self.committed, self.log_start_offset), 0)


@dataclass(frozen=True)
class GroupDescription:
    group: str
    state: str
    generation: int
    strategy: str
    members: list[MemberDescription] = field(default_factory=list)
    lag: list[PartitionLag] = field(default_factory=list)

    @property
    def total_lag(self) -> int:
        return sum(p.lag or 0 for p in self.lag)


@dataclass
class NewTopic:
    """A topic to create (kafka-python's NewTopic), plus sparklog's ``value_type`` (typed topics).

    ``replication_factor`` (1 to the live brokers, or -1) is stored and described back, as
    Kafka's; the object store holds the only copy.  ``replica_assignments`` is accepted for
    kafka-python's signature.
    """

    name: str
    num_partitions: int = 1
    replication_factor: int = 1
    replica_assignments: dict[int, list[int]] | None = None
    topic_configs: dict[str, Any] | None = None
    value_type: Any = None


@dataclass
class NewPartitions:
    """The total partition count a topic should grow to (kafka-python's NewPartitions)."""

    total_count: int
    new_assignments: list[list[int]] | None = None


class ConfigResourceType:
    """Kafka's config resource types; sparklog has per-topic configs only."""

    TOPIC = 2
    BROKER = 4


@dataclass
class ConfigResource:
    """A resource's configs (kafka-python's ConfigResource); ``describe_configs`` fills them."""

    resource_type: int | str
    name: str
    configs: dict[str, Any] | None = None
