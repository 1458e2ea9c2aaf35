"""What every role of the broker shares: its caches of topics, shards and partitions.

:class:`BrokerState` declares the state the roles (leadership, produce path, fetch
path, admin calls; :class:`sparklog.broker_lite.service.Broker` combines them) work
on, and the lookups they all use: a topic's data handle, a partition's state
(views over its shard's writer and reader logs, our leader epoch), the leader check.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sparklog import errors
from sparklog.broker_lite.cluster import Cluster
from sparklog.broker_lite.config import BrokerConfig
from sparklog.broker_lite.damage import report_damage
from sparklog.broker_lite.logs import fields
from sparklog.broker_lite.metrics import Metrics
from sparklog.broker_lite.produce import FlushBatcher
from sparklog.broker_lite.tailcache import PartitionKey, TailCache
from sparklog.errors import (
    InvalidRequestError,
    NotLeaderOrFollowerError,
    UnknownTopicOrPartitionError,
)
from sparklog.groups.coordinator import GroupCoordinator
from sparklog.storage import LogRoot, PartitionLog, Topic
from sparklog.storage.log import ShardLog
from sparklog.topic_partition import TopicPartition

if TYPE_CHECKING:  # the coordinator's module imports the broker's state for its markers
    from sparklog.broker_lite.transactions.coordinator import TransactionCoordinator

log = logging.getLogger("sparklog.broker_lite.broker")


@dataclass
class ShardState:
    """What this broker holds for one shard log: the writer, the reader, our leader epoch."""

    key: tuple[str, str, int]  # (topic, topic id, shard)
    log: ShardLog
    reader: ShardLog
    lock: threading.Lock = field(default_factory=threading.Lock)
    reader_lock: threading.Lock = field(default_factory=threading.Lock)
    epoch: int | None = None  # our leader epoch once we bumped it
    refreshed: float = 0.0  # monotonic time of the writer log's last refresh

    def refresh(self, min_interval_s: float = 0.0) -> None:
        """Re-read the log (caller holds ``lock``), at most once per ``min_interval_s``."""
        now = time.monotonic()
        if min_interval_s and now - self.refreshed < min_interval_s:
            return
        self.log.refresh()
        self.refreshed = time.monotonic()


@dataclass
class PartitionState:
    """One partition as this broker sees it: views over its shard's writer and reader logs."""

    key: PartitionKey
    shard: ShardState
    log: PartitionLog
    reader: PartitionLog
    changed: threading.Condition = field(default_factory=threading.Condition)

    @property
    def lock(self) -> threading.Lock:
        return self.shard.lock

    @property
    def reader_lock(self) -> threading.Lock:
        return self.shard.reader_lock

    @property
    def epoch(self) -> int | None:
        return self.shard.epoch

    @epoch.setter
    def epoch(self, value: int | None) -> None:
        self.shard.epoch = value

    @property
    def refreshed(self) -> float:
        return self.shard.refreshed

    def refresh(self, min_interval_s: float = 0.0) -> None:
        """Re-read the shard's log (caller holds ``lock``)."""
        self.shard.refresh(min_interval_s)


def storage_call(call: Callable[[], Any]) -> Any:
    """Run a storage call; damaged stored data is logged as an ERROR (once per file).

    The error itself goes on to the caller (and the client, as CORRUPT_MESSAGE:
    non-retriable, naming the file) with its cause kept.
    """
    try:
        return call()
    except errors.CorruptRecordError as exc:
        report_damage(exc)
        raise


class BrokerState:
    """The broker's shared state and lookups (see the module docstring)."""

    config: BrokerConfig
    root: LogRoot
    metrics: Metrics
    cache: TailCache
    coordinator: GroupCoordinator
    transactions: TransactionCoordinator
    cluster: Cluster | None
    _lock: threading.Lock
    _topics: dict[str, Topic]
    _partitions: dict[PartitionKey, PartitionState]
    _shards: dict[tuple[str, str, int], ShardState]
    _batcher: FlushBatcher | None
    _led: set[TopicPartition]
    damaged_topics: dict[str, str]
    _pool: ThreadPoolExecutor
    commits: int
    #: called with (topic, partitions) after each commit of records (the Kafka listener's
    #: parked fetches wake on it)
    commit_hooks: list[Callable[[str, list[int]], None]]
    _committed: threading.Condition
    _stopping: threading.Event
    _ready: threading.Event
    _threads: list[threading.Thread]

    def topic(self, name: str) -> Topic:
        with self._lock:
            topic = self._topics.get(name)
        if topic is not None:
            return topic
        topic = storage_call(lambda: self.root.topic(name))
        if self.cluster is not None:
            self.cluster.note_shards(name, topic.shards)
        with self._lock:
            return self._topics.setdefault(name, topic)

    def partition_state(self, topic: Topic, partition: int) -> PartitionState:
        if not isinstance(partition, int) or isinstance(partition, bool):
            raise InvalidRequestError(f"partition {partition!r} is not an integer")
        if not 0 <= partition < topic.partitions:
            try:
                topic.reload()
            except errors.UnknownTopicOrPartitionError:
                self._forget_topic(topic.name)
                raise UnknownTopicOrPartitionError(f"topic {topic.name!r} was deleted") from None
            if not 0 <= partition < topic.partitions:
                raise UnknownTopicOrPartitionError(
                    f"topic {topic.name!r} has no partition {partition}; accepted: 0-"
                    f"{topic.partitions - 1}"
                )
        key = (topic.name, topic.info.topic_id, partition)
        with self._lock:
            st = self._partitions.get(key)
            if st is None:
                shard_key = (topic.name, topic.info.topic_id, topic.info.shard_of(partition))
                shard = self._shards.get(shard_key)
                if shard is None:
                    shard = ShardState(
                        shard_key,
                        log=topic.shard(shard_key[2]),
                        reader=topic.open_shard(shard_key[2]),
                    )
                    self._shards[shard_key] = shard
                st = PartitionState(
                    key,
                    shard,
                    log=topic.view(shard.log, partition),
                    reader=topic.view(shard.reader, partition),
                )
                self._partitions[key] = st
        return st

    def _check_leader(self, topic: str, partition: int) -> None:
        assert self.cluster is not None
        if self._stopping.is_set():
            raise NotLeaderOrFollowerError(
                f"broker {self.config.broker_id} is shutting down", leader_location=""
            )
        if self.cluster.is_leader(topic, partition):
            return
        leader = self.cluster.leader(topic, partition)
        if not self.cluster.healthy:
            known = (
                f"broker {leader.broker_id} at {leader.location} leads it"
                if leader
                else ("no other live broker is known")
            )
            raise NotLeaderOrFollowerError(
                f"broker {self.config.broker_id} lost its lease (storage unreachable?) and "
                f"leads nothing; for {topic}-{partition} {known}",
                leader_id=leader.broker_id if leader else -1,
                leader_location=leader.location if leader else "",
            )
        raise NotLeaderOrFollowerError(
            f"broker {self.config.broker_id} does not lead {topic}-{partition}; broker "
            f"{leader.broker_id if leader else '?'} at {leader.location if leader else '?'} does",
            leader_id=leader.broker_id if leader else -1,
            leader_location=leader.location if leader else "",
        )

    def _forget_topic(self, name: str) -> None:
        with self._lock:
            topic = self._topics.pop(name, None)
            if topic is not None:
                for key in [k for k in self._partitions if k[0] == name]:
                    self._partitions.pop(key)
                    self.cache.drop(key)
                for shard_key in [k for k in self._shards if k[0] == name]:
                    self._shards.pop(shard_key)
        if self.cluster is not None:
            self.cluster.forget_topic(name)

    def _report_damaged(self, name: str, exc: BaseException) -> None:
        """Isolate a topic whose metadata is damaged: log it once, serve the other topics."""
        message = str(exc)[:500]
        if self.damaged_topics.get(name) != message:
            log.error(
                "topic metadata is damaged; the topic is not served until it is repaired",
                extra=fields(topic=name, error=message),
            )
        self.damaged_topics[name] = message
