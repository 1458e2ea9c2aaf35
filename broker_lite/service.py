"""The broker's logic, independent of the wire: one :class:`Broker` composed of its roles.

:class:`Broker` holds its roles and runs the background loops.  Each role lives in its
own module and is handed the shared state
(:class:`~sparklog.broker_lite.broker_state.BrokerState`: the caches of topics, shards
and partitions, the tail cache, the cluster view) and the roles it calls: leadership
(``leadership.py``), the produce path (``produce_path.py``, with the transaction
coordinator), the fetch path (``fetch_path.py``), metadata and admin calls
(``admin_calls.py``), the groups this broker coordinates (``group_role.py``) and the
cleaner's host (``upkeep.py``), beside the group and transaction coordinators.
``broker_lite.server`` exposes it over Arrow Flight, ``broker_lite.kafka`` over
Kafka's protocol; tests and the benchmarks can also drive it directly.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable

from sparklog import errors
from sparklog.broker_lite.admin_calls import AdminCalls
from sparklog.broker_lite.broker_state import BrokerState
from sparklog.broker_lite.cluster import Cluster
from sparklog.broker_lite.config import BrokerConfig
from sparklog.broker_lite.fetch_path import FetchPath
from sparklog.broker_lite.group_role import GroupRole
from sparklog.broker_lite.group_routing import CoordinatedGroups
from sparklog.broker_lite.kafka import acl
from sparklog.broker_lite.kafka.producer_ids import ProducerIdAllocator
from sparklog.broker_lite.leadership import LeadershipRole
from sparklog.broker_lite.logs import fields
from sparklog.broker_lite.metrics import Metrics
from sparklog.broker_lite.partition_state import storage_call
from sparklog.broker_lite.produce_path import ProducePath
from sparklog.broker_lite.tailcache import TailCache
from sparklog.broker_lite.transactions.coordinator import TransactionCoordinator
from sparklog.broker_lite.upkeep import Upkeep
from sparklog.clock import Clock, now_ms
from sparklog.errors import NotCoordinatorError, SparklogError
from sparklog.groups.coordinator import GroupCoordinator
from sparklog.protocol.hooks import MirrorLinks, mirror_links_factory
from sparklog.retry import retrying
from sparklog.storage import LogRoot, open_root
from sparklog.storage.journal import JournalRef, JournalWriter

log = logging.getLogger("sparklog.broker_lite.broker")
#: how often a broker looks for timed-out and orphaned transactions
TRANSACTIONS_TICK_S = 1.0
#: the lag metric is computed every this many ticks (group sweeps run every tick)
LAG_TICKS = 5
#: the least time between two replacements of the offset journal (a small
#: ``fold_interval_ms`` must not make every fold pass a replacement)
JOURNAL_ROTATE_MIN_MS = 60_000


class Broker:
    """One broker: everything durable lives in ``root``; this holds caches and threads.

    It is composed of its roles, each handed the shared :class:`BrokerState` (and the
    other roles it calls), as Kafka's ``BrokerServer`` composes a replica manager and
    coordinators: ``leadership``, ``produce_path``, ``fetch_path``, ``admin``,
    ``group_role``, ``upkeep`` (the cleaner's host), the group coordinator
    (``coordinator``, and ``groups``, its calls refused for groups another broker
    coordinates) and the transaction coordinator (``transactions``).  Its public calls
    are its roles' (the listeners, tests and benchmarks call them on the broker).
    """

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
        #: what every role shares: caches, the cluster view, the commit count
        self.state = state = BrokerState(config, self.root, self.metrics)
        self.leadership = LeadershipRole(state)
        self.fetch_path = FetchPath(state)
        self.admin = AdminCalls(state)
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
            high_watermarks=self.fetch_path.high_watermarks,
        )
        self.groups = CoordinatedGroups(self.coordinator, self.leadership.check_coordinator)
        # a regex subscription is resolved to the topics its member may describe (KIP-848)
        self.coordinator.consumer.may_describe = self._may_describe_topic
        self.group_role = GroupRole(
            state,
            self.coordinator,
            functools.partial(self.fetch_path.high_watermarks, led_from_memory=True),
        )
        #: Kafka's transaction coordinator (state in the metadata log: any broker serves any
        #: id), hosted by the shared state (root, shard logs, live brokers)
        self.transactions = TransactionCoordinator(
            state,
            ProducerIdAllocator(self.root.store, config.broker_id).allocate,
            max_timeout_ms=config.transaction_max_timeout_ms,
        )
        self.produce_path = ProducePath(state, self.transactions)
        self.upkeep = Upkeep(state, self.group_role.owned_groups, self.coordinates_transaction)
        # -- the broker's calls, each its role's --------------------------------------
        self.produce = self.produce_path.produce
        self.produce_each = self.produce_path.produce_each
        self.fetch = self.fetch_path.fetch
        self.list_offsets = self.fetch_path.list_offsets
        self.leader_epoch_end = self.fetch_path.leader_epoch_end
        self.high_watermarks = self.fetch_path.high_watermarks
        self.describe_cluster = self.admin.describe_cluster
        self.metadata = self.admin.metadata
        self.led_partition_sizes = self.admin.led_partition_sizes
        self.create_topic = self.admin.create_topic
        self.delete_topic = self.admin.delete_topic
        self.alter_topic_config = self.admin.alter_topic_config
        self.add_partitions = self.admin.add_partitions
        self.delete_records = self.admin.delete_records
        self.init_producer_id = self.admin.init_producer_id
        self.led_partitions = self.leadership.led_partitions
        self.coordinator_of = self.leadership.coordinator_of
        self.check_coordinator = self.leadership.check_coordinator
        self.owned_groups = self.group_role.owned_groups
        self.topic = state.topic
        self.partition_state = state.partition_state
        self.wait_for_commit = state.wait_for_commit
        self.count_commit = state.count_commit
        #: the journal of offset commits (format 3), if ``journal_offset_commits``
        self._journal: JournalWriter | None = None
        self._ready = threading.Event()
        self._threads: list[threading.Thread] = []
        self._next_metadata_refresh = 0.0
        #: the image's topics section the last reload of the open topics read (see
        #: _reload_topics)
        self._topics_reloaded_from: object = None

    @property
    def cluster(self) -> Cluster | None:
        """The cluster view (registration, leases, leadership); None before :meth:`start`."""
        return self.state.cluster

    @property
    def commits(self) -> int:
        """Commits made through this broker so far (a long-poll fetch waits for the next)."""
        return self.state.commits

    @property
    def commit_hooks(self) -> list[Callable[[str, list[int]], None]]:
        """Called with (topic, partitions) after each commit of records (the Kafka
        listener's parked fetches wake on it)."""
        return self.state.commit_hooks

    @property
    def damaged_topics(self) -> dict[str, str]:
        return self.state.damaged_topics

    @property
    def cache(self) -> TailCache:
        return self.state.cache

    def _update_leadership(self) -> None:
        """Derive the led partitions now (the control loop's step; tests call it)."""
        self.leadership.update_leadership()

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
        self.state.cluster = cluster = Cluster(
            self.root,
            self.config.broker_id,
            location,
            lease_interval_ms=self.config.lease_interval_ms,
            lease_timeout_ms=self.config.lease_timeout_ms,
            replication_factor=self.config.replication_factor,
            force_leader=self.config.force_leader,
            probe_peers=True,
            kafka_address=kafka_address,
            flight_security=self.config.flight_protocol,
            clock_ms=self.clock_ms,
        )
        if self.config.journal_offset_commits or self.config.journal_records:
            self._journal = JournalWriter(
                self.root.store,
                self.config.broker_id,
                flush_interval_ms=self.config.offsets_flush_interval_ms,
                on_sealed=self._journal_sealed,
            )
            self.state.journal = self._journal
            if self.config.journal_offset_commits:
                self.root.groups.use_journal(self._journal, self.coordinates)
                self.root.transactions.use_journal(self._journal, self.coordinates_transaction)
        # the first renewal also opens the store's connections: give it a few tries
        storage_call(lambda: retrying(cluster.renew, deadline_ms=self.config.retry_timeout_ms))
        self.leadership.update_leadership()
        # Each loop only waits for its own work (docs/architecture.md, "Broker threads"):
        # leases, then the metadata image and leadership, are never behind a group sweep,
        # a topic reload or a store read for lag.
        tick_s = min(self.config.lease_interval_ms, self.config.metadata_refresh_ms) / 1000
        self._spawn("lease", self.leadership.lease_loop)
        self._spawn("control", self._every(tick_s, "control tick", self._follow_cluster))
        self._spawn("topics", self._every(tick_s, "topics tick", self._follow_topics))
        self._spawn("groups", self._every(tick_s, "group sweep", self.group_role.sweep))
        lag_s = LAG_TICKS * tick_s
        self._spawn("lag", self._every(lag_s, "lag pass", self.group_role.record_lag))
        if self._journal is not None:
            self._spawn("folds", self._every(tick_s, "fold pass", self._fold_journal))
        self._spawn("transactions", self._transactions_loop)
        if self.config.cleaner_interval_ms > 0:
            from sparklog.broker_lite.cleaner import Cleaner

            cleaner = Cleaner(self.upkeep, self.config.cleaner_interval_ms)
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
            self._mirror(root).run(link, self.state.stop_requested)
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
        return self.state.stop_requested.is_set()

    def close(self) -> None:
        """Graceful stop: refuse new produce, flush pending batches, give up the lease."""
        state = self.state
        if state.stop_requested.is_set():
            return
        state.stop_requested.set()
        self.produce_path.close()
        for st in list(state.partitions.values()):
            with st.changed:
                st.changed.notify_all()
        with state.committed:
            state.committed.notify_all()
        for thread in self._threads:
            thread.join(timeout=10)
        self.coordinator.close()  # the deadline thread of parked joins and syncs
        # the Complete states left for later are journal steps: written before the journal
        # is folded and closed
        self.transactions.close()
        if self._journal is not None:
            try:
                self._close_journal()
            except SparklogError as exc:  # the next leader or coordinator folds what is left
                log.warning("journal not folded at stop", extra=fields(error=str(exc)))
        if state.cluster is not None:
            state.cluster.resign()
        self.produce_path.shutdown_commits()
        state.peers.close()
        log.info("broker stopped", extra=fields(broker=self.config.broker_id))

    def _every(self, interval_s: float, what: str, work: Callable[[], None]) -> Callable[[], None]:
        """A loop running ``work`` every ``interval_s`` until the broker stops; a failed
        round is logged and the next one runs as planned."""

        def loop() -> None:
            while not self.state.stop_requested.wait(interval_s):
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
        self.leadership.update_leadership()

    def _follow_topics(self) -> None:
        """Reload the cached topics (partitions added, configs, deletions); warm followers."""
        self._reload_topics()
        if self.config.replication_factor > 1:
            with self.state.lock:
                cached = list(self.state.topic_handles.values())
            for topic in cached:
                self.leadership.warm_followers(topic)

    def _transactions_loop(self) -> None:
        """Abort timed-out transactions and finish orphaned ones, of the ids we coordinate."""
        while not self.state.stop_requested.wait(TRANSACTIONS_TICK_S):
            try:
                self.transactions.tick(self.coordinates_transaction)
            except Exception:
                log.exception("transactions tick failed")

    def coordinates_transaction(self, transactional_id: str) -> bool:
        """Whether this broker is ``transactional_id``'s coordinator (as FindCoordinator says)."""
        assert self.cluster is not None
        chosen = self.cluster.transaction_coordinator(transactional_id)
        return chosen is not None and chosen.broker_id == self.config.broker_id

    def coordinates(self, group: str) -> bool:
        """Whether this broker coordinates ``group`` (its offset commits are journalled)."""
        try:
            self.leadership.check_coordinator(group)
        except NotCoordinatorError:
            return False
        return True

    def _journal_sealed(self, ref: JournalRef) -> None:
        """Our journal ``ref`` was sealed by another process: its sealers fold its steps."""
        self.root.groups.retire_journal(ref)
        self.root.transactions.retire_journal(ref)

    def _fold_journal(self) -> None:
        """Fold the groups' journalled commits that waited ``fold_interval_ms``; replace the
        journal every ten intervals, at least every :data:`JOURNAL_ROTATE_MIN_MS` (folding
        all of it first, then deleting it)."""
        writer = self._journal
        assert writer is not None
        interval_ms = self.config.fold_interval_ms
        rotate_ms = max(10 * interval_ms, JOURNAL_ROTATE_MIN_MS)
        if (time.monotonic() - writer.started) * 1000 < rotate_ms:
            if self.config.journal_offset_commits:
                self.root.groups.fold_due(interval_ms)
                self.root.transactions.fold_due(interval_ms)
            self.produce_path.fold_shards(interval_ms)
        elif self.config.journal_offset_commits:
            self.root.groups.rotate_journal(also_folded=self._txns_and_shards_folded)
        elif writer.next_version > 0:  # nothing written: nothing to replace (no LIST)
            old = writer.rotate()
            if self._shards_folded(old):
                self.root.store.delete_prefix(old.prefix)

    def _txns_and_shards_folded(self, ref: JournalRef) -> bool:
        """Fold the transactional ids' and the shards' journalled steps; whether journal
        ``ref`` holds no more of them."""
        txns_done = self.root.transactions.fold_all(ref)
        return self._shards_folded(ref) and txns_done

    def _shards_folded(self, ref: JournalRef) -> bool:
        """Fold every shard's journalled records; whether journal ``ref`` holds no more."""
        assert self._journal is not None
        self.produce_path.fold_shards(0)
        return not self._journal.unfolded_keys(ref)

    def _close_journal(self) -> None:
        """A graceful stop: fold everything journalled, then delete the journal."""
        writer = self._journal
        assert writer is not None
        if self.config.journal_offset_commits:
            self.root.groups.close_journal(also_folded=self._txns_and_shards_folded)
            return
        writer.close()
        if self._shards_folded(writer.ref) and writer.next_version > 0:
            self.root.store.delete_prefix(writer.ref.prefix)

    def _reload_topics(self) -> None:
        """Re-read the open topics' metadata, when the image's topics changed since the
        last pass (the section is replaced by a change, never edited): an idle tick walks
        no topic, and a changed one re-describes only the topics whose documents changed."""
        state = self.state
        topics = state.root.metadata.image().topics
        if topics is self._topics_reloaded_from:
            return
        with state.lock:
            cached = list(state.topic_handles)
        for name in cached:
            state.reload_topic(name)
        self._topics_reloaded_from = topics
