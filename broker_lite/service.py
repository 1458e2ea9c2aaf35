"""The broker's logic, independent of the wire: produce, fetch, metadata, admin, groups.

:class:`Broker` owns the per-topic produce batchers, the leader-side partition
states (writer log, leader epoch, long-poll condition), the tail cache, the
cluster view and the group coordinator.  ``broker_lite.server`` exposes it over
Arrow Flight; tests and the benchmark can also drive it directly.
"""

from __future__ import annotations

import functools
import logging
import secrets
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, wait
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from sparklog import errors
from sparklog.broker_lite.cluster import BrokerInfo, Cluster, rendezvous_weight
from sparklog.broker_lite.config import BrokerConfig
from sparklog.broker_lite.group_routing import CoordinatedGroups
from sparklog.broker_lite.logs import fields
from sparklog.broker_lite.metrics import Metrics
from sparklog.broker_lite.produce import (
    ProduceItem,
    ProduceOutcome,
    ProduceRequest,
    Run,
    TopicBatcher,
    commit_pool,
    duplicate_outcome,
)
from sparklog.broker_lite.tailcache import PartitionKey, TailCache
from sparklog.errors import FencedError as LeaderEpochFenced
from sparklog.errors import (
    InvalidRecordError,
    InvalidRequestError,
    NotCoordinatorError,
    NotLeaderError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceNumberError,
    ProducerFencedError,
    SparklogError,
    UnknownTopicError,
)
from sparklog.groups.coordinator import GroupCoordinator
from sparklog.retry import retrying
from sparklog.storage import LogRoot, PartitionLog, ProducerBatch, Topic, open_root
from sparklog.storage.catalog import TopicInfo, value_type_from_text, value_type_to_text
from sparklog.storage.log import ShardLog
from sparklog.storage.maintenance import delete_records
from sparklog.storage.records import OFFSET_FIELD, offset_column
from sparklog.storage.topics import Normalized
from sparklog.topic_partition import TopicPartition

log = logging.getLogger("sparklog.broker_lite.broker")
ACKS = ("0", "1", "all")


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


def with_offsets(batches: Sequence[pa.RecordBatch], base_offset: int) -> list[pa.RecordBatch]:
    """The batches with their offset column (from ``base_offset``) in front."""
    out = []
    offset = base_offset
    for batch in batches:
        n = batch.num_rows
        offsets = offset_column(offset, n)
        schema = _with_offset_field(batch.schema)
        out.append(pa.RecordBatch.from_arrays([offsets, *batch.columns], schema=schema))
        offset += n
    return out


@functools.lru_cache(maxsize=64)
def _with_offset_field(schema: pa.Schema) -> pa.Schema:
    """``offset`` + ``schema``: built once per record schema, not once per partition."""
    return pa.schema([OFFSET_FIELD, *schema])


def _storage(call: Callable[[], Any]) -> Any:
    try:
        return call()
    except SparklogError as exc:
        raise exc from None


class Broker:
    """One broker: everything durable lives in ``root``; this holds caches and threads."""

    def __init__(self, config: BrokerConfig, root: LogRoot | None = None) -> None:
        self.config = config
        # Topic metadata is answered from the cluster metadata log's image in memory;
        # the tick loop follows the log (metadata_max_staleness_ms=None: reads never probe).
        self.root = root or open_root(
            config.root,
            config.storage_options,
            snapshot_interval=config.snapshot_interval,
            fsync=config.fsync,
            metadata_max_staleness_ms=None,
        )
        self.metrics = Metrics()
        self.cache = TailCache(config.tail_cache_bytes)
        #: the group coordinator (in memory: this broker's groups); ``groups`` is what the
        #: listeners call, refusing groups another broker coordinates
        self.coordinator = GroupCoordinator(
            self.root,
            min_session_timeout_ms=config.group_min_session_timeout_ms,
            max_session_timeout_ms=config.group_max_session_timeout_ms,
            initial_rebalance_delay_ms=config.group_initial_rebalance_delay_ms,
            poll_ms=config.group_poll_ms,
            in_memory=True,
        )
        self.groups = CoordinatedGroups(self.coordinator, self.check_coordinator)
        self.cluster: Cluster | None = None
        self._lock = threading.Lock()
        self._topics: dict[str, Topic] = {}
        self._partitions: dict[PartitionKey, PartitionState] = {}
        self._shards: dict[tuple[str, str, int], ShardState] = {}
        self._batchers: dict[str, TopicBatcher] = {}
        self._led: set[TopicPartition] = set()
        #: topics whose metadata cannot be read (name -> why): not served, reported
        self.damaged_topics: dict[str, str] = {}
        self._pool = commit_pool(8)
        #: commits made by this broker so far, for waits on several partitions at once
        self.commits = 0
        self._committed = threading.Condition()
        self._stopping = threading.Event()
        self._ready = threading.Event()
        self._threads: list[threading.Thread] = []

    # -- lifecycle ---------------------------------------------------------
    def start(self, location: str, kafka_address: str | None = None) -> None:
        """Publish our lease (Flight ``location``, Kafka listener address) and start threads."""
        _storage(self.root.store.ensure_root)
        # the first broker to open a root of the previous layout upgrades it, once
        _storage(
            lambda: retrying(self.root.metadata.upgrade, deadline_ms=self.config.retry_timeout_ms)
        )
        self.cluster = cluster = Cluster(
            self.root,
            self.config.broker_id,
            location,
            lease_interval_ms=self.config.lease_interval_ms,
            lease_timeout_ms=self.config.lease_timeout_ms,
            replication_factor=self.config.replication_factor,
            force_leader=self.config.force_leader,
            probe_peers=True,
            kafka_address=kafka_address,
        )
        # the first renewal also opens the store's connections: give it a few tries
        _storage(lambda: retrying(cluster.renew, deadline_ms=self.config.retry_timeout_ms))
        self._update_leadership()
        self._spawn("lease", self._lease_loop)
        self._spawn("tick", self._tick_loop)
        if self.config.cleaner_interval_ms > 0:
            from sparklog.broker_lite.cleaner import Cleaner

            cleaner = Cleaner(self, self.config.cleaner_interval_ms)
            self._spawn("cleaner", cleaner.loop)

        self._ready.set()

    @property
    def ready(self) -> bool:
        """True once :meth:`start` has finished: the listener refuses requests until then."""
        return self._ready.is_set()

    def _spawn(self, name: str, target: Callable[[], None]) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def close(self) -> None:
        """Graceful stop: refuse new produce, flush pending batches, give up the lease."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        with self._lock:
            batchers = list(self._batchers.values())
        for batcher in batchers:
            batcher.close()
        for st in list(self._partitions.values()):
            with st.changed:
                st.changed.notify_all()
        with self._committed:
            self._committed.notify_all()
        for thread in self._threads:
            thread.join(timeout=10)
        if self.cluster is not None:
            self.cluster.resign()
        self._pool.shutdown(wait=True)
        log.info("broker stopped", extra=fields(broker=self.config.broker_id))

    def _lease_loop(self) -> None:
        """Renew our lease, and nothing else: no other work may delay it.

        Every store call in it has a deadline inside the lease timeout and it takes
        no lock that store I/O holds, so only an outage of the store ends our lease.
        """
        interval = self.config.lease_interval_ms / 1000
        assert self.cluster is not None
        while not self._stopping.wait(interval):
            try:
                self.cluster.renew()
            except SparklogError as exc:
                log.warning("lease renewal failed", extra=fields(error=str(exc)[:500]))

    def _tick_loop(self) -> None:
        """Follow the metadata log and leadership, sweep the groups we coordinate."""
        interval = min(self.config.lease_interval_ms, self.config.metadata_refresh_ms) / 1000
        ticks = 0
        next_metadata = 0.0
        while not self._stopping.wait(interval):
            ticks += 1
            try:
                if time.monotonic() >= next_metadata:
                    next_metadata = time.monotonic() + self.config.metadata_refresh_ms / 1000
                    self.root.metadata.refresh()
                self._reload_topics()
                self._update_leadership()
                self._sweep_groups(with_lag=ticks % 5 == 0)
            except SparklogError as exc:
                log.warning("background tick failed", extra=fields(error=str(exc)))
            except Exception:
                log.exception("background tick failed")

    def _reload_topics(self) -> None:
        with self._lock:
            cached = dict(self._topics)
        for name, topic in cached.items():
            try:
                topic.reload()
            except errors.UnknownTopicError:
                self._forget_topic(name)
            except errors.CorruptionError as exc:
                self._forget_topic(name)
                self._report_damaged(name, exc)

    def _report_damaged(self, name: str, exc: BaseException) -> None:
        """Isolate a topic whose metadata is damaged: log it once, serve the other topics."""
        message = str(exc)[:500]
        if self.damaged_topics.get(name) != message:
            log.error(
                "topic metadata is damaged; the topic is not served until it is repaired",
                extra=fields(topic=name, error=message),
            )
        self.damaged_topics[name] = message

    def _forget_topic(self, name: str) -> None:
        with self._lock:
            topic = self._topics.pop(name, None)
            batcher = self._batchers.pop(name, None)
            if topic is not None:
                for key in [k for k in self._partitions if k[0] == name]:
                    self._partitions.pop(key)
                    self.cache.drop(key)
                for shard_key in [k for k in self._shards if k[0] == name]:
                    self._shards.pop(shard_key)
        if self.cluster is not None:
            self.cluster.forget_topic(name)
        if batcher is not None:
            threading.Thread(target=batcher.close, daemon=True).start()

    def _update_leadership(self) -> None:
        assert self.cluster is not None
        live = self.cluster.live()
        self.metrics.live_brokers.set(len(live))
        led: set[TopicPartition] = set()
        for name in _storage(self.root.list_topics):
            try:
                topic = self.topic(name)
            except errors.CorruptionError as exc:
                self._report_damaged(name, exc)
                continue
            except SparklogError:
                continue
            self.damaged_topics.pop(name, None)
            led.update(
                TopicPartition(name, p)
                for p in range(topic.partitions)
                if self.cluster.is_leader(name, p)
            )
            if self.config.replication_factor > 1:
                self._warm_followers(topic)
        gained, lost = led - self._led, self._led - led
        self._load_led(gained)
        if gained or lost:
            self.metrics.leadership_changes.inc(len(gained) + len(lost))
            log.info(
                "leadership changed",
                extra=fields(gained=sorted(gained)[:50], lost=sorted(lost)[:50], live=sorted(live)),
            )
        for name, p in lost:
            for key, st in list(self._partitions.items()):
                if key[0] == name and key[2] == p:
                    # No st.lock: a commit holds it across store I/O.  The next commit
                    # bumps the epoch again (a stale one is fenced and bumped anyway).
                    st.epoch = None
                    self.cache.drop(key)
        self._led = led
        self.metrics.led_partitions.set(len(led))

    def _load_led(self, gained: set[TopicPartition]) -> None:
        """Open the logs of partitions we now lead (here, off the request path), so Metadata
        answers their watermarks from memory."""
        for name, p in sorted(gained):
            try:
                st = self.partition_state(self.topic(name), p)
                with st.lock:
                    st.log.high_watermark  # noqa: B018  (opens the shard log once)
            except SparklogError as exc:
                log.warning(
                    "could not open a led partition",
                    extra=fields(topic=name, partition=p, error=str(exc)[:300]),
                )

    def _warm_followers(self, topic: Topic) -> None:
        """Keep the logs of partitions we follow loaded, so a takeover starts at once."""
        assert self.cluster is not None
        me = self.cluster.broker_id
        for p in range(topic.partitions):
            replicas = self.cluster.replicas(topic.name, p)
            if me in replicas[1:]:
                st = self.partition_state(topic, p)
                if st.lock.acquire(blocking=False):  # busy means loaded: skip, never wait
                    try:
                        st.refresh()
                    finally:
                        st.lock.release()

    # -- the cleaner's view of the broker (cleaner.MaintenanceHost) ---------------------------
    def wait_stopping(self, timeout_s: float) -> bool:
        return self._stopping.wait(timeout_s)

    def maintain_partition(self, topic: str, partition: int) -> Any:
        """Maintenance of a led partition under this broker's epoch, then refresh and trim."""
        from sparklog.storage.maintenance import run_maintenance

        st = self.partition_state(self.topic(topic), partition)
        fresh = self.root.topic(topic)  # its own log objects; races are safe
        report = run_maintenance(fresh, partition, leader_epoch=st.epoch)
        with st.lock:
            st.refresh()
            self.cache.trim(st.key, st.log.log_start_offset)
        return report

    def collect_garbage(self, topic: str) -> None:
        from sparklog.storage.maintenance import collect_garbage

        collect_garbage(self.root.topic(topic), self.config.gc_grace_ms)

    def count_cleaner_run(self, outcome: str) -> None:
        self.metrics.cleaner_runs.labels(outcome).inc()

    def prune_topic_logs(self, topic: str, now_ms: int) -> int:
        from sparklog.storage.maintenance import prune_topic_logs

        return len(prune_topic_logs(self.root.topic(topic), now=now_ms).deleted)

    def prune_group_log(self, group: str, now_ms: int) -> int:
        from sparklog.storage.maintenance import prune_group_log

        return len(prune_group_log(self.root, group, now=now_ms).deleted)

    def led_partitions(self) -> set[TopicPartition]:
        return set(self._led)

    def owned_groups(self, discover: bool = True) -> list[str]:
        """The groups this broker coordinates: all of the root's (a listing, for the cleaner's
        pass), or (``discover=False``, each tick) those it has served since it started."""
        assert self.cluster is not None
        live = sorted(self.cluster.live())
        names = self.coordinator.list_groups() if discover else self.coordinator.known_groups()
        return [
            g
            for g in names
            if live
            and max(live, key=lambda b: rendezvous_weight(g, 0, b)) == self.cluster.broker_id
        ]

    def coordinator_of(self, group: str) -> BrokerInfo | None:
        """The live broker coordinating ``group`` (highest rendezvous weight)."""
        assert self.cluster is not None
        live = self.cluster.live()
        if not live:
            return None
        return live[max(live, key=lambda b: rendezvous_weight(group, 0, b))]

    def check_coordinator(self, group: str) -> None:
        """Refuse a group this broker does not coordinate, naming the one that does."""
        if self.config.force_leader or self.cluster is None:
            return
        owner = self.coordinator_of(group)
        if owner is not None and owner.broker_id == self.config.broker_id:
            return
        where = f"broker {owner.broker_id} at {owner.location}" if owner else "no live broker"
        raise NotCoordinatorError(
            f"group {group!r} is coordinated by {where}, not by broker {self.config.broker_id}",
            coordinator_id=owner.broker_id if owner else -1,
            coordinator_location=owner.location if owner else "",
        )

    def _sweep_groups(self, with_lag: bool) -> None:
        mine = self.owned_groups(discover=False)
        for group in set(self.coordinator.known_groups()) - set(mine):
            self.coordinator.forget(group)  # another broker coordinates it now
        self.coordinator.sweep(mine)
        if with_lag:
            for group in mine:
                for entry in self.coordinator.describe_group(group)["offsets"]:
                    if entry["lag"] is not None:
                        self.metrics.group_lag.labels(
                            group, entry["topic"], str(entry["partition"])
                        ).set(entry["lag"])

    # -- topics and partitions ---------------------------------------------
    def topic(self, name: str) -> Topic:
        with self._lock:
            topic = self._topics.get(name)
        if topic is not None:
            return topic
        topic = _storage(lambda: self.root.topic(name))
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
            except errors.UnknownTopicError:
                self._forget_topic(topic.name)
                raise UnknownTopicError(f"topic {topic.name!r} was deleted") from None
            if not 0 <= partition < topic.partitions:
                raise UnknownTopicError(
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
            raise NotLeaderError(
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
            raise NotLeaderError(
                f"broker {self.config.broker_id} lost its lease (storage unreachable?) and "
                f"leads nothing; for {topic}-{partition} {known}",
                leader_id=leader.broker_id if leader else -1,
                leader_location=leader.location if leader else "",
            )
        raise NotLeaderError(
            f"broker {self.config.broker_id} does not lead {topic}-{partition}; broker "
            f"{leader.broker_id if leader else '?'} at {leader.location if leader else '?'} does",
            leader_id=leader.broker_id if leader else -1,
            leader_location=leader.location if leader else "",
        )

    # -- produce -----------------------------------------------------------
    def produce(
        self,
        topic_name: str,
        items: Sequence[tuple[int, pa.RecordBatch | pa.Table]],
        *,
        acks: str = "all",
        producer_id: int | None = None,
        producer_epoch: int | None = None,
        base_sequence: int | None = None,
        compression: str | None = "none",
    ) -> list[ProduceOutcome]:
        """Validate, enqueue and (unless acks=0) wait for the commit of each item.

        The whole request is refused if any item is invalid (nothing enqueued);
        an idempotent request's sequences run on from ``base_sequence`` across
        its items, in order.
        """
        idempotent = producer_id is not None
        if idempotent and (producer_epoch is None or base_sequence is None):
            raise InvalidRequestError(
                "an idempotent produce needs producer_id, producer_epoch and base_sequence"
            )
        each = []
        sequence = base_sequence or 0
        for partition, data in items:
            producer = None
            if idempotent:
                assert producer_epoch is not None and producer_id is not None
                producer = (producer_id, producer_epoch, sequence)
                sequence += data.num_rows
            each.append(ProduceItem(partition, data, producer))
        outcomes = []
        for outcome in self.produce_each(
            topic_name, each, acks=acks, compression=compression, all_or_nothing=True
        ):
            if isinstance(outcome, BaseException):
                raise outcome
            outcomes.append(outcome)
        return outcomes

    def produce_each(
        self,
        topic_name: str,
        items: Sequence[ProduceItem],
        *,
        acks: str = "all",
        compression: str | None = "none",
        all_or_nothing: bool = False,
    ) -> list[ProduceOutcome | BaseException]:
        """Validate, enqueue and (unless acks=0) wait for each item: its outcome or its error.

        Leadership is checked once per shard and the records are normalised once
        per request (``Topic.normalize_many``), not once per partition: those
        fixed costs (milliseconds each) no longer grow with the partition count.
        ``all_or_nothing`` raises the first invalid item's error before anything
        is enqueued (the Flight protocol); otherwise each item fails alone (Kafka).
        """
        if acks not in ACKS:
            raise InvalidRequestError(f"acks={acks!r} is not accepted; accepted: 0, 1, all")
        topic = self.topic(topic_name)
        refused: dict[int, BaseException] = {}
        leads: dict[int, bool] = {}  # shard -> whether this broker leads it
        shards = topic.info.shards  # (``info.shard_of`` rebuilds the topic's config per call)
        for i, item in enumerate(items):
            try:
                self.partition_state(topic, item.partition)
                shard = item.partition % shards
                if shard not in leads:
                    leads[shard] = False
                    self._check_leader(topic_name, item.partition)
                    leads[shard] = True
                elif not leads[shard]:
                    self._check_leader(topic_name, item.partition)  # this partition's error
            except SparklogError as exc:
                if all_or_nothing:
                    raise exc from None
                refused[i] = exc
        valid = [i for i in range(len(items)) if i not in refused]
        try:
            normalized = dict(
                zip(valid, topic.normalize_many([items[i].data for i in valid]), strict=True)
            )
        except SparklogError as exc:
            if all_or_nothing:
                raise exc from None
            normalized = {}
            for i in valid:  # the error path: find each item's own outcome
                try:
                    batches = topic.normalize(items[i].data)
                except SparklogError as one:
                    refused[i] = one
                    continue
                normalized[i] = Normalized(batches, sum(b.nbytes for b in batches))
        requests: dict[int, ProduceRequest] = {}
        size_bytes = 0
        for i, (batches, size) in normalized.items():
            item = items[i]
            count = sum(b.num_rows for b in batches)
            size_bytes += size
            producer = None
            if item.producer is not None:
                producer = ProducerBatch(*item.producer, max(count, 1))
            requests[i] = ProduceRequest(
                item.partition, batches, count, size, producer, compression
            )
        limit = self.config.max_request_bytes
        if all_or_nothing and size_bytes > limit:
            raise InvalidRecordError(
                f"produce request of {size_bytes} bytes exceeds max_request_bytes={limit}; "
                "send smaller requests"
            )
        for i in [i for i, r in requests.items() if r.size_bytes > limit]:  # (Kafka: per item)
            refused[i] = InvalidRecordError(
                f"{topic_name}-{items[i].partition}: {requests.pop(i).size_bytes} bytes of "
                f"records exceed max_request_bytes={limit}; send smaller requests"
            )
        pending = [requests[i] for i in sorted(requests)]
        if acks == "0":
            if pending:
                self._batcher(topic_name).submit(pending)
            for r in pending:
                r.future.add_done_callback(_log_unacked_failure)
            return [
                refused[i] if i in refused else ProduceOutcome(-1, requests[i].record_count)
                for i in range(len(items))
            ]
        if pending:
            self.metrics.produce_waiting.inc()
            try:
                self._batcher(topic_name).submit(pending)
                wait([r.future for r in pending])
            finally:
                self.metrics.produce_waiting.dec()
        outcomes: list[ProduceOutcome | BaseException] = []
        records = produced_bytes = 0
        for i in range(len(items)):
            if i in refused:
                outcomes.append(refused[i])
                continue
            r = requests[i]
            failure = r.future.exception()
            if failure is not None:
                outcomes.append(failure)
                continue
            outcomes.append(r.future.result())
            records += r.record_count
            produced_bytes += r.size_bytes
        self.metrics.produce_records.labels(topic_name).inc(records)
        self.metrics.produce_bytes.labels(topic_name).inc(produced_bytes)
        return outcomes

    def _batcher(self, topic_name: str) -> TopicBatcher:
        with self._lock:
            batcher = self._batchers.get(topic_name)
            if batcher is None:
                if self._stopping.is_set():
                    raise NotLeaderError("broker is shutting down", leader_location="")
                batcher = TopicBatcher(
                    topic_name,
                    lambda runs: self._flush(topic_name, runs),
                    self.config.linger_ms,
                    self.config.batch_bytes,
                )
                self._batchers[topic_name] = batcher
            return batcher

    def _flush(self, topic_name: str, runs: list[Run]) -> None:
        """Write ONE object for every run of the flush, then ONE commit per shard touched."""
        started = time.perf_counter()
        try:
            topic = self.topic(topic_name)
        except SparklogError as exc:
            _fail(runs, exc)
            return
        ready: list[Run] = []
        for run in runs:
            st = self.partition_state(topic, run.partition)
            keep = []
            with st.lock:
                if st.epoch is None:  # not yet leading: others may have committed meanwhile
                    try:
                        st.refresh()
                    except SparklogError as exc:
                        _fail([run], exc)
                        continue
                for r in run.requests:
                    if r.producer is not None:
                        try:
                            dup = duplicate_outcome(st.log, r.producer)
                        except SparklogError as exc:
                            r.future.set_exception(exc)
                            continue
                        if dup is not None:
                            r.future.set_result(dup)
                            continue
                    keep.append(r)
            if keep:
                ready.append(Run(run.partition, keep))
        if not ready:
            return
        compression = ready[0].requests[0].compression
        if compression is None:  # the request named no codec: the broker's setting applies
            compression = self.config.compression
        try:
            staged = topic.write(
                {run.partition: run.batches for run in ready},
                compression=compression,
                validated=True,
            )
        except SparklogError as exc:
            _fail(ready, exc)
            return
        except Exception as exc:
            log.exception("object write failed", extra=fields(topic=topic_name))
            _fail(ready, SparklogError(f"object write failed: {exc}"))
            return
        self.metrics.root_objects.inc()
        self.metrics.root_requests.labels("object").inc()
        by_shard: dict[int, list[Run]] = {}
        shards = topic.info.shards  # (``info.shard_of`` rebuilds the topic's config per call)
        for run in ready:
            if run.partition not in staged:  # only empty batches
                st = self.partition_state(topic, run.partition)
                for r in run.requests:
                    r.future.set_result(ProduceOutcome(st.log.high_watermark, 0))
                continue
            by_shard.setdefault(run.partition % shards, []).append(run)
        if len(by_shard) == 1:  # one shard: commit on this thread, no hand-off
            for shard_runs in by_shard.values():
                self._commit_shard(topic, shard_runs, staged)
        else:
            futures = [
                self._pool.submit(self._commit_shard, topic, shard_runs, staged)
                for shard_runs in by_shard.values()
            ]
            wait(futures)
        self.metrics.flush_seconds.observe(time.perf_counter() - started)

    def _commit_shard(self, topic: Topic, runs: list[Run], staged: Mapping[int, Any]) -> None:
        """Commit the runs of one shard as one commit; resolve their requests."""
        states = {run.partition: self.partition_state(topic, run.partition) for run in runs}
        shard = states[runs[0].partition].shard
        try:
            with shard.lock:
                runs, results = self._append_as_leader(topic, shard, runs, staged)
        except SparklogError as exc:
            _fail(runs, exc)
            return
        except Exception as exc:
            log.exception("commit failed", extra=fields(topic=topic.name, shard=shard.key[2]))
            _fail(runs, SparklogError(f"commit failed: {exc}"))
            return
        for run in runs:
            result = results[run.partition]
            offset = result.base_offset
            for r in run.requests:
                r.future.set_result(ProduceOutcome(offset, r.record_count, result.duplicate))
                offset += r.record_count
            if not result.duplicate:
                st = states[run.partition]
                self.cache.add(
                    st.key,
                    result.base_offset,
                    with_offsets(run.batches, result.base_offset),
                    # the requests' sizes, known already (a slice's nbytes walks its buffers)
                    size_bytes=sum(r.size_bytes + 8 * r.record_count for r in run.requests),
                )
                with st.changed:
                    st.changed.notify_all()
        with self._committed:
            self.commits += 1
            self._committed.notify_all()

    def wait_for_commit(self, seen: int, timeout_s: float) -> None:
        """Wait until this broker commits anything after ``seen`` (a value of
        ``commits``), at most ``timeout_s``: a fetch long-polling several partitions
        wakes on the first commit instead of polling them."""
        with self._committed:
            self._committed.wait_for(
                lambda: self.commits != seen or self._stopping.is_set(), timeout_s
            )

    def _append_as_leader(
        self, topic: Topic, shard: ShardState, runs: list[Run], staged: Mapping[int, Any]
    ) -> tuple[list[Run], dict[int, Any]]:
        """Commit runs, bumping the shard's leader epoch first if we just became leader.

        A run that an idempotent producer's state now refuses (another writer
        moved the log since the pre-check) is failed alone; the others commit.
        """
        assert self.cluster is not None
        for _ in range(4):
            try:
                if shard.epoch is None:
                    shard.epoch = shard.log.bump_epoch()
                    self.metrics.root_requests.labels("commit").inc()
                    log.info(
                        "took leadership",
                        extra=fields(topic=topic.name, shard=shard.key[2], epoch=shard.epoch),
                    )
                started = time.perf_counter()
                results = shard.log.append(
                    {run.partition: [staged[run.partition]] for run in runs},
                    leader_epoch=shard.epoch,
                    producers={run.partition: run.producer for run in runs if run.producer},
                )
                self.metrics.commit_seconds.observe(time.perf_counter() - started)
                self.metrics.root_requests.labels("commit").inc()
                return runs, results
            except (ProducerFencedError, OutOfOrderSequenceNumberError):
                runs = self._drop_refused_runs(topic, runs)
                if not runs:
                    return runs, {}
            except LeaderEpochFenced as exc:
                log.warning(
                    "fenced by a newer leader epoch",
                    extra=fields(
                        topic=topic.name,
                        shard=shard.key[2],
                        ours=shard.epoch,
                        theirs=shard.log.leader_epoch,
                        error=str(exc),
                    ),
                )
                shard.epoch = None
                for run in runs:
                    self.cache.drop(self.partition_state(topic, run.partition).key)
                if not self.config.force_leader:
                    _storage(self.cluster.refresh)
                    for run in runs:
                        self._check_leader(topic.name, run.partition)
            except SparklogError as exc:
                raise exc from None
        raise NotLeaderError(
            f"{topic.name} shard {shard.key[2]}: leadership is contested; retry",
            leader_location="",
        )

    def _drop_refused_runs(self, topic: Topic, runs: list[Run]) -> list[Run]:
        """Fail the runs the (refreshed) producer state refuses; keep the rest."""
        keep = []
        for run in runs:
            batch = run.producer
            if batch is None:
                keep.append(run)
                continue
            try:
                self.partition_state(topic, run.partition).log.duplicate_of(batch)
                keep.append(run)
            except SparklogError as exc:
                _fail([run], exc)
        return keep

    # -- fetch -------------------------------------------------------------
    def fetch(
        self, topic_name: str, partition: int, offset: int, max_bytes: int, max_wait_ms: int
    ) -> tuple[list[pa.RecordBatch], int, int, pa.Schema]:
        """Records from ``offset`` (long-polling up to ``max_wait_ms`` at the head).

        Returns (batches with an offset column, high watermark, log start offset, schema).
        """
        if not isinstance(offset, int) or isinstance(offset, bool):
            raise InvalidRequestError(f"offset {offset!r} is not an integer")
        if not isinstance(max_bytes, int) or max_bytes < 1:
            raise InvalidRequestError(f"max_bytes={max_bytes!r} is not accepted; accepted: >= 1")
        topic = self.topic(topic_name)
        st = self.partition_state(topic, partition)
        schema = pa.schema([OFFSET_FIELD, *topic.info.record_schema])
        wait_s = max(min(int(max_wait_ms), self.config.fetch_max_wait_ms), 0) / 1000
        refresh_s = self.config.fetch_refresh_ms / 1000
        deadline = time.monotonic() + wait_s
        refreshed = False
        while True:
            with st.lock:
                if not refreshed and (
                    offset >= st.log.high_watermark or offset < st.log.log_start_offset
                ):
                    # one probe of the shard log per fetch_refresh_ms, however many
                    # partitions of the shard idle consumers wait on
                    _storage(lambda: st.refresh(refresh_s))
                    refreshed = True
                hwm, lso = st.log.high_watermark, st.log.log_start_offset
            if offset < lso or offset > hwm:
                raise OffsetOutOfRangeError(
                    f"offset {offset} is out of range for {topic_name}-{partition}; valid: "
                    f"[{lso}, {hwm}]",
                    log_start_offset=lso,
                    high_watermark=hwm,
                )
            if offset < hwm:
                batches = self.cache.get(st.key, offset, max_bytes)
                if batches is not None:
                    self.metrics.fetch_source.labels("cache").inc(len(batches))
                else:
                    batches = self._read_root(st, offset, hwm, max_bytes)
                    self.metrics.fetch_source.labels("root").inc(len(batches))
                self.metrics.fetch_records.labels(topic_name).inc(sum(b.num_rows for b in batches))
                self.metrics.fetch_bytes.labels(topic_name).inc(sum(b.nbytes for b in batches))
                return batches, hwm, lso, schema
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self._stopping.is_set():
                return [], hwm, lso, schema
            with st.changed:
                notified = st.changed.wait(min(remaining, refresh_s))
            if not notified:
                refreshed = False  # nothing of ours: look for other writers' commits

    def _read_root(
        self, st: PartitionState, offset: int, hwm: int, max_bytes: int
    ) -> list[pa.RecordBatch]:
        with st.reader_lock:
            for attempt in range(2):
                try:
                    if attempt or st.reader.high_watermark < hwm:
                        st.reader.refresh()
                    self.metrics.root_requests.labels("read").inc()
                    return list(st.reader.iter_batches(offset, hwm, max_bytes=max_bytes))
                except errors.OffsetOutOfRangeError as exc:
                    if attempt:
                        raise exc from None
                except SparklogError as exc:
                    raise exc from None
        return []

    # -- metadata ----------------------------------------------------------
    def describe_cluster(self) -> dict[str, Any]:
        assert self.cluster is not None
        return {
            "broker_id": self.config.broker_id,
            "brokers": [
                {
                    "broker_id": b.broker_id,
                    "location": b.location,
                    "renewed_ms": b.renewed_ms,
                    "kafka_address": b.kafka_address,
                }
                for b in sorted(self.cluster.live().values(), key=lambda b: b.broker_id)
            ],
        }

    def metadata(
        self, topics: Sequence[str] | None = None, *, sizes: bool = False
    ) -> dict[str, Any]:
        """Topics, partitions, leaders with locations, watermarks, configs: from memory.

        Topics come from the cluster metadata log's image, leaders from the live
        set; no storage request is made, so the answer costs O(partitions) CPU and
        survives a storage outage.  Watermarks are those this broker holds (the
        partitions it leads, as of its last commit or refresh); -1 where it holds
        none (the partition's leader knows: ``list_offsets``).  ``sizes`` (an
        explicit describe, never a client's routing) reads every partition's
        watermarks and stored bytes from the root instead.
        """
        assert self.cluster is not None
        names = list(topics) if topics is not None else self.root.list_topics()
        out: dict[str, Any] = {}
        damaged: dict[str, str] = {}
        held: dict[tuple[str, str], dict[int, PartitionState]] = {}
        with self._lock:
            for key, st in self._partitions.items():
                held.setdefault((key[0], key[1]), {})[key[2]] = st
        for name in names:
            if not isinstance(name, str):
                raise InvalidRequestError(f"topic name {name!r} is not a string")
            try:
                info = self.root.describe_topic(name)
            except errors.CorruptionError as exc:
                if topics is not None:
                    raise  # asked for by name: the caller learns why it cannot have it
                damaged[name] = str(exc)[:500]  # listing all topics: one bad one hides no other
                continue
            out[name] = {
                "name": name,
                "topic_id": info.topic_id,
                "partitions": self._partitions_metadata(
                    info, held.get((name, info.topic_id), {}), sizes
                ),
                "config": info.config,
                "value_schema": (
                    value_type_to_text(info.value_type) if info.value_type is not None else None
                ),
            }
        return {**self.describe_cluster(), "topics": out, "damaged_topics": damaged}

    def _partitions_metadata(
        self, info: TopicInfo, held: Mapping[int, PartitionState], sizes: bool
    ) -> list[dict[str, Any]]:
        assert self.cluster is not None
        leaders: dict[int, BrokerInfo | None] = {}
        out = []
        for p in range(info.partitions):
            shard = info.shard_of(p)
            if shard not in leaders:
                leaders[shard] = self.cluster.shard_leader(info.name, shard)
            leader = leaders[shard]
            if self.config.force_leader:
                leader_id, location = self.config.broker_id, self.cluster.location
            else:
                leader_id = leader.broker_id if leader else -1
                location = leader.location if leader else ""
            entry = {
                "partition": p,
                "leader_id": leader_id,
                "leader_location": location,
                "replicas": self.cluster.shard_replicas(info.name, shard),
            }
            st = held.get(p)
            if sizes:
                entry.update(self._stored_sizes(info.name, p))
            else:
                hwm, lso = (-1, -1) if st is None else st.log.watermarks_in_memory()
                entry.update(log_start_offset=lso, high_watermark=hwm)
            out.append(entry)
        return out

    def _stored_sizes(self, name: str, partition: int) -> dict[str, int]:
        """A partition's watermarks and stored bytes, read from the root if not fresh."""
        st = self.partition_state(self.topic(name), partition)
        with st.lock:
            _storage(lambda: st.refresh(self.config.fetch_refresh_ms / 1000))
            return {
                "log_start_offset": st.log.log_start_offset,
                "high_watermark": st.log.high_watermark,
                "size_bytes": sum(s.size_bytes for s in st.log.segments()),
            }

    def list_offsets(self, topic_name: str, partition: int, spec: Any) -> int:
        topic = self.topic(topic_name)
        st = self.partition_state(topic, partition)
        with st.lock:
            _storage(st.refresh)
            if spec == "earliest":
                return int(st.log.log_start_offset)
            if spec == "latest":
                return int(st.log.high_watermark)
        if isinstance(spec, int) and not isinstance(spec, bool):
            with st.reader_lock:
                _storage(st.reader.refresh)
                return int(_storage(lambda: st.reader.offset_for_timestamp(spec)))
        raise InvalidRequestError(
            f"offset spec {spec!r} is not accepted; accepted: 'earliest', 'latest' or a "
            "timestamp in ms"
        )

    # -- admin -------------------------------------------------------------
    def create_topic(
        self,
        name: str,
        partitions: int,
        config: Mapping[str, Any] | None = None,
        value_schema: str | None = None,
    ) -> dict[str, Any]:
        value_type = _schema_from_text(value_schema) if value_schema else None
        info = _storage(lambda: self.root.create_topic(name, partitions, config, value_type))
        self._forget_topic(name)
        return {"name": info.name, "topic_id": info.topic_id, "partitions": info.partitions}

    def delete_topic(self, name: str) -> None:
        _storage(lambda: self.root.delete_topic(name))
        self._forget_topic(name)

    def alter_topic_config(
        self, name: str, updates: Mapping[str, Any], remove: Sequence[str] = ()
    ) -> dict[str, Any]:
        info = _storage(lambda: self.root.alter_topic_config(name, updates, remove))
        self._forget_topic(name)
        return dict(info.config)

    def add_partitions(self, name: str, total: int) -> int:
        info = _storage(lambda: self.root.add_partitions(name, total))
        self._forget_topic(name)
        return int(info.partitions)

    def delete_records(self, topic_name: str, partition: int, before_offset: int) -> int:
        """Kafka's DeleteRecords on a partition this broker leads: move the log start offset
        up to ``before_offset`` (-1 = the high watermark), removing the segments wholly below
        it (fenced by our leader epoch); return the new log start offset."""
        topic = self.topic(topic_name)
        st = self.partition_state(topic, partition)
        self._check_leader(topic_name, partition)
        with st.lock:
            start = _storage(lambda: delete_records(st.log, before_offset, leader_epoch=st.epoch))
        self.cache.drop(st.key)
        return int(start)

    def init_producer_id(self) -> tuple[int, int]:
        """A fresh producer id (random 62-bit, so brokers need not coordinate) and epoch 0."""
        return secrets.randbits(62) | 1, 0


def _schema_from_text(text: str) -> pa.DataType:
    try:
        return value_type_from_text(text)
    except (ValueError, KeyError, pa.ArrowInvalid, TypeError) as exc:
        raise InvalidRequestError(
            f"value_schema is not accepted ({exc}); accepted: base64 of an Arrow IPC schema "
            "with one struct field named 'value'"
        ) from None


def _fail(runs: Sequence[Run], exc: BaseException) -> None:
    for run in runs:
        for r in run.requests:
            if not r.future.done():
                r.future.set_exception(exc)


def _log_unacked_failure(future: Future[ProduceOutcome]) -> None:
    exc = future.exception()
    if exc is not None:
        log.warning("acks=0 produce failed", extra=fields(error=str(exc)))
