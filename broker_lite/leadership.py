"""The broker's leadership role: its lease, the shards it leads, the groups it coordinates.

Leadership per shard comes from the live set (:mod:`sparklog.broker_lite.cluster`);
this role renews the lease, follows changes of the live set and of the topics
and keeps followers warm.  A led partition's log is opened by its first
produce, fetch or explicit describe, never all at once at start-up.
"""

from __future__ import annotations

import logging
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from sparklog import errors
from sparklog.broker_lite.broker_state import BrokerState
from sparklog.broker_lite.cluster import BrokerInfo, rendezvous_weight
from sparklog.broker_lite.logs import fields
from sparklog.broker_lite.partition_state import storage_call
from sparklog.errors import NotCoordinatorError, SparklogError
from sparklog.storage import Topic
from sparklog.topic_partition import TopicPartition

log = logging.getLogger("sparklog.broker_lite.broker")


class LeadershipRole:
    """Lease renewal, led partitions, warm followers, group coordination."""

    def __init__(self, state: BrokerState) -> None:
        self.state = state
        self._lease_was_healthy = True
        #: shards led when the lease went stale (the lease_stale state of the metric)
        self._shards_before_stale = 0
        #: what the led partitions were last derived from (see :meth:`update_leadership`)
        self._leadership_inputs: tuple[Any, frozenset[int], bool] | None = None

    def lease_loop(self) -> None:
        """Renew our lease, and nothing else: no other work may delay it.

        A write starts every ``lease_interval_ms`` whether or not the previous
        one has answered (at most enough to cover the lease timeout are in
        flight), so a store answering in seconds delays each renewal but not
        the cadence, and the lease holds as long as a write completes within the
        lease timeout of its start.  Reading the leases we monitor runs beside
        it in the same way.  Every store call has a deadline; it takes no lock
        that store I/O holds, so only an outage of the store ends our lease.
        """
        interval_ms = self.state.config.lease_interval_ms
        assert self.state.cluster is not None
        cluster = self.state.cluster
        in_flight_max = max(2, -(-self.state.config.lease_timeout_ms // interval_ms) + 1)
        writes: set[Future[None]] = set()
        watch: Future[Any] | None = None
        with ThreadPoolExecutor(in_flight_max + 1, thread_name_prefix="sparklog-lease") as pool:
            while not self.state.stop_requested.wait(interval_ms / 1000):
                for done in [w for w in writes if w.done()]:
                    writes.discard(done)
                    self._log_lease_failure(done)
                try:
                    cluster.ensure_registered()
                except SparklogError as exc:
                    log.warning("lease registration failed", extra=fields(error=str(exc)[:500]))
                    continue
                if len(writes) < in_flight_max:
                    writes.add(pool.submit(cluster.write_lease))
                if watch is None or watch.done():
                    if watch is not None:
                        self._log_lease_failure(watch)
                    watch = pool.submit(cluster.refresh)
                self._note_lease_health()

    def _log_lease_failure(self, done: Future[Any]) -> None:
        exc = done.exception()
        if isinstance(exc, SparklogError):
            log.warning("lease renewal failed", extra=fields(error=str(exc)[:500]))
        elif exc is not None:
            log.error("lease renewal failed", exc_info=exc)

    def _note_lease_health(self) -> None:
        """Say once when our lease goes stale (we lead nothing) and once when it is back."""
        assert self.state.cluster is not None
        healthy = self.state.cluster.healthy
        if healthy == self._lease_was_healthy:
            return
        self._lease_was_healthy = healthy
        if healthy:
            log.info(
                "lease renewed: leading again", extra=fields(broker=self.state.cluster.broker_id)
            )
        else:
            # at once, from the lease loop: the leadership pass that also sets these reads
            # the store, which may be what is gone (it can take its deadlines to finish)
            self._set_leadership_shards(leading=0, stale=self._shards_before_stale)
            log.warning(
                "lease is stale: this broker leads nothing until a renewal completes within "
                "lease_timeout_ms of its start",
                extra=fields(
                    broker=self.state.cluster.broker_id,
                    lease_timeout_ms=self.state.config.lease_timeout_ms,
                    last_lease_write_ms=round(self.state.cluster.lease_write_s * 1000),
                ),
            )

    def _set_leadership_shards(self, *, leading: int, stale: int) -> None:
        self.state.metrics.leadership_shards.labels("leading").set(leading)
        self.state.metrics.leadership_shards.labels("lease_stale").set(stale)

    def update_leadership(self) -> None:
        """Derive the partitions this broker leads, when anything they depend on changed.

        They depend on the image's topics (a section replaced, never changed in place,
        when a commit changes it), the live set and our lease's health: an idle tick
        with none of them changed walks no topic (issue 37: a tick walked every topic
        and partition each second, idle CPU growing with topics).
        """
        assert self.state.cluster is not None
        live = self.state.cluster.live()
        self.state.metrics.live_brokers.set(len(live))
        inputs = (
            self.state.root.metadata.image().topics,
            frozenset(live),
            self.state.cluster.healthy,
        )
        seen = self._leadership_inputs
        if seen is not None and seen[0] is inputs[0] and seen[1:] == inputs[1:]:
            return
        self._leadership_inputs = inputs
        led: set[TopicPartition] = set()
        for name in storage_call(self.state.root.list_topics):
            try:
                topic = self.state.topic(name)
            except errors.CorruptRecordError as exc:
                self.state.report_damaged(name, exc)
                self._leadership_inputs = None  # look again next tick: it may be repaired
                continue
            except SparklogError:
                continue
            self.state.damaged_topics.pop(name, None)
            led.update(
                TopicPartition(name, p)
                for p in range(topic.partitions)
                if self.state.cluster.is_leader(name, p)
            )
        gained, lost = led - self.state.led, self.state.led - led
        if gained or lost:
            self.state.metrics.leadership_changes.inc(len(gained) + len(lost))
            log.info(
                "leadership changed",
                extra=fields(gained=sorted(gained)[:50], lost=sorted(lost)[:50], live=sorted(live)),
            )
        for name, p in lost:
            for key, st in list(self.state.partitions.items()):
                if key[0] == name and key[2] == p:
                    # No st.lock: a commit holds it across store I/O.  The next commit
                    # bumps the epoch again (a stale one is fenced and bumped anyway).
                    st.epoch = None
                    self.state.cache.drop(key)
        self.state.led = led
        self.state.metrics.led_partitions.set(len(led))
        shards = len({(name, self.state.cluster.shard_of(name, p)) for name, p in led})
        if self.state.cluster.healthy:
            self._shards_before_stale = shards
        self._set_leadership_shards(
            leading=shards, stale=0 if self.state.cluster.healthy else self._shards_before_stale
        )

    def warm_followers(self, topic: Topic) -> None:
        """Keep the logs of partitions we follow loaded, so a takeover starts at once."""
        assert self.state.cluster is not None
        me = self.state.cluster.broker_id
        for p in range(topic.partitions):
            replicas = self.state.cluster.replicas(topic.name, p)
            if me in replicas[1:]:
                st = self.state.partition_state(topic, p)
                if st.lock.acquire(blocking=False):  # busy means loaded: skip, never wait
                    try:
                        st.refresh()
                    finally:
                        st.lock.release()

    def led_partitions(self) -> set[TopicPartition]:
        return set(self.state.led)

    def coordinator_of(self, group: str) -> BrokerInfo | None:
        """The live broker coordinating ``group`` (highest rendezvous weight)."""
        assert self.state.cluster is not None
        live = self.state.cluster.live()
        if not live:
            return None
        return live[max(live, key=lambda b: rendezvous_weight(group, 0, b))]

    def check_coordinator(self, group: str) -> None:
        """Refuse a group this broker does not coordinate, naming the one that does."""
        if self.state.config.force_leader or self.state.cluster is None:
            return
        owner = self.coordinator_of(group)
        if owner is not None and owner.broker_id == self.state.config.broker_id:
            return
        where = f"broker {owner.broker_id} at {owner.location}" if owner else "no live broker"
        me = self.state.config.broker_id
        raise NotCoordinatorError(
            f"group {group!r} is coordinated by {where}, not by broker {me}",
            coordinator_id=owner.broker_id if owner else -1,
            coordinator_location=owner.location if owner else "",
        )
