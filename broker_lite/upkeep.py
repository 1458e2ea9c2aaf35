"""The broker's upkeep role: what its cleaner runs (retention, compaction, GC, pruning).

:class:`Upkeep` is the cleaner's host (:class:`~sparklog.broker_lite.cleaner.MaintenanceHost`):
maintenance of the partitions this broker leads, through the cleaner's own topic
handles; GC and pruning of a topic skipped while its shard logs are where the last
pass left them (issue 37: a LIST per idle topic per pass was most of an idle
cluster's bill), and put off to the topic's slot of the daily full pass when first
seen (a broker's start listed every topic); the first read of a log no client has
touched since the start spread over ``cleaner_first_pass_spread_ms`` by its topic's
name (a start's first pass read every led log: the whole request budget of an idle
cluster's first 30 minutes); the cluster's shared upkeep (shared
objects, the metadata log) by the live broker of lowest id; the group logs of the
groups this broker coordinates.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sparklog.broker_lite.broker_state import BrokerState
from sparklog.broker_lite.partition_state import PartitionState
from sparklog.clock import now_ms
from sparklog.errors import SparklogError
from sparklog.storage import Topic
from sparklog.storage.log import ShardLog
from sparklog.storage.shared_objects import SharedSection
from sparklog.storage.topic_info import TopicInfo
from sparklog.topic_partition import TopicPartition

if TYPE_CHECKING:
    from sparklog.storage.journalled_logs import JournalledLogs
    from sparklog.storage.maintenance import PruneReport

#: how often the cleaner lists an unchanged topic's objects and logs anyway (a brokerless
#: writer's abandoned upload appears without a commit); a topic first seen waits for its
#: slot of this interval (see _full_pass_offset_ms)
UPKEEP_FULL_PASS_MS = 24 * 60 * 60 * 1000
#: how often (at most) the objects shared by topics are listed for collection
SHARED_GC_INTERVAL_MS = 60 * 60 * 1000
#: how long the cleaner trusts its memory of a partition with no work due before it probes
#: the partition's shard log once (a commit by another process, a brokerless writer's,
#: is seen by then)
UPKEEP_RECHECK_MS = 60 * 60 * 1000


@dataclass
class _Idle:
    """A led partition after a maintenance pass: what its log looked like, when its next
    work falls due by the topic's own rules, and when its log was last read."""

    fingerprint: tuple[Any, ...]
    due_ms: int
    checked_ms: int
    maintained_ms: int
    #: the partition's shard (its key in Upkeep._probed)
    shard: tuple[str, str, int]


class Upkeep:
    """The cleaner's view of the broker; ``owned_groups()``: the groups it coordinates
    (all of the root's, listed at most daily, and those served since)."""

    def __init__(
        self,
        state: BrokerState,
        owned_groups: Callable[[], list[str]],
        coordinates_transaction: Callable[[str], bool] = lambda tid: False,
    ) -> None:
        self.state = state
        self._owned_groups = owned_groups
        self._coordinates_transaction = coordinates_transaction
        #: (topic, job) -> (topic id and shard versions, last full pass ms, when work
        #: waiting falls due (ms; None: none waits)): what the cleaner's last GC or pruning
        #: of a topic (or group) saw (see _topic_unchanged)
        self._upkeep: dict[tuple[str, str], tuple[Any, int, int | None]] = {}
        #: topic -> when the cleaner first reads its logs if no client touches them first
        #: (ms: its first sight plus its slot of cleaner_first_pass_spread_ms; see
        #: _first_read_waits)
        self._first_read_ms: dict[str, int] = {}
        self._maintenance_topics: dict[str, Topic] = {}
        #: (topic, partition) -> the partition as its last maintenance left it (see
        #: maintain_partition)
        self._idle: dict[tuple[str, int], _Idle] = {}
        #: shard -> when the cleaner last probed its log for an idle partition's recheck
        #: (only shards with a remembered idle partition: see led_partitions)
        self._probed: dict[tuple[str, str, int], int] = {}
        #: topic -> its rules as the metadata image held them at this pass's first look
        #: (read once per topic per pass, not once per partition)
        self._pass_rules: dict[str, TopicInfo] = {}
        #: topics whose maintenance changed a log this pass (their GC is not put off: the
        #: objects it unreferenced are collected as at any other change)
        self._changed_this_pass: set[str] = set()
        #: the metadata log version at the last pruning, and when the first file it left
        #: waiting out the log retention comes of age (None: none waited)
        self._metadata_pruned: tuple[int, int | None] | None = None
        self._shared_collected_ms = 0
        #: the sections each shared object names (objects never change): read once
        self._shared_trailers: dict[str, list[SharedSection]] = {}

    def led_partitions(self) -> set[TopicPartition]:
        """The partitions this pass maintains (a pass begins: what is remembered of
        partitions no longer led, or of deleted topics, is forgotten)."""
        led = set(self.state.led)
        for key in [k for k in self._idle if k not in led]:
            del self._idle[key]  # led elsewhere now, or deleted: read afresh if it comes back
        shards = {idle.shard for idle in self._idle.values()}
        led_topics = {name for name, _ in led}
        for name in [t for t in self._first_read_ms if t not in led_topics]:
            del self._first_read_ms[name]  # its slot is counted afresh if it is led again
        for shard in [k for k in self._probed if k not in shards]:
            del self._probed[shard]
        self._pass_rules = {}
        self._changed_this_pass = set()
        return led

    @property
    def stopping(self) -> bool:
        return self.state.stop_requested.is_set()

    def owned_groups(self) -> list[str]:
        return self._owned_groups()

    def owned_transactional_ids(self) -> list[str]:
        """The registered transactional ids this broker coordinates (their logs it prunes)."""
        registry = self.state.root.metadata.image().transactional_ids
        return [tid for tid in registry if self._coordinates_transaction(tid)]

    def wait_stopping(self, timeout_s: float) -> bool:
        return self.state.stop_requested.wait(timeout_s)

    def maintain_partition(self, topic: str, partition: int) -> Any:
        """Maintenance of a led partition under this broker's epoch, then refresh and trim.

        Skipped, with no request, while the partition's log is as the last pass left it
        (in this broker's memory: its own writes show there) and the topic's rules give it
        no work before a later time (the oldest segment's expiry, a compaction lag); a
        log untouched in memory for :data:`UPKEEP_RECHECK_MS` is probed once first.  A
        pass over every led partition cost an idle cluster of 1,000 topics a few GETs per
        partition every ``cleaner_interval_ms`` (issue 37)."""
        from sparklog.storage.maintenance import maintenance_due_ms, run_maintenance

        data = self.state.topic(topic)
        st = self.state.partition_state(data, partition)
        # the topic's rules as the metadata image holds them now (no request on a broker):
        # the data handle keeps the config it was opened with until it is re-opened
        rules = self._pass_rules.get(topic)
        if rules is None:
            rules = self._pass_rules[topic] = self.state.root.describe_topic(topic)
        now = now_ms()
        idle = self._idle.get((topic, partition))
        if (
            idle is not None
            and now < idle.due_ms
            and now - idle.maintained_ms < UPKEEP_FULL_PASS_MS  # cluster-wide defaults too
            and _fingerprint(st, rules) == idle.fingerprint
        ):
            if now - idle.checked_ms < UPKEEP_RECHECK_MS:
                return None
            if now - self._probed.get(st.shard.key, -UPKEEP_RECHECK_MS) >= UPKEEP_RECHECK_MS // 2:
                with st.lock:
                    st.refresh()  # once for all the shard's partitions
                self._probed[st.shard.key] = now
            if _fingerprint(st, rules) == idle.fingerprint:
                idle.checked_ms = now
                return None
        if idle is None:
            if st.shard.log.loaded_state is None and self._first_read_waits(topic, now):
                return None  # no client touched it since the start: read at its slot
            # first sight (a broker starting, a partition newly led): its log as the broker
            # holds it decides; the cleaner's own handle is opened only for work due
            with st.lock:
                checked_ms = _read_for_first_sight(st, now)
                due = maintenance_due_ms(st.log.state, rules.effective_config, now)
            if due > now:
                self._idle[(topic, partition)] = _Idle(
                    _fingerprint(st, rules), due, checked_ms, now, st.shard.key
                )
                return None
        handle = self._maintenance_topic(topic)
        report = run_maintenance(handle, partition, leader_epoch=st.epoch)
        if report.changed:
            self._changed_this_pass.add(topic)
        with st.lock:
            st.refresh()
            self.state.cache.trim(st.key, st.log.log_start_offset)
            # the rules the fingerprint names (an alter landing after they were read, even
            # one the handle's reload saw, changes the next pass's fingerprint: maintained)
            due = maintenance_due_ms(st.log.state, rules.effective_config, now)
            self._idle[(topic, partition)] = _Idle(
                _fingerprint(st, rules), due, now, now, st.shard.key
            )
        return report

    def _first_read_waits(self, topic: str, now: int) -> bool:
        """Whether the cleaner's first read of ``topic``'s logs, which no client has touched
        since this broker started leading them, still waits for the topic's slot: its
        first sight by a pass plus :func:`_first_read_offset_ms` of
        ``cleaner_first_pass_spread_ms``.  Reading every led log in a start's first pass
        (a hint GET and a LIST for a never-written log) was 1,800 of the 1,800 requests
        above the leases' own that an idle cluster of 1,000 topics on 3 brokers may make
        in its first 30 minutes (issue 37); a log a client produces to or fetches from is
        read by the broker anyway and joins the passes at once."""
        first_read_ms = self._first_read_ms.get(topic)
        if first_read_ms is None:
            spread_ms = self.state.config.cleaner_first_pass_spread_ms
            first_read_ms = self._first_read_ms[topic] = now + _first_read_offset_ms(
                topic, spread_ms
            )
        return now < first_read_ms

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
        handle = self.state.root.topic(name)
        self._maintenance_topics[name] = handle
        return handle

    def _topic_unchanged(self, name: str, job: str, now: int) -> tuple[bool, Any]:
        """Whether ``job`` (``gc``, ``prune``) may skip the topic this pass: its shard logs
        are at the versions of the job's last pass (one probe each), what that pass left
        waiting is not due before ``now``, and a full pass ran within
        :data:`UPKEEP_FULL_PASS_MS`; and the versions
        to remember after the pass.  Listing an idle topic's objects and logs every pass
        (a LIST each) was most of an idle cluster's bill (issue 37: 2.93 LIST/s at 1,000
        topics); objects appear only through commits, except a brokerless writer's
        abandoned upload, which the daily full pass collects.  A topic first seen (this
        broker has no memory of collecting it) waits for its slot of that full pass
        (:func:`_full_pass_offset_ms`) unless its logs change first."""
        topic = self.state.topic(name)
        if any(
            topic.shard(s).loaded_state is None for s in range(topic.shards)
        ) and self._first_read_waits(name, now):
            return True, None  # its logs are not read yet: nothing to compare (see above)
        versions = (
            topic.info.topic_id,
            tuple(_shard_version(topic, s) for s in range(topic.shards)),
        )
        seen = self._upkeep.get((name, job))
        if seen is None and name not in self._changed_this_pass:
            # first sight (a broker starting, a topic newly led): the topic is taken as
            # collected at its slot of the full pass, one day apart and spread over the
            # day by its name, instead of all of a broker's topics listed in its first
            # pass (issue 37: two LISTs and a few GETs per topic, most of a start's
            # bill); a change to its logs brings it back at once, as for any topic
            full_pass_ms = now_ms() - UPKEEP_FULL_PASS_MS + _full_pass_offset_ms(name)
            seen = self._upkeep[(name, job)] = (versions, full_pass_ms, None)
        unchanged = (
            seen is not None
            and seen[0] == versions
            and _not_due(seen[2], now)
            and now_ms() - seen[1] < UPKEEP_FULL_PASS_MS
        )
        return unchanged, versions

    def _remember_upkeep(
        self, name: str, job: str, versions: Any, waiting_until_ms: int | None
    ) -> None:
        self._upkeep[(name, job)] = (versions, now_ms(), waiting_until_ms)

    def collect_garbage(self, topic: str) -> None:
        from sparklog.storage.maintenance import collect_garbage

        now = now_ms()
        unchanged, versions = self._topic_unchanged(topic, "gc", now)
        if unchanged:
            return
        report = collect_garbage(self.state.topic(topic), self.state.config.gc_grace_ms)
        # marks waiting out the grace: looked at again at the next pass
        self._remember_upkeep(topic, "gc", versions, now if report.pending_marks else None)

    def _collects_for_the_cluster(self) -> bool:
        """Whether this broker does the cluster's shared upkeep (shared objects, the metadata
        log): the live broker of lowest id (any broker may; one saves the others' reads)."""
        return self.state.cluster is None or self.state.cluster.broker_id == min(
            self.state.cluster.live(), default=self.state.cluster.broker_id
        )

    def prune_metadata_log(self, now_ms: int) -> int | None:
        from sparklog.storage.maintenance import prune_metadata_log

        if not self._collects_for_the_cluster():
            return None
        version = self.state.root.metadata.image().version
        seen = self._metadata_pruned
        if seen is not None and seen[0] == version and _not_due(seen[1], now_ms):
            # nothing appended, and nothing waiting has come of age since the last pruning:
            # a LIST would find nothing to delete (issue 37: ~1 LIST a pass after a cluster
            # created many topics, for the hour its old commits wait)
            return 0
        report = prune_metadata_log(self.state.root, now=now_ms)
        self._metadata_pruned = (version, report.waiting_until_ms)
        return len(report.deleted)

    def collect_shared_objects(self) -> int | None:
        """The objects broker flushes shared between topics are collected by one broker."""
        from sparklog.storage.shared_objects import collect_shared_garbage

        if not self._collects_for_the_cluster():
            return None
        # one listing an hour at most (half the grace when shorter): an unreferenced object
        # waits out the grace anyway
        interval_ms = min(SHARED_GC_INTERVAL_MS, self.state.config.gc_grace_ms // 2)
        if now_ms() - self._shared_collected_ms < interval_ms:
            return 0
        self._shared_collected_ms = now_ms()
        report = collect_shared_garbage(
            self.state.root, self.state.config.gc_grace_ms, trailers=self._shared_trailers
        )
        return len(report.deleted)

    def remove_stale_temp_files(self) -> int:
        from sparklog.storage.log import STAGED_OBJECT_MAX_AGE_MS

        # leases and metadata live under cluster/; topics' folders are swept by their GC
        removed = self.state.root.store.remove_stale_temp_files(
            "cluster", STAGED_OBJECT_MAX_AGE_MS, now_ms()
        )
        return len(removed)

    def count_cleaner_run(self, outcome: str) -> None:
        self.state.metrics.cleaner_runs.labels(outcome).inc()

    def prune_topic_logs(self, topic: str, now_ms: int) -> int:
        from sparklog.storage.maintenance import prune_topic_logs

        unchanged, versions = self._topic_unchanged(topic, "prune", now_ms)
        if unchanged:
            return 0
        data = self.state.topic(topic)
        if all(_before_first_snapshot(data.shard(s)) for s in range(data.shards)):
            # nothing is older than a newest snapshot yet: no LIST (most topics at a start)
            self._remember_upkeep(topic, "prune", versions, None)
            return 0
        report = prune_topic_logs(self.state.topic(topic), now=now_ms)
        self._remember_upkeep(topic, "prune", versions, report.waiting_until_ms)
        return len(report.deleted)

    def prune_group_log(self, group: str, now_ms: int) -> int:
        from sparklog.storage.maintenance import prune_group_log

        return self._prune_keyed(
            self.state.root.groups, group, "group-prune", now_ms, prune_group_log
        )

    def prune_transaction_log(self, transactional_id: str, now_ms: int) -> int:
        from sparklog.storage.maintenance import prune_transaction_log

        return self._prune_keyed(
            self.state.root.transactions,
            transactional_id,
            "txn-prune",
            now_ms,
            prune_transaction_log,
        )

    def _prune_keyed(
        self,
        logs: JournalledLogs[Any],
        key: str,
        job: str,
        now_ms: int,
        prune: Callable[..., PruneReport],
    ) -> int:
        """Prune one group's or transactional id's log, unless nothing was committed to
        it and nothing waiting came of age since its last pruning (no request then)."""
        keyed_log, lock = logs.log(key)
        with lock:
            version = keyed_log.refresh().version
        seen = self._upkeep.get((key, job))
        if seen is not None and seen[0] == version and _not_due(seen[2], now_ms):
            return 0
        report = prune(self.state.root, key, now=now_ms)
        self._upkeep[(key, job)] = (version, 0, report.waiting_until_ms)
        return len(report.deleted)


def _full_pass_offset_ms(topic: str) -> int:
    """When, after a broker first sees ``topic``, its first full GC and pruning pass falls
    (ms): fixed by the topic's name and spread evenly over :data:`UPKEEP_FULL_PASS_MS`, so
    a started broker lists its topics a few at a time over a day, not all in its first
    pass."""
    return zlib.crc32(topic.encode()) % UPKEEP_FULL_PASS_MS


def _first_read_offset_ms(topic: str, spread_ms: int) -> int:
    """How long after the cleaner first sees ``topic`` it reads the topic's logs if no
    client does first (ms): fixed by the name and spread evenly over ``spread_ms``, so a
    started broker reads its idle logs a few at a time, not all in its first pass."""
    return zlib.crc32(b"first read " + topic.encode()) % spread_ms if spread_ms > 0 else 0


def _read_for_first_sight(st: PartitionState, now: int) -> int:
    """Bring a partition first seen by the cleaner up to date (caller holds its lock):
    no request if this broker read its shard log within :data:`UPKEEP_RECHECK_MS` (its
    own writes and fetches load it, as does the first sight of the shard's other
    partitions in this pass; the hourly recheck covers other writers' commits as for
    any remembered partition); when the view was confirmed (ms, on ``now``'s clock)."""
    shard = st.shard
    if shard.log.loaded_state is not None and shard.refreshed:
        age_ms = int((time.monotonic() - shard.refreshed) * 1000)
        if age_ms < UPKEEP_RECHECK_MS:
            return now - age_ms
    shard.refresh()
    return now


def _not_due(waiting_until_ms: int | None, now_ms: int) -> bool:
    """Whether what a job's last pass left waiting (None: nothing) is not yet due."""
    return waiting_until_ms is None or now_ms < waiting_until_ms


def _fingerprint(st: PartitionState, info: TopicInfo) -> tuple[Any, ...]:
    """What changes whenever a partition's log or its topic's config does, as this broker
    holds them: no I/O."""
    loaded = st.shard.log.loaded_state
    if loaded is None:
        return ()
    return (
        info.topic_id,
        info.version,
        sorted(info.config.items()),  # an altered retention or cleanup policy: work may be due
        loaded.version,
        loaded.folded,
        loaded.journal,
        st.log.state.high_watermark,
    )


def _shard_version(topic: Topic, shard: int) -> tuple[int, int]:
    """A shard log's version and folded journal position as this broker last read them
    (the cleaner's pass read every shard it had work in; one probe if never read)."""
    log = topic.shard(shard)
    loaded = log.loaded_state
    if loaded is None:
        loaded = log.refresh()
    return loaded.version, loaded.folded


def _before_first_snapshot(log: ShardLog) -> bool:
    """Whether a shard log (as last read) has had fewer commits than make a snapshot, so
    pruning, which deletes what precedes the newest snapshot, has nothing to delete."""
    loaded = log.loaded_state
    return loaded is not None and loaded.version < log.snapshot_interval
