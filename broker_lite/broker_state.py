"""What every role of the broker shares: its caches of topics, shards and partitions.

:class:`BrokerState` is the one object the roles (leadership, produce path, fetch
path, admin calls, upkeep; :class:`sparklog.broker_lite.service.Broker` composes them)
are each handed: the configuration, root and cluster view, the caches, and the lookups
they all use: a topic's data handle, a partition's state (views over its shard's
writer and reader logs, our leader epoch), the leader check, the commit count a
long-poll fetch waits on.  It is also the transaction coordinator's host
(:class:`~sparklog.broker_lite.transactions.host.TransactionHost`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from sparklog import errors
from sparklog.broker_lite.cluster import Cluster
from sparklog.broker_lite.config import BrokerConfig
from sparklog.broker_lite.logs import fields
from sparklog.broker_lite.metrics import Metrics
from sparklog.broker_lite.partition_state import PartitionState, ShardState, storage_call
from sparklog.broker_lite.peers import Peers
from sparklog.broker_lite.tailcache import PartitionKey, TailCache
from sparklog.errors import (
    InvalidRequestError,
    NotLeaderOrFollowerError,
    UnknownTopicOrPartitionError,
)
from sparklog.storage import LogRoot, Topic
from sparklog.storage.journal import JournalWriter
from sparklog.topic_partition import TopicPartition

log = logging.getLogger("sparklog.broker_lite.broker")


class BrokerState:
    """The broker's shared state and lookups (see the module docstring).

    ``lock`` guards ``topic_handles``, ``partitions`` and ``shards``; ``led`` is the
    leadership role's, read by the others; ``cluster`` is set when the broker starts.
    """

    def __init__(self, config: BrokerConfig, root: LogRoot, metrics: Metrics) -> None:
        self.config = config
        self.root = root
        self.metrics = metrics
        self.cache = TailCache(config.tail_cache_bytes)
        #: Flight clients to the cluster's other brokers (markers to a partition's leader)
        self.peers = Peers(config)
        self.cluster: Cluster | None = None
        self.lock = threading.Lock()
        self.topic_handles: dict[str, Topic] = {}
        self.partitions: dict[PartitionKey, PartitionState] = {}
        self.shards: dict[tuple[str, str, int], ShardState] = {}
        #: the partitions this broker leads (the leadership role derives them)
        self.led: set[TopicPartition] = set()
        #: topics whose metadata cannot be read (name -> why): not served, reported
        self.damaged_topics: dict[str, str] = {}
        #: commits made by this broker so far, for waits on several partitions at once
        self.commits = 0
        #: called with (topic, partitions) after each commit of records (the Kafka listener's
        #: parked fetches wake on it)
        self.commit_hooks: list[Callable[[str, list[int]], None]] = []
        self.committed = threading.Condition()
        #: set when the broker stops: every loop and wait of every role ends
        self.stop_requested = threading.Event()
        #: the broker's journal (format 3), once it starts, if it journals anything
        self.journal: JournalWriter | None = None

    def count_commit(self) -> None:
        """One more commit made through this broker (a flush's, a transaction's markers):
        wakes the waits on several partitions at once (``wait_for_commit``)."""
        with self.committed:
            self.commits += 1
            self.committed.notify_all()

    def wait_for_commit(self, seen: int, timeout_s: float) -> None:
        """Wait until this broker commits anything after ``seen`` (a value of
        ``commits``), at most ``timeout_s``: a fetch long-polling several partitions
        wakes on the first commit instead of polling them."""
        with self.committed:
            self.committed.wait_for(
                lambda: self.commits != seen or self.stop_requested.is_set(), timeout_s
            )

    def topic(self, name: str) -> Topic:
        with self.lock:
            topic = self.topic_handles.get(name)
        if topic is not None:
            return topic
        topic = storage_call(lambda: self.root.topic(name))
        if self.cluster is not None:
            self.cluster.note_shards(name, topic.shards)
        with self.lock:
            return self.topic_handles.setdefault(name, topic)

    def partition_state(self, topic: Topic, partition: int) -> PartitionState:
        if not isinstance(partition, int) or isinstance(partition, bool):
            raise InvalidRequestError(f"partition {partition!r} is not an integer")
        if not 0 <= partition < topic.partitions:
            try:
                topic.reload()
            except errors.UnknownTopicOrPartitionError:
                self.forget_topic(topic.name)
                raise UnknownTopicOrPartitionError(f"topic {topic.name!r} was deleted") from None
            if not 0 <= partition < topic.partitions:
                raise UnknownTopicOrPartitionError(
                    f"topic {topic.name!r} has no partition {partition}; accepted: 0-"
                    f"{topic.partitions - 1}"
                )
        key = (topic.name, topic.info.topic_id, partition)
        with self.lock:
            st = self.partitions.get(key)
            if st is None:
                shard_key = (topic.name, topic.info.topic_id, topic.info.shard_of(partition))
                shard = self.shards.get(shard_key)
                if shard is None:
                    shard = ShardState(
                        shard_key,
                        log=topic.shard(shard_key[2]),
                        reader=topic.open_shard(shard_key[2]),
                    )
                    if self.journal is not None and self.config.journal_records:
                        shard.log.use_journal(self.journal)
                    self.shards[shard_key] = shard
                st = PartitionState(
                    key,
                    shard,
                    log=topic.view(shard.log, partition),
                    reader=topic.view(shard.reader, partition),
                )
                self.partitions[key] = st
        return st

    def check_leader(self, topic: str, partition: int) -> None:
        """Refuse a produce to a partition this broker does not lead, naming the leader."""
        assert self.cluster is not None
        if self.stop_requested.is_set():
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

    def reload_topic(self, name: str) -> None:
        """Re-read a cached topic's metadata (config, partitions), keeping its shard
        states: a second handle on a leased shard beside one an in-flight flush still
        holds could give an offset twice.  A deleted topic is forgotten, a damaged one
        forgotten and reported."""
        with self.lock:
            topic = self.topic_handles.get(name)
        if topic is None:
            return
        try:
            topic.reload()
        except errors.UnknownTopicOrPartitionError:
            self.forget_topic(name)
        except errors.CorruptRecordError as exc:
            self.forget_topic(name)
            self.report_damaged(name, exc)

    def forget_topic(self, name: str) -> None:
        """Drop a deleted (or unreadable) topic's handle, partition and shard states."""
        with self.lock:
            topic = self.topic_handles.pop(name, None)
            if topic is not None:
                for key in [k for k in self.partitions if k[0] == name]:
                    self.partitions.pop(key)
                    self.cache.drop(key)
                for shard_key in [k for k in self.shards if k[0] == name]:
                    self.shards.pop(shard_key)
        if self.cluster is not None:
            self.cluster.forget_topic(name)

    def report_damaged(self, name: str, exc: BaseException) -> None:
        """Isolate a topic whose metadata is damaged: log it once, serve the other topics."""
        message = str(exc)[:500]
        if self.damaged_topics.get(name) != message:
            log.error(
                "topic metadata is damaged; the topic is not served until it is repaired",
                extra=fields(topic=name, error=message),
            )
        self.damaged_topics[name] = message
