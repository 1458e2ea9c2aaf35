"""The broker's logic, independent of the wire: one :class:`Broker` made of its roles.

:class:`Broker` owns the per-topic produce batchers, the leader-side partition
states (writer log, leader epoch, long-poll condition), the tail cache, the
cluster view and the group coordinator, and runs the background loops.  Its
roles live in their own modules, each over the shared state of
:class:`~sparklog.broker_lite.broker_state.BrokerState`: leadership
(``leadership.py``), the produce path (``produce_path.py``), the fetch path
(``fetch_path.py``) and metadata and admin calls (``admin_calls.py``).
``broker_lite.server`` exposes it over Arrow Flight, ``broker_lite.kafka`` over
Kafka's protocol; tests and the benchmarks can also drive it directly.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from sparklog import errors
from sparklog.broker_lite.admin_calls import AdminCalls
from sparklog.broker_lite.broker_state import PartitionState, ShardState, storage_call
from sparklog.broker_lite.cluster import Cluster, rendezvous_weight
from sparklog.broker_lite.config import BrokerConfig
from sparklog.broker_lite.fetch_path import FetchPath
from sparklog.broker_lite.group_routing import CoordinatedGroups
from sparklog.broker_lite.kafka import acl
from sparklog.broker_lite.kafka.producer_ids import ProducerIdAllocator
from sparklog.broker_lite.leadership import LeadershipRole
from sparklog.broker_lite.logs import fields
from sparklog.broker_lite.metrics import Metrics
from sparklog.broker_lite.produce import FlushBatcher, commit_pool
from sparklog.broker_lite.produce_path import ProducePath
from sparklog.broker_lite.tailcache import PartitionKey, TailCache
from sparklog.broker_lite.transactions.coordinator import TransactionCoordinator
from sparklog.clock import Clock, now_ms
from sparklog.errors import NotCoordinatorError, SparklogError
from sparklog.groups.coordinator import GroupCoordinator
from sparklog.groups.lag import lag_of
from sparklog.protocol.hooks import MirrorLinks, mirror_links_factory
from sparklog.retry import retrying
from sparklog.storage import LogRoot, Topic, open_root
from sparklog.storage.journal import JournalWriter
from sparklog.storage.shared_objects import SharedSection
from sparklog.topic_partition import TopicPartition

log = logging.getLogger("sparklog.broker_lite.broker")
#: how often a broker looks for timed-out and orphaned transactions
TRANSACTIONS_TICK_S = 1.0
#: the lag metric is computed every this many ticks (group sweeps run every tick)
LAG_TICKS = 5
#: the least time between two replacements of the offset journal (a small
#: ``fold_interval_ms`` must not make every fold pass a replacement)
JOURNAL_ROTATE_MIN_MS = 60_000
#: how often the cleaner lists an unchanged topic's objects and logs anyway (a brokerless
#: writer's abandoned upload appears without a commit)
UPKEEP_FULL_PASS_MS = 24 * 60 * 60 * 1000
#: how often (at most) the objects shared by topics are listed for collection
SHARED_GC_INTERVAL_MS = 60 * 60 * 1000


class Broker(LeadershipRole, ProducePath, FetchPath, AdminCalls):
    """One broker: everything durable lives in ``root``; this holds caches and threads."""

    def __init__(
        self,
        config: BrokerConfig,
        root: LogRoot | None = None,
        *,
        clock_ms: Clock = now_ms,
        mirror: Callable[[LogRoot], MirrorLinks] | None = None,
    ) -> None:
        """``clock_ms``: the wall clock of this broker's lease (tests skew it).

        ``mirror``: the mirroring application's hook, given a root (the process's entry
        point hands it: the broker never imports an application); without it the mirror
        link actions are refused and the key ``mirror_links`` cannot be set.
        """
        self.config = config
        self.clock_ms = clock_ms
        self._mirror = mirror
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
            consumer_session_timeout_ms=config.consumer_group_session_timeout_ms,
            consumer_heartbeat_interval_ms=config.consumer_group_heartbeat_interval_ms,
            consumer_migration_policy=config.group_consumer_migration_policy,
            high_watermarks=self.high_watermarks,
        )
        self.groups = CoordinatedGroups(self.coordinator, self.check_coordinator)
        # a regex subscription is resolved to the topics its member may describe (KIP-848)
        self.coordinator.consumer.may_describe = self._may_describe_topic
        #: Kafka's transaction coordinator (state in the metadata log: any broker serves any id)
        self.transactions = TransactionCoordinator(
            self,
            ProducerIdAllocator(self.root.store, config.broker_id).allocate,
            max_timeout_ms=config.transaction_max_timeout_ms,
        )
        self.cluster: Cluster | None = None
        self._lock = threading.Lock()
        self._topics: dict[str, Topic] = {}
        self._partitions: dict[PartitionKey, PartitionState] = {}
        self._shards: dict[tuple[str, str, int], ShardState] = {}
        self._batcher: FlushBatcher | None = None
        #: the journal of offset commits (format 3), if ``journal_offset_commits``
        self._journal: JournalWriter | None = None
        #: (topic, job) -> (topic id and shard versions, last full pass ms, work waiting):
        #: what the cleaner's last GC or pruning of a topic saw (see _topic_unchanged)
        self._upkeep: dict[tuple[str, str], tuple[Any, int, bool]] = {}
        self._maintenance_topics: dict[str, Topic] = {}
        #: the metadata log version and whether files waited, at the last pruning
        self._metadata_pruned: tuple[int, bool] | None = None
        self._shared_collected_ms = 0
        self._groups_listed: list[str] = []
        self._groups_listed_ms = -UPKEEP_FULL_PASS_MS
        #: the sections each shared object names (objects never change): read once
        self._shared_trailers: dict[str, list[SharedSection]] = {}
        self._led: set[TopicPartition] = set()
        #: topics whose metadata cannot be read (name -> why): not served, reported
        self.damaged_topics: dict[str, str] = {}
        # a flush of many topics commits each shard it touched at once (threads made on demand)
        self._pool = commit_pool(32)
        #: commits made by this broker so far, for waits on several partitions at once
        self.commits = 0
        self.commit_hooks = []
        self._committed = threading.Condition()
        self._stopping = threading.Event()
        self._ready = threading.Event()
        self._threads: list[threading.Thread] = []
        self._next_metadata_refresh = 0.0

    # -- lifecycle ---------------------------------------------------------
    def _may_describe_topic(self, principal: str, host: str, topic: str) -> bool:
        return acl.allowed_for(self, principal, host, "DESCRIBE", "TOPIC", topic)

    def start(self, location: str, kafka_address: str | None = None) -> None:
        """Publish our lease (Flight ``location``, Kafka listener address) and start threads."""
        links = [x for x in (x.strip() for x in self.config.mirror_links.split(",")) if x]
        if links:
            self._mirror = mirror_links_factory(self._mirror)
        if links and self._mirror is None:
            raise errors.InvalidConfigurationError(
                f"config key 'mirror_links' = {self.config.mirror_links!r}: this process was "
                "started without the mirroring application; accepted: a broker started by "
                "`sparklog broker start` or `python -m sparklog.broker_lite`, or empty"
            )
        storage_call(self.root.store.ensure_root)
        # the first broker to open a root of the previous layout upgrades it, once
        storage_call(
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
            clock_ms=self.clock_ms,
        )
        # the first renewal also opens the store's connections: give it a few tries
        storage_call(lambda: retrying(cluster.renew, deadline_ms=self.config.retry_timeout_ms))
        self._update_leadership()
        # Each loop only waits for its own work (docs/architecture.md, "Broker threads"):
        # leases, then the metadata image and leadership, are never behind a group sweep,
        # a topic reload or a store read for lag.
        tick_s = min(self.config.lease_interval_ms, self.config.metadata_refresh_ms) / 1000
        self._spawn("lease", self._lease_loop)
        self._spawn("control", self._every(tick_s, "control tick", self._follow_cluster))
        self._spawn("topics", self._every(tick_s, "topics tick", self._follow_topics))
        self._spawn("groups", self._every(tick_s, "group sweep", self._sweep_groups))
        self._spawn("lag", self._every(LAG_TICKS * tick_s, "lag pass", self._record_lag))
        if self.config.journal_offset_commits:
            self._journal = JournalWriter(
                self.root.store,
                self.config.broker_id,
                flush_interval_ms=self.config.offsets_flush_interval_ms,
                on_sealed=self.root.groups.retire_journal,
            )
            self.root.groups.use_journal(self._journal, self.coordinates)
            self._spawn("folds", self._every(tick_s, "fold pass", self._fold_journal))
        self._spawn("transactions", self._transactions_loop)
        if self.config.cleaner_interval_ms > 0:
            from sparklog.broker_lite.cleaner import Cleaner

            cleaner = Cleaner(self, self.config.cleaner_interval_ms)
            self._spawn("cleaner", cleaner.loop)
        for link in links:
            self._spawn(f"mirror-{link}", functools.partial(self._mirror_loop, link))

        self._ready.set()

    def _mirror_loop(self, link: str) -> None:
        """Run mirror link ``link`` until the broker stops (broker key ``mirror_links``).

        The copier has its own handle on the root (reads that always see the newest
        metadata, as ``sparklog mirror run`` has): its commits are optimistic, like
        any brokerless writer's, and the broker's reads follow them.
        """
        assert self._mirror is not None  # start() refuses mirror_links without the hook
        root = open_root(self.config.root, self.config.storage_options)
        log.info("mirror link started", extra=fields(link=link))
        try:
            self._mirror(root).run(link, self._stopping)
        except Exception:
            log.exception("mirror link stopped", extra=fields(link=link))

    def mirror_links(self) -> MirrorLinks:
        """The mirror link actions on this broker's root, through the hook it was handed
        (or the shipped application's)."""
        self._mirror = mirror_links_factory(self._mirror)
        if self._mirror is None:
            raise errors.InvalidConfigurationError(
                "this broker was started without the mirroring application: it serves no "
                "mirror link actions; accepted: a broker started by `sparklog broker start` "
                "or `python -m sparklog.broker_lite`"
            )
        return self._mirror(self.root)

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
            batcher = self._batcher
        if batcher is not None:
            batcher.close()
        for st in list(self._partitions.values()):
            with st.changed:
                st.changed.notify_all()
        with self._committed:
            self._committed.notify_all()
        for thread in self._threads:
            thread.join(timeout=10)
        self.coordinator.close()  # the deadline thread of parked joins and syncs
        if self._journal is not None:
            try:
                self.root.groups.close_journal()
            except SparklogError as exc:  # its groups' next coordinator folds what is left
                log.warning("journal not folded at stop", extra=fields(error=str(exc)))
        if self.cluster is not None:
            self.cluster.resign()
        self._pool.shutdown(wait=True)
        self.transactions.close()
        log.info("broker stopped", extra=fields(broker=self.config.broker_id))

    def _every(self, interval_s: float, what: str, work: Callable[[], None]) -> Callable[[], None]:
        """A loop running ``work`` every ``interval_s`` until the broker stops; a failed
        round is logged and the next one runs as planned."""

        def loop() -> None:
            while not self._stopping.wait(interval_s):
                try:
                    work()
                except SparklogError as exc:
                    log.warning(f"{what} failed", extra=fields(error=str(exc)[:500]))
                except Exception:
                    log.exception(f"{what} failed")

        return loop

    def _follow_cluster(self) -> None:
        """The control loop: follow the metadata log (fences, registrations, topics) and
        derive leadership from it and the leases; nothing else runs here."""
        if time.monotonic() >= self._next_metadata_refresh:
            self._next_metadata_refresh = time.monotonic() + self.config.metadata_refresh_ms / 1000
            try:
                self.root.metadata.refresh()
            except SparklogError as exc:
                # an unreachable store must not stop the rest: leadership follows our lease
                log.warning("metadata refresh failed", extra=fields(error=str(exc)))
        self._update_leadership()

    def _follow_topics(self) -> None:
        """Reload the cached topics (partitions added, configs, deletions); warm followers."""
        self._reload_topics()
        if self.config.replication_factor > 1:
            with self._lock:
                cached = list(self._topics.values())
            for topic in cached:
                self._warm_followers(topic)

    def _transactions_loop(self) -> None:
        """Abort timed-out transactions and finish orphaned ones, of the ids we coordinate."""
        while not self._stopping.wait(TRANSACTIONS_TICK_S):
            try:
                self.transactions.tick(self.coordinates_transaction)
            except Exception:
                log.exception("transactions tick failed")

    def coordinates_transaction(self, transactional_id: str) -> bool:
        """Whether this broker is ``transactional_id``'s coordinator (as FindCoordinator says)."""
        assert self.cluster is not None
        live = list(self.cluster.live())
        if not live:
            return False
        chosen = max(live, key=lambda b: rendezvous_weight(transactional_id, 0, int(b)))
        return int(chosen) == self.config.broker_id

    def _reload_topics(self) -> None:
        with self._lock:
            cached = dict(self._topics)
        for name, topic in cached.items():
            try:
                topic.reload()
            except errors.UnknownTopicOrPartitionError:
                self._forget_topic(name)
            except errors.CorruptRecordError as exc:
                self._forget_topic(name)
                self._report_damaged(name, exc)

    # -- the cleaner's view of the broker (cleaner.MaintenanceHost) ---------------------------
    def wait_stopping(self, timeout_s: float) -> bool:
        return self._stopping.wait(timeout_s)

    def maintain_partition(self, topic: str, partition: int) -> Any:
        """Maintenance of a led partition under this broker's epoch, then refresh and trim."""
        from sparklog.storage.maintenance import run_maintenance

        st = self.partition_state(self.topic(topic), partition)
        handle = self._maintenance_topic(topic)
        report = run_maintenance(handle, partition, leader_epoch=st.epoch)
        with st.lock:
            st.refresh()
            self.cache.trim(st.key, st.log.log_start_offset)
        return report

    def _maintenance_topic(self, name: str) -> Topic:
        """The cleaner's own handle on a topic (its own log objects, apart from the produce
        path's: races are safe), kept across passes so a pass probes each shard log once
        instead of loading it again (a fresh handle per led partition per pass listed the
        log's versions when it had no snapshot yet)."""
        handle = self._maintenance_topics.get(name)
        if handle is not None:
            try:
                handle.reload()
                return handle
            except SparklogError:
                pass  # deleted, or re-created under another id: a fresh handle
        handle = self.root.topic(name)
        self._maintenance_topics[name] = handle
        return handle

    def _topic_unchanged(self, name: str, job: str) -> tuple[bool, Any]:
        """Whether ``job`` (``gc``, ``prune``) may skip the topic this pass: its shard logs
        are at the versions of the job's last pass (one probe each), that pass left nothing
        waiting, and a full pass ran within :data:`UPKEEP_FULL_PASS_MS`; and the versions
        to remember after the pass.  Listing an idle topic's objects and logs every pass
        (a LIST each) was most of an idle cluster's bill (issue 37: 2.93 LIST/s at 1,000
        topics); objects appear only through commits, except a brokerless writer's
        abandoned upload, which the daily full pass collects."""
        topic = self.topic(name)
        versions = (
            topic.info.topic_id,
            tuple(topic.shard(s).refresh().version for s in range(topic.shards)),
        )
        seen = self._upkeep.get((name, job))
        unchanged = (
            seen is not None
            and seen[0] == versions
            and not seen[2]
            and now_ms() - seen[1] < UPKEEP_FULL_PASS_MS
        )
        return unchanged, versions

    def _remember_upkeep(self, name: str, job: str, versions: Any, waiting: bool) -> None:
        self._upkeep[(name, job)] = (versions, now_ms(), waiting)

    def collect_garbage(self, topic: str) -> None:
        from sparklog.storage.maintenance import collect_garbage

        unchanged, versions = self._topic_unchanged(topic, "gc")
        if unchanged:
            return
        report = collect_garbage(self.topic(topic), self.config.gc_grace_ms)
        self._remember_upkeep(topic, "gc", versions, bool(report.pending_marks))

    def _collects_for_the_cluster(self) -> bool:
        """Whether this broker does the cluster's shared upkeep (shared objects, the metadata
        log): the live broker of lowest id (any broker may; one saves the others' reads)."""
        return self.cluster is None or self.cluster.broker_id == min(
            self.cluster.live(), default=self.cluster.broker_id
        )

    def prune_metadata_log(self, now_ms: int) -> int | None:
        from sparklog.storage.maintenance import prune_metadata_log

        if not self._collects_for_the_cluster():
            return None
        version = self.root.metadata.image().version
        if self._metadata_pruned == (version, False):
            return 0  # nothing appended and nothing waiting since the last pruning: no LIST
        report = prune_metadata_log(self.root, now=now_ms)
        self._metadata_pruned = (version, bool(report.waiting))
        return len(report.deleted)

    def collect_shared_objects(self) -> int | None:
        """The objects broker flushes shared between topics are collected by one broker."""
        from sparklog.storage.shared_objects import collect_shared_garbage

        if not self._collects_for_the_cluster():
            return None
        # one listing an hour at most (half the grace when shorter): an unreferenced object
        # waits out the grace anyway
        interval_ms = min(SHARED_GC_INTERVAL_MS, self.config.gc_grace_ms // 2)
        if now_ms() - self._shared_collected_ms < interval_ms:
            return 0
        self._shared_collected_ms = now_ms()
        report = collect_shared_garbage(
            self.root, self.config.gc_grace_ms, trailers=self._shared_trailers
        )
        return len(report.deleted)

    def remove_stale_temp_files(self) -> int:
        from sparklog.storage.log import STAGED_OBJECT_MAX_AGE_MS

        # leases and metadata live under cluster/; topics' folders are swept by their GC
        removed = self.root.store.remove_stale_temp_files(
            "cluster", STAGED_OBJECT_MAX_AGE_MS, now_ms()
        )
        return len(removed)

    def count_cleaner_run(self, outcome: str) -> None:
        self.metrics.cleaner_runs.labels(outcome).inc()

    def prune_topic_logs(self, topic: str, now_ms: int) -> int:
        from sparklog.storage.maintenance import prune_topic_logs

        unchanged, versions = self._topic_unchanged(topic, "prune")
        if unchanged:
            return 0
        report = prune_topic_logs(self.topic(topic), now=now_ms)
        self._remember_upkeep(topic, "prune", versions, bool(report.waiting))
        return len(report.deleted)

    def prune_group_log(self, group: str, now_ms: int) -> int:
        from sparklog.storage.maintenance import prune_group_log

        group_log, lock = self.root.groups.log(group)
        with lock:
            version = group_log.refresh().version
        if self._upkeep.get((group, "group-prune"), (None,))[0] == (version, False):
            return 0  # nothing committed and nothing waiting since its last pruning
        report = prune_group_log(self.root, group, now=now_ms)
        self._upkeep[(group, "group-prune")] = ((version, bool(report.waiting)), 0, False)
        return len(report.deleted)

    def owned_groups(self, discover: bool = True) -> list[str]:
        """The groups this broker coordinates: all of the root's (a listing, for the cleaner's
        pass), or (``discover=False``, each tick) those it has served since it started."""
        assert self.cluster is not None
        live = sorted(self.cluster.live())
        if discover and now_ms() - self._groups_listed_ms >= UPKEEP_FULL_PASS_MS:
            # the root's groups are listed once a day (a group another broker coordinated
            # before); in between, those listed then and those served since
            self._groups_listed = self.coordinator.list_groups()
            self._groups_listed_ms = now_ms()
        names = self.coordinator.known_groups()
        if discover:
            names = sorted(set(names) | set(self._groups_listed))
        return [
            g
            for g in names
            if live
            and max(live, key=lambda b: rendezvous_weight(g, 0, b)) == self.cluster.broker_id
        ]

    def _sweep_groups(self) -> None:
        """Session expiry and due rebalances of the groups we coordinate (memory only)."""
        mine = self.owned_groups(discover=False)
        for group in set(self.coordinator.known_groups()) - set(mine):
            self.coordinator.forget(group)  # another broker coordinates it now
        self.coordinator.sweep(mine)

    def coordinates(self, group: str) -> bool:
        """Whether this broker coordinates ``group`` (its offset commits are journalled)."""
        try:
            self.check_coordinator(group)
        except NotCoordinatorError:
            return False
        return True

    def _fold_journal(self) -> None:
        """Fold the groups' journalled commits that waited ``fold_interval_ms``; replace the
        journal every ten intervals, at least every :data:`JOURNAL_ROTATE_MIN_MS` (folding
        all of it first, then deleting it)."""
        assert self._journal is not None
        interval_ms = self.config.fold_interval_ms
        rotate_ms = max(10 * interval_ms, JOURNAL_ROTATE_MIN_MS)
        if (time.monotonic() - self._journal.started) * 1000 >= rotate_ms:
            self.root.groups.rotate_journal()
        else:
            self.root.groups.fold_due(interval_ms)

    def _record_lag(self) -> None:
        """The lag metric of the groups we coordinate: their committed offsets (one probe
        of each group's log), then the high watermarks of all those partitions at once
        (led shards from memory, others one read per shard, however many groups)."""
        committed: dict[str, dict[TopicPartition, int]] = {}
        for group in self.owned_groups(discover=False):
            try:
                committed[group] = self.coordinator.fetch_offsets(group)
            except SparklogError:
                continue
        wanted = {tp for offsets in committed.values() for tp in offsets}
        hwms = self.high_watermarks(wanted, led_from_memory=True)
        for group, offsets in committed.items():
            for tp, offset in offsets.items():
                lag = lag_of(hwms.get(tp), offset)
                if lag is not None:
                    self.metrics.group_lag.labels(group, tp.topic, str(tp.partition)).set(lag)

    # -- topics and partitions ---------------------------------------------

    # -- produce -----------------------------------------------------------

    # -- fetch -------------------------------------------------------------

    # -- metadata ----------------------------------------------------------

    # -- admin -------------------------------------------------------------
