"""The small interface Producer, Consumer and Admin use; one implementation per mode.

``EmbeddedBackend`` talks to a storage root directly; ``BrokerBackend`` adapts
``sparklog.client.transports.flight_client.BrokerClient``.  Every method raises only
:mod:`sparklog.errors` errors.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, TypeVar

from sparklog.client.types import OffsetAndMetadata, TopicDescription
from sparklog.errors import SparklogError
from sparklog.protocol import actions
from sparklog.protocol.actions import Action
from sparklog.topic_partition import TopicPartition

R = TypeVar("R")

if TYPE_CHECKING:  # annotations only: a metadata command imports neither
    import pyarrow as pa

    from sparklog.groups.coordinator import JoinResult


class TopicLayout(NamedTuple):
    """What clients need per topic: partition count, record size limit, timestamp type."""

    partitions: int
    max_message_bytes: int
    log_append_time: bool = False

    @classmethod
    def of(cls, partitions: int, effective_config: Mapping[str, Any]) -> TopicLayout:
        """The layout of a topic with ``partitions`` and its effective (defaulted) config."""
        return cls(
            partitions,
            int(effective_config["max.message.bytes"]),
            effective_config["message.timestamp.type"] == "LogAppendTime",
        )


@dataclass(frozen=True)
class ProduceResult:
    base_offset: int
    record_count: int
    duplicate: bool = False


@dataclass(frozen=True)
class FetchResult:
    """Record batches (``offset`` column first) from one partition, plus its offsets."""

    batches: list[pa.RecordBatch]
    high_watermark: int
    log_start_offset: int

    @property
    def record_count(self) -> int:
        return sum(b.num_rows for b in self.batches)


@dataclass(frozen=True)
class ProducerIdentity:
    """An idempotent producer's id and epoch, with the first sequence of each batch."""

    producer_id: int
    producer_epoch: int
    sequences: Mapping[int, int]


class Backend(Protocol):
    address: str

    def close(self) -> None: ...

    # -- topics -------------------------------------------------------------
    def list_topics(self) -> list[str]: ...
    def describe_topic(self, name: str, *, sizes: bool = False) -> TopicDescription: ...
    def topic_layout(self, name: str) -> TopicLayout: ...
    def create_topic(
        self,
        name: str,
        partitions: int,
        config: Mapping[str, Any],
        value_type: pa.DataType | None = None,
        replication_factor: int = 1,
    ) -> None: ...
    def delete_topic(self, name: str) -> None: ...
    def alter_topic_config(
        self, name: str, updates: Mapping[str, Any], remove: Sequence[str] = ()
    ) -> None: ...
    def add_partitions(self, name: str, total: int) -> None: ...

    # -- records ------------------------------------------------------------
    def init_producer_id(self) -> tuple[int, int]: ...
    def produce(
        self,
        topic: str,
        parts: Mapping[int, Sequence[pa.RecordBatch | pa.Table]],
        *,
        acks: str = "all",
        producer: ProducerIdentity | None = None,
        compression: str | None = None,
    ) -> dict[int, ProduceResult]: ...
    def fetch(
        self,
        topic: str,
        partition: int,
        offset: int,
        *,
        max_bytes: int,
        max_wait_ms: int,
        isolation_level: str = "read_uncommitted",
    ) -> FetchResult: ...
    def list_offsets(self, topic: str, partition: int, spec: str | int) -> int: ...
    def delete_records(self, topic: str, partition: int, before_offset: int) -> int: ...

    # -- groups -------------------------------------------------------------
    def join_group(
        self,
        group: str,
        member_id: str,
        topics: Sequence[str],
        strategy: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
    ) -> JoinResult: ...
    def sync_group(
        self,
        group: str,
        generation: int,
        member_id: str,
        assignment: Mapping[str, Sequence[TopicPartition]] | None = None,
    ) -> list[TopicPartition]: ...
    def heartbeat(self, group: str, generation: int, member_id: str) -> None: ...
    def leave_group(self, group: str, member_id: str) -> None: ...
    def commit_offsets(
        self,
        group: str,
        generation: int,
        member_id: str,
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
    ) -> None: ...
    def fetch_offsets(self, group: str) -> dict[TopicPartition, OffsetAndMetadata]: ...
    def list_groups(self) -> list[str]: ...
    def describe_group(self, group: str) -> dict[str, Any]: ...
    def delete_group(self, group: str) -> None: ...
    # -- any other admin action of the table (sparklog.protocol.actions): transactions,
    # SCRAM users, mirror links; Admin gives each its typed signature --------------------
    def call(self, action: Action[R], /, **body: Any) -> R: ...
    def delete_offsets(
        self, group: str, partitions: Sequence[TopicPartition]
    ) -> dict[TopicPartition, SparklogError | None]: ...


class _ActionCalls:
    """What the shared calls below need of a backend: the action table's generic call."""

    def call(self, action: Action[R], /, **body: Any) -> R:
        raise NotImplementedError


class TopicCalls(_ActionCalls):
    """The topic admin calls of both backends.

    Creating, deleting and adding partitions go to a root-shaped object, ``_topic_api``: a
    ``LogRoot`` (embedded mode) or a ``BrokerClient`` (broker mode), which take the same
    arguments; changing a config is the action table's (``call``: the brokers serve it, or
    the embedded backend runs it on its root). After a change the backend forgets what it
    cached about the topic (``_forget_topic``), so the next call reads it afresh.
    """

    _topic_api: Any

    def _forget_topic(self, name: str) -> None:
        raise NotImplementedError

    def create_topic(
        self,
        name: str,
        partitions: int,
        config: Mapping[str, Any],
        value_type: pa.DataType | None = None,
        replication_factor: int = 1,
    ) -> None:
        self._topic_api.create_topic(
            name, partitions, dict(config), value_type, replication_factor=replication_factor
        )

    def delete_topic(self, name: str) -> None:
        self._topic_api.delete_topic(name)
        self._forget_topic(name)

    def alter_topic_config(
        self, name: str, updates: Mapping[str, Any], remove: Sequence[str] = ()
    ) -> None:
        self.call(actions.ALTER_TOPIC_CONFIG, name=name, updates=dict(updates), remove=list(remove))
        self._forget_topic(name)

    def add_partitions(self, name: str, total: int) -> None:
        self._topic_api.add_partitions(name, total)
        self._forget_topic(name)


class GroupCalls(_ActionCalls):
    """The group calls of both backends.

    A join, a sync and deleting offsets go to a coordinator-shaped object,
    ``_group_api``: a ``BrokerClient`` (broker mode) or an in-process
    ``GroupCoordinator`` (embedded mode), which speak the same group protocol (typed: a
    join's result, an assignment, per-partition errors). The others are the action
    table's (``call``): the brokers serve them, or the embedded backend runs them on its
    coordinator, with the same bodies and results.
    """

    _group_api: Any

    def join_group(
        self,
        group: str,
        member_id: str,
        topics: Sequence[str],
        strategy: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
    ) -> JoinResult:
        result: JoinResult = self._group_api.join_group(
            group, member_id, topics, strategy, session_timeout_ms, rebalance_timeout_ms
        )
        return result

    def sync_group(
        self,
        group: str,
        generation: int,
        member_id: str,
        assignment: Mapping[str, Sequence[TopicPartition]] | None = None,
    ) -> list[TopicPartition]:
        return list(self._group_api.sync_group(group, generation, member_id, assignment))

    def heartbeat(self, group: str, generation: int, member_id: str) -> None:
        self.call(actions.HEARTBEAT, group=group, generation=generation, member_id=member_id)

    def leave_group(self, group: str, member_id: str) -> None:
        self.call(actions.LEAVE_GROUP, group=group, member_id=member_id)

    def commit_offsets(
        self,
        group: str,
        generation: int,
        member_id: str,
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
    ) -> None:
        # one commit per metadata string (the action carries one for all its offsets)
        by_metadata: dict[str, list[list[Any]]] = {}
        for (topic, partition), om in offsets.items():
            by_metadata.setdefault(om.metadata, []).append([topic, partition, om.offset])
        for metadata, rows in by_metadata.items():
            self.call(
                actions.COMMIT_OFFSETS,
                group=group,
                generation=generation,
                member_id=member_id,
                offsets=rows,
                metadata=metadata,
            )

    def list_groups(self) -> list[str]:
        return self.call(actions.LIST_GROUPS)

    def describe_group(self, group: str) -> dict[str, Any]:
        info = self.call(actions.DESCRIBE_GROUP, group=group)
        info.setdefault("strategy", info.get("protocol", ""))
        return info

    def delete_group(self, group: str) -> None:
        self.call(actions.DELETE_GROUP, group=group)

    def delete_offsets(
        self, group: str, partitions: Sequence[TopicPartition]
    ) -> dict[TopicPartition, SparklogError | None]:
        return dict(self._group_api.delete_offsets(group, list(partitions)))
