"""Embedded mode: the client reads and writes a storage root directly, no server.

A flush writes ONE object per topic holding every partition's records
(``Topic.write``), then ONE commit per shard touched (``Topic.commit``), as a
broker's flush does: atomic across the shard's partitions, each partition's
segment carrying the idempotent producer's ``ProducerBatch`` so a retried flush
never duplicates records.  A shard a broker's journal leases gets its commit from that
broker (:mod:`sparklog.client.handover`).  Shard logs are not thread-safe, so each backend keeps
its own handles and serialises access per shard.
"""

from __future__ import annotations

import contextlib
import functools
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

from sparklog.client.transports.base import (
    FetchResult,
    GroupCalls,
    ProduceResult,
    ProducerIdentity,
    TopicCalls,
    TopicLayout,
    TopicPartition,
)
from sparklog.client.types import (
    EMBEDDED_LEADER,
    OffsetAndMetadata,
    PartitionDescription,
    TopicDescription,
)
from sparklog.errors import InvalidConfigurationError
from sparklog.protocol import actions
from sparklog.protocol import flight as wire
from sparklog.protocol.actions import Action
from sparklog.protocol.hooks import MirrorLinks, mirror_links_factory
from sparklog.security import users
from sparklog.storage.catalog import LogRoot, open_root

if TYPE_CHECKING:
    # The logs and the record model (pyarrow, numpy) load when records are produced or
    # fetched, not with this module: a metadata command never needs them.
    import pyarrow as pa

    from sparklog.groups.coordinator import GroupCoordinator
    from sparklog.storage.log import PartitionLog
    from sparklog.storage.segments import Segment
    from sparklog.storage.topics import Topic

LONG_POLL_INTERVAL_S = 0.02
R = TypeVar("R")


class EmbeddedBackend(TopicCalls, GroupCalls):
    """Producer/consumer/admin calls against a storage root (``open_root(url)``)."""

    def __init__(
        self,
        url: str,
        storage_options: Mapping[str, Any] | None = None,
        *,
        create: bool = True,
        mirror: Callable[[LogRoot], MirrorLinks] | None = None,
    ) -> None:
        """``mirror``: the mirroring application's hook, given the root (``sparklog mirror``
        hands it; the client never imports an application); without it the mirror link
        calls are refused."""
        self.address = url
        self._mirror = mirror
        # Read-only users (consumers, metadata commands) pass create=False: a missing
        # root is an error, never a folder or bucket made by a typo.
        self.root: LogRoot = open_root(url, storage_options, create=create)
        self._topic_api = self.root
        self._topics: dict[str, Topic] = {}
        self._locks: dict[tuple[str, int], threading.Lock] = {}  # per (topic, shard)
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._coordinator: GroupCoordinator | None = None

    @property
    def groups(self) -> GroupCoordinator:
        """Groups run in-process, coordinated through the root alone (no broker needed).

        Built on first use: topic and record calls never import the coordinator.
        """
        if self._coordinator is None:
            from sparklog.groups.coordinator import GroupCoordinator

            self._coordinator = GroupCoordinator(self.root)
        return self._coordinator

    @property
    def _group_api(self) -> GroupCoordinator:
        return self.groups

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False)
            self._pool = None

    # -- handles -----------------------------------------------------------------
    def _topic(self, name: str, *, refresh: bool = False) -> Topic:
        with self._lock:
            topic = self._topics.get(name)
        if topic is None or refresh:
            topic = self.root.topic(name)
            with self._lock:
                self._topics[name] = topic
        return topic

    def _log(self, name: str, partition: int) -> tuple[PartitionLog, threading.Lock]:
        log = self._topic(name).partition(partition)
        return log, self._shard_lock(name, log.shard.shard)

    def _shard_lock(self, topic: str, shard: int) -> threading.Lock:
        """The lock of one shard log: its partitions' views share the log, so they share it."""
        with self._lock:
            return self._locks.setdefault((topic, shard), threading.Lock())

    # -- topics ------------------------------------------------------------------
    def list_topics(self) -> list[str]:
        return self.root.list_topics()

    def describe_topic(self, name: str, *, sizes: bool = False) -> TopicDescription:
        topic = self._topic(name, refresh=True)
        parts = []
        for p in range(topic.partitions):
            log, lock = self._log(name, p)
            with lock:
                log.refresh()
                size = sum(s.size_bytes for s in log.segments()) if sizes else None
                parts.append(
                    PartitionDescription(
                        p, EMBEDDED_LEADER, log.log_start_offset, log.high_watermark, size
                    )
                )
        return TopicDescription(
            name,
            topic.info.topic_id,
            parts,
            dict(topic.info.effective_config),
            topic.info.value_type,
            topic.info.replication_factor,
        )

    def topic_layout(self, name: str) -> TopicLayout:
        topic = self._topic(name, refresh=True)
        return TopicLayout.of(topic.partitions, topic.info.effective_config)

    def _forget_topic(self, name: str) -> None:
        with self._lock:
            self._topics.pop(name, None)

    # -- records -----------------------------------------------------------------
    def init_producer_id(self) -> tuple[int, int]:
        """A random 62-bit id: unique without a coordinator; epoch 0."""
        return random.getrandbits(62), 0

    def produce(
        self,
        topic: str,
        parts: Mapping[int, Sequence[pa.RecordBatch | pa.Table]],
        *,
        acks: str = "all",
        producer: ProducerIdentity | None = None,
        compression: str | None = None,
    ) -> dict[int, ProduceResult]:
        """Write ONE object for the flush, then ONE commit per shard touched.

        The same two steps as a broker's flush (docs/architecture.md, "Storage format
        2"): requests per flush
        do not grow with the partition count, and each shard's partitions land
        together or not at all.  An idempotent producer's batch of each partition
        carries its own sequence, so a retried flush is recognised per partition.
        """
        from sparklog.client import handover  # pyarrow.flight: not for metadata commands
        from sparklog.storage.log import ProducerBatch

        compression = compression or "none"
        handle = self._topic(topic)
        staged = self._write(handle, parts, compression)
        results = {p: ProduceResult(-1, 0) for p in parts if p not in staged}  # empty input
        producers = None
        if producer is not None:
            producers = {
                p: ProducerBatch(
                    producer.producer_id,
                    producer.producer_epoch,
                    producer.sequences[p],
                    seg.record_count,
                )
                for p, seg in staged.items()
            }
        # the shards a broker's journal leases: handed to it (one call per broker)
        with contextlib.ExitStack() as locked:
            for shard in sorted({handle.info.shard_of(p) for p in staged}):
                locked.enter_context(self._shard_lock(topic, shard))
            handed, left = handover.hand_over(self.root, handle, staged, producers=producers)
        for p, r in handed.items():
            results[p] = ProduceResult(r.base_offset, r.record_count, r.duplicate)
        by_shard: dict[int, dict[int, Sequence[Segment]]] = {}
        for p, segments in left.items():
            by_shard.setdefault(handle.info.shard_of(p), {})[p] = segments

        def commit(shard: int) -> dict[int, ProduceResult]:
            appends = by_shard[shard]
            with self._shard_lock(topic, shard):
                landed = handle.commit(
                    appends,
                    producers={p: b for p, b in (producers or {}).items() if p in appends},
                )
            return {
                p: ProduceResult(r.base_offset, r.record_count, r.duplicate)
                for p, r in landed.items()
            }

        shards = sorted(by_shard)
        if len(shards) > 1 and not self.root.store.is_local:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(8, thread_name_prefix="sparklog-commit")
            for done in self._pool.map(commit, shards):
                results.update(done)
        else:
            for shard in shards:
                results.update(commit(shard))
        return results

    @staticmethod
    def _write(
        handle: Topic,
        parts: Mapping[int, Sequence[pa.RecordBatch | pa.Table]],
        compression: str,
    ) -> dict[int, Segment]:
        """The flush's one object (locally, each shard's next commit file is made meanwhile)."""
        with contextlib.ExitStack() as preparing:
            for s in sorted({handle.info.shard_of(p) for p in parts if 0 <= p < handle.partitions}):
                preparing.enter_context(handle.shard(s).preparing_commit())
            return handle.write(parts, compression)

    def fetch(
        self,
        topic: str,
        partition: int,
        offset: int,
        *,
        max_bytes: int,
        max_wait_ms: int,
        isolation_level: str = "read_uncommitted",
    ) -> FetchResult:
        from sparklog.storage.log import IDLE_PROBE_INTERVAL_MS, READ_PROBE_SHARE_MS
        from sparklog.storage.txn_markers import check_isolation_level, read_committed_from

        committed = check_isolation_level(isolation_level)

        log, lock = self._log(topic, partition)
        deadline = time.monotonic() + max_wait_ms / 1000
        staleness_ms = READ_PROBE_SHARE_MS  # partitions of a shard polled together share a probe
        while True:
            with lock:
                log.refresh(staleness_ms)
                staleness_ms = IDLE_PROBE_INTERVAL_MS
                hwm, start = log.high_watermark, log.log_start_offset
                batches = (
                    list(log.iter_batches(offset, max_bytes=max_bytes))
                    if offset != hwm or offset < start
                    else []
                )
                if committed:
                    state = log.state
                    stable = min(hwm, state.last_stable_offset)
                    batches = read_committed_from(
                        functools.partial(_read_below, log, stable, max_bytes),
                        offset,
                        state.transactions,
                        stable,
                    )
                    hwm = stable
            if batches or time.monotonic() >= deadline:
                return FetchResult(batches, hwm, start)
            time.sleep(LONG_POLL_INTERVAL_S)

    # -- any other admin action of the table, run on this root -------------------------
    def call(self, action: Action[R], /, **body: Any) -> R:
        """Run ``action`` on this root as a broker would: its body built and parsed by its
        table entry (the same fields, checks and defaults), served by :meth:`_served`, its
        result decoded by the entry.  An action only a broker serves is refused."""
        serve = self._served().get(action.name)
        if serve is None:
            raise InvalidConfigurationError(
                f"{action.name} runs on a broker: give --address host:port"
            )
        args = action.parse(wire.body(action.build(**body)))
        return action.result(serve(**args))

    def _served(self) -> dict[str, Callable[..., Any]]:
        """The actions a storage root serves itself (the broker's server functions of the
        same actions do the same on its root)."""
        metadata = self.root.metadata
        return {
            # a topic's config on the root; groups on the in-process coordinator (built on
            # the first group call: other calls never import it)
            actions.ALTER_TOPIC_CONFIG.name: lambda name, updates, remove: dict(
                self.root.alter_topic_config(name, updates, remove).config
            ),
            actions.HEARTBEAT.name: lambda **member: self.groups.heartbeat(**member),
            actions.LEAVE_GROUP.name: lambda **member: self.groups.leave_group(**member),
            actions.COMMIT_OFFSETS.name: lambda offsets, **member: self.groups.commit_offsets(
                offsets={TopicPartition(str(t), int(p)): int(o) for t, p, o in offsets}, **member
            ),
            actions.LIST_GROUPS.name: lambda: self.groups.list_groups(),
            actions.DESCRIBE_GROUP.name: lambda group: self.groups.describe_group(group),
            actions.DELETE_GROUP.name: lambda group: self.groups.delete_group(group),
            actions.LIST_TRANSACTIONS.name: lambda: _transaction_states(self.root),
            actions.ABORT_TRANSACTION.name: _abort_needs_a_broker,
            actions.SET_SCRAM_CREDENTIAL.name: lambda user, mechanism, **salted: users.set_salted(
                metadata, user, mechanism, **salted
            ),
            actions.DELETE_SCRAM_CREDENTIAL.name: lambda user, mechanism: users.delete(
                metadata, user, mechanism
            ),
            actions.LIST_USERS.name: lambda: users.users(metadata.image()),
            # mirror links: the hook this backend was handed (or the shipped application's)
            actions.CREATE_MIRROR_LINK.name: lambda **link: self._mirror_links().create(**link),
            actions.LIST_MIRROR_LINKS.name: lambda: self._mirror_links().list_all(),
            actions.DESCRIBE_MIRROR_LINK.name: lambda name: self._mirror_links().describe(name),
            actions.PAUSE_MIRROR_LINK.name: lambda name, paused: self._mirror_links().pause(
                name, paused
            ),
            actions.DELETE_MIRROR_LINK.name: lambda name: self._mirror_links().delete(name),
            actions.PROMOTE_MIRROR_TOPIC.name: lambda topic: self._mirror_links().promote(topic),
            actions.REVERSE_MIRROR_LINK.name: lambda **how: self._mirror_links().reverse(**how),
        }

    def _mirror_links(self) -> MirrorLinks:
        """The mirror link calls on this root, through the hook this backend was handed
        (or the shipped application's)."""
        self._mirror = mirror_links_factory(self._mirror)
        if self._mirror is None:
            raise InvalidConfigurationError(
                "mirror links on a storage root are the mirroring application's: use "
                "`sparklog mirror`, or open the backend with "
                "open_backend(address, mirror=sparklog.mirror.admin.RootLinks)"
            )
        return self._mirror(self.root)

    def list_offsets(self, topic: str, partition: int, spec: str | int) -> int:
        log, lock = self._log(topic, partition)
        with lock:
            log.refresh()
            if spec == "earliest":
                return log.log_start_offset
            if spec == "latest":
                return log.high_watermark
            if isinstance(spec, int):
                return log.offset_for_timestamp(spec)
        raise InvalidConfigurationError(
            f"offset spec {spec!r} is not accepted; accepted: earliest, latest, ms"
        )

    def delete_records(self, topic: str, partition: int, before_offset: int) -> int:
        from sparklog.storage.maintenance import delete_records

        log, lock = self._log(topic, partition)
        with lock:
            return delete_records(log, before_offset)

    # -- groups (in-process coordinator over the root) ------------------------------
    def fetch_offsets(self, group: str) -> dict[TopicPartition, OffsetAndMetadata]:
        found = self.root.groups.fetch(group)
        return {tp: OffsetAndMetadata(c.offset, c.metadata) for tp, c in found.items()}


def _abort_needs_a_broker(transactional_id: str) -> None:
    raise InvalidConfigurationError(
        "aborting a transaction writes markers through a broker: give --address host:port"
    )


def _read_below(log: Any, stop: int, max_bytes: int, start: int) -> list[pa.RecordBatch]:
    """Raw batches of ``log`` from ``start`` below ``stop`` (a read_committed reader's step)."""
    return list(log.iter_batches(start, stop, max_bytes=max_bytes))


def _transaction_states(root: LogRoot) -> dict[str, dict[str, Any]]:
    """Every registered transactional id's state: the metadata log registers the ids,
    each id's log holds its state (:mod:`sparklog.storage.transactions`)."""
    from sparklog.storage.transactions import transaction_states

    return transaction_states(root.metadata.refresh().transactional_ids, root.transactions)
