"""Cluster membership and partition leadership: registrations in the metadata log, leases.

Brokers learn each other from the cluster metadata log (docs/architecture.md,
"The control plane"): a
starting broker appends a ``broker_registered`` record (its id, addresses and
a fresh incarnation), a stopping one ``broker_unregistered``; nobody lists.
Each broker renews ``cluster/brokers/<id>.json`` every ``lease_interval_ms``,
writing a counter that grows with every renewal, and *monitors* only the next
:data:`MONITORS` registered brokers in id order (a ring), reading their leases
by key.  A monitored peer is live while its counter keeps changing: the monitor
notes on its *own* monotonic clock when it last saw the counter change, and a
peer whose counter has not changed for ``lease_timeout_ms`` is dead (Kafka's
session timeouts work the same way); the monitor then appends
``broker_fenced`` for that incarnation, which every broker learns with its
next probe of the log.  So an idle cluster of B brokers costs B lease writes
and at most ``MONITORS`` x B lease reads per interval, not B², and no LIST.
No broker compares its wall clock with a peer's, so clock skew moves no
leadership.  A broker that finds itself fenced (a slow store, not a death)
registers again and is live from then on.
A broker that could not renew its own lease for ``lease_timeout_ms`` considers
itself dead too: it leads nothing and says so.  Brokers lead shards: a topic's
shards are dealt out over the live brokers one by one, each to the broker
leading the fewest of the topic's shards so far, ties broken by the rendezvous
weight ``hash(topic, s, broker)`` (:func:`leaders_of`), and a partition's leader
is its shard's (partition p is in shard p mod ``commit.shards``), so every
broker that sees the same live set derives the same map with no coordination.
Views can disagree briefly (while a death propagates); the leader epochs in
the shard logs make that safe (docs/architecture.md, "Storage format 2" and "The control plane").
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import socket
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sparklog.broker_lite.logs import fields
from sparklog.clock import Clock, now_ms
from sparklog.errors import SparklogError
from sparklog.storage import LogRoot
from sparklog.storage.cluster_metadata import (
    BrokerFencedRecord,
    BrokerRegisteredRecord,
    BrokerUnregisteredRecord,
    MetadataImage,
    Record,
)

log = logging.getLogger("sparklog.broker_lite.cluster")
LEASE_PREFIX = "cluster/brokers"
#: how many ring successors each broker watches.  One is enough: the ring is over the
#: registered brokers not yet fenced, so once a watcher fences its dead successor it
#: watches the next one, and several deaths at once are fenced one after the other
MONITORS = 1


@dataclass(frozen=True)
class BrokerInfo:
    broker_id: int
    location: str  # host:port
    renewed_ms: int
    kafka_address: str | None = None  # host:port of the Kafka listener, if any


def monitored(broker_id: int, registered: Mapping[int, Any]) -> list[int]:
    """The brokers ``broker_id`` watches: the next :data:`MONITORS` registered ids after it,
    in ring order (everyone else when the cluster is that small)."""
    ring = sorted(b for b in registered if b != broker_id)
    after = [b for b in ring if b > broker_id] + [b for b in ring if b < broker_id]
    return after[:MONITORS]


def _info(entry: Mapping[str, Any]) -> BrokerInfo:
    kafka = entry.get("kafka_address")
    return BrokerInfo(int(entry["id"]), str(entry["location"]), 0, str(kafka) if kafka else None)


@functools.lru_cache(maxsize=65_536)
def leaders_of(topic: str, shards: int, live: Sequence[int]) -> tuple[int, ...]:
    """Each shard's leader among ``live`` (sorted ids): shard by shard, the broker leading
    the fewest of the topic's shards so far, ties broken by rendezvous weight.  So a topic
    with as many shards as brokers has one shard on each, and every broker that sees the
    same live set derives the same map."""
    counts = dict.fromkeys(live, 0)
    out = []
    for shard in range(shards):
        best = max(live, key=lambda b: (-counts[b], rendezvous_weight(topic, shard, b)))
        counts[best] += 1
        out.append(best)
    return tuple(out)


def rendezvous_weight(topic: str, partition: int, broker_id: int) -> int:
    digest = hashlib.blake2b(f"{topic}/{partition}/{broker_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def _refuses_connections(location: str, timeout_s: float = 0.2) -> bool:
    """True only if ``host:port`` actively refuses a TCP connection (nobody listens there)."""
    host, _, port = location.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            return False
    except ConnectionRefusedError:
        return True
    except (OSError, ValueError):
        return False


@dataclass
class _Seen:
    """A peer's lease as this broker last read it, and when (our monotonic clock) it changed."""

    token: tuple[str, int]  # (incarnation, renewal counter)
    changed_s: float
    info: BrokerInfo


class Cluster:
    """This broker's view of the live brokers, and the leadership map it implies."""

    def __init__(
        self,
        root: LogRoot,
        broker_id: int,
        location: str,
        *,
        lease_interval_ms: int = 1000,
        lease_timeout_ms: int = 6000,
        replication_factor: int = 1,
        force_leader: bool = False,
        probe_peers: bool = False,
        kafka_address: str | None = None,
        flight_security: str = "PLAINTEXT",
        clock_ms: Clock = now_ms,
    ) -> None:
        """``probe_peers``: check whether a suspect lease's address still accepts connections
        (a serving broker sets it; a bare Cluster, with no server behind its location, not).
        ``clock_ms``: this broker's wall clock, stamped into its lease (injectable so tests
        can show that a skewed clock changes nothing: peers never compare it with theirs)."""
        self.clock_ms = clock_ms
        self.root = root
        self.probe_peers = probe_peers
        self.kafka_address = kafka_address
        self.flight_security = flight_security
        self.broker_id = broker_id
        self.location = location
        self.lease_interval_ms = lease_interval_ms
        self.lease_timeout_ms = lease_timeout_ms
        self.replication_factor = replication_factor
        self.force_leader = force_leader
        self.incarnation = uuid.uuid4().hex
        self.started_ms = self.clock_ms()
        self._lock = threading.Lock()
        self._live: dict[int, BrokerInfo] = {}
        self._shards: dict[str, int] = {}  # topic -> commit.shards
        #: changes of a count :meth:`_shard_count` answered (leadership_inputs)
        self._shards_changes = 0
        self._seen: dict[int, _Seen] = {}
        self._gone: dict[tuple[str, int], bool] = {}  # lease token -> its holder is dead
        self._fencing: set[str] = set()  # incarnations whose fence record is being written
        self._first_look = True
        self._renewals = 0
        self._last_renewal = -1e12  # monotonic start of our newest completed lease write
        #: seconds the newest lease write took (the store's latency, for operators)
        self.lease_write_s = 0.0
        # Lease I/O gets a deadline inside the lease timeout, so a dead connection fails the
        # renewal instead of stalling it; no shorter: a write that completes within the
        # timeout still renews (renewals overlap on a slow store, see write_lease).
        lease_call_ms = min(max(lease_timeout_ms, 1_000), root.store.request_timeout_ms)
        self._store = root.store.with_request_timeout(lease_call_ms)

    def _key(self, broker_id: int) -> str:
        return f"{LEASE_PREFIX}/{broker_id}.json"

    def register(self) -> None:
        """Record this incarnation in the metadata log (again, if it was fenced)."""
        record: BrokerRegisteredRecord = {
            "type": "broker_registered",
            "id": self.broker_id,
            "location": self.location,
            "kafka_address": self.kafka_address,
            "incarnation": self.incarnation,
            "flight_security": self.flight_security,
        }

        def build(image: MetadataImage) -> list[Record] | None:
            return None if self._registered_as_us(image) else [record]

        self.root.metadata.append(build)
        log.info("registered", extra=fields(broker=self.broker_id, incarnation=self.incarnation))

    def _registered_as_us(self, image: MetadataImage) -> bool:
        current = image.broker(self.broker_id)
        return (
            current is not None
            and current["incarnation"] == self.incarnation
            and not current.get("fenced")
        )

    def renew(self) -> dict[int, BrokerInfo]:
        """Write our lease (registering first if we are not, or were fenced) and re-read the
        leases we monitor; return the live set."""
        self.ensure_registered()
        self.write_lease()
        return self.refresh()

    def ensure_registered(self) -> None:
        """Register this incarnation if the metadata log does not hold it (or fenced it)."""
        if not self._registered_as_us(self.root.metadata.image()):
            self.register()

    def write_lease(self) -> None:
        """One renewal: write our lease with the next counter.

        Safe to run several at once (a broker on a slow store keeps writes in
        flight at every interval, so a renewal that takes seconds does not
        stretch the cadence): our health counts from the *start* of the newest
        write that completed, which others can only have seen later.
        """
        with self._lock:
            self._renewals += 1
            renewal = self._renewals
        started = time.monotonic()
        lease = {
            "broker_id": self.broker_id,
            "location": self.location,
            "renewed_ms": self.clock_ms(),
            "lease_timeout_ms": self.lease_timeout_ms,
            "incarnation": self.incarnation,
            "started_ms": self.started_ms,
            "renewal": renewal,
            "kafka_address": self.kafka_address,
        }
        self._store.put(self._key(self.broker_id), json.dumps(lease).encode())
        finished = time.monotonic()
        with self._lock:
            # Others may see the write as late as its start: count from before it.
            self._last_renewal = max(self._last_renewal, started)
            self.lease_write_s = finished - started

    def refresh(self) -> dict[int, BrokerInfo]:
        """Re-read the leases we monitor (without renewing ours); fence the dead ones."""
        image = self.root.metadata.image()
        registered = {int(k): v for k, v in image.brokers.items() if not v.get("fenced")}
        watched = monitored(self.broker_id, registered)
        keys = {b: self._key(b) for b in watched}
        read_started = time.monotonic()
        found = self._store.get_many(keys.values()) if keys else {}
        now_s = time.monotonic()
        # A peer's renewals reach us no faster than our reads: on a store that answers
        # in seconds, wait that much longer before calling a silent peer dead.
        timeout_s = self.lease_timeout_ms / 1000 + min(
            now_s - read_started, self.lease_timeout_ms / 1000
        )
        dead: list[dict[str, Any]] = []
        with self._lock:
            for broker_id in watched:
                entry = registered[broker_id]
                token = (str(entry["incarnation"]), -1)  # no lease file yet: its first renewal
                raw = found.get(keys[broker_id])
                if raw is not None:
                    with contextlib.suppress(ValueError, KeyError, TypeError):
                        doc = json.loads(raw)  # a torn or foreign file counts as unchanged
                        if str(doc.get("incarnation", "")) == entry["incarnation"]:
                            token = (entry["incarnation"], int(doc.get("renewal", 0)))
                seen = self._seen.get(broker_id)
                if seen is None or seen.token != token:
                    # first sight or a renewal: alive as of now, by our clock
                    seen = self._seen[broker_id] = _Seen(token, now_s, _info(entry))
                if now_s - seen.changed_s > timeout_s or self._holder_gone(seen, now_s):
                    dead.append(entry)
            for gone in set(self._seen) - set(watched):
                del self._seen[gone]
            tokens = {s.token for s in self._seen.values()}
            self._gone = {t: gone for t, gone in self._gone.items() if t in tokens}
            self._first_look = False
        for entry in dead:
            # off the lease loop's path: a slow metadata-log write must never delay our own
            # lease (the dead broker is out of our live set at once either way)
            with self._lock:
                starting = entry["incarnation"] not in self._fencing
                self._fencing.add(entry["incarnation"])
            if starting:
                threading.Thread(
                    target=self._fence, args=(entry,), name="fence", daemon=True
                ).start()
        fenced = {int(e["id"]) for e in dead}
        peers = {
            b: _info(e) for b, e in registered.items() if b != self.broker_id and b not in fenced
        }
        with self._lock:
            self._live = peers
        return self.live()

    def _fence(self, entry: dict[str, Any]) -> None:
        """Record that a monitored broker's lease expired (its shards move to survivors)."""
        record: BrokerFencedRecord = {
            "type": "broker_fenced",
            "id": entry["id"],
            "incarnation": entry["incarnation"],
            "by": self.broker_id,
        }

        def build(image: MetadataImage) -> list[Record] | None:
            current = image.broker(int(entry["id"]))
            if current is None or current["incarnation"] != entry["incarnation"]:
                return None  # re-registered or unregistered meanwhile
            return None if current.get("fenced") else [record]

        try:
            self.root.metadata.append(build)
        except SparklogError as exc:
            log.warning("could not fence a dead broker", extra=fields(error=str(exc)[:300]))
            return
        finally:
            with self._lock:
                self._fencing.discard(entry["incarnation"])
        log.info(
            "broker fenced: its lease expired",
            extra=fields(broker=entry["id"], location=entry["location"], by=self.broker_id),
        )

    def _holder_gone(self, seen: _Seen, now_s: float) -> bool:
        """Whether a lease that has not timed out belongs to a broker that is certainly dead.

        Without this a crashed broker's lease keeps its partitions leaderless for
        ``lease_timeout_ms`` and a freshly started broker leads nothing meanwhile.
        Certain means: it listened where we now listen, or (checked once per lease
        renewal, on our first look and once it missed two renewals) its address refuses
        connections.  An address that does not answer at all (a partition, a slow host)
        counts as alive: the lease decides.
        """
        if seen.info.location == self.location:
            return True
        known = self._gone.get(seen.token)
        if known is not None:
            return known
        stale = now_s - seen.changed_s > 2 * self.lease_interval_ms / 1000
        if not self.probe_peers or not (self._first_look or stale):
            return False
        dead = self._gone[seen.token] = _refuses_connections(seen.info.location)
        if dead:
            log.info(
                "lease holder is gone",
                extra=fields(broker=seen.info.broker_id, location=seen.info.location),
            )
        return dead

    @property
    def healthy(self) -> bool:
        """False once our own lease may have expired in others' eyes (we must not lead).

        Counted from the start of our newest completed renewal, plus the time that
        renewal took (at most the lease timeout): a peer that finds our lease
        silent must still write a ``broker_fenced`` record and the new leader an
        epoch bump, each a write on the same slow store, before anyone can lead
        in our place; holding leadership that much longer keeps a broker on a
        slow store from stepping down between two renewals that both succeeded.
        The leader epochs in the shard logs keep even a wrong guess safe.
        """
        timeout_s = self.lease_timeout_ms / 1000
        allowance_s = timeout_s + min(self.lease_write_s, timeout_s)
        return time.monotonic() - self._last_renewal < allowance_s

    def live(self) -> dict[int, BrokerInfo]:
        """The peers live in our last view, and ourselves while our lease holds (checked now,
        not at the last read of the peers: renewals and reads run apart)."""
        with self._lock:
            live = dict(self._live)
        if self.healthy and self._registered_as_us(self.root.metadata.image()):
            live[self.broker_id] = BrokerInfo(
                self.broker_id, self.location, self.clock_ms(), self.kafka_address
            )
        return live

    # -- leadership per shard (docs/architecture.md, "The control plane") ------------------
    # partition p is in shard p mod shards
    def note_shards(self, topic: str, shards: int) -> None:
        """Remember how many shards ``topic`` has (fixed at creation)."""
        with self._lock:
            if self._shards.get(topic, shards) != shards:
                self._shards_changes += 1  # (a first note is what the topic's document says)
            self._shards[topic] = shards

    def forget_topic(self, topic: str) -> None:
        with self._lock:
            if self._shards.pop(topic, None) is not None:
                self._shards_changes += 1

    def _shard_count(self, topic: str) -> int | None:
        """``commit.shards`` of the topic (None if unknown)."""
        shards = self._shards.get(topic)  # (one read of a dict: its writers hold the lock)
        if shards is None:
            try:
                shards = self.root.describe_topic(topic).shards
            except SparklogError:
                return None
            self.note_shards(topic, shards)
        return shards

    def shard_of(self, topic: str, partition: int) -> int:
        """The shard whose leader leads ``partition``."""
        shards = self._shard_count(topic)
        return partition if shards is None else partition % shards  # unknown: any stable answer

    def shard_replicas(self, topic: str, shard: int, at_least: int = 1) -> list[int]:
        """Brokers serving the shard, leader first, then the others in rendezvous order (the
        order they would take it over in): ``replication_factor`` of them, or ``at_least``
        (a topic's replication factor), as many as are live."""
        live = self.live()
        leader = self._shard_leader_id(topic, shard, live)
        if leader is None:
            return []
        rest = sorted(
            (b for b in live if b != leader),
            key=lambda b: rendezvous_weight(topic, shard, b),
            reverse=True,
        )
        return [leader, *rest][: max(self.replication_factor, at_least)]

    def transaction_coordinator(self, transactional_id: str) -> BrokerInfo | None:
        """The live broker that coordinates ``transactional_id`` (as FindCoordinator
        answers: the highest rendezvous weight), or None with no live broker."""
        live = self.live()
        if not live:
            return None
        return live[max(live, key=lambda b: rendezvous_weight(transactional_id, 0, int(b)))]

    def leadership_inputs(self, live: tuple[int, ...]) -> tuple[object, ...]:
        """What :meth:`shard_leader` and :meth:`shard_replicas` answer from besides the
        topic's name and document, given ``live`` (the sorted ids of :meth:`live`): equal
        inputs and documents, the same leaders and replicas.  A topic's shard count is
        its document's unless another was noted, and every change of a noted count is
        counted here.  Defined beside the functions it stands for, so a new input of
        leadership is added to both (the Kafka Metadata answer keeps each topic's encoded
        entry while they hold: ``broker_lite/kafka/metadata.py``, issue 37 item 6)."""
        return (
            live,
            self.replication_factor,
            self.force_leader,
            self.broker_id,
            self._shards_changes,
        )

    def shard_leader(self, topic: str, shard: int) -> BrokerInfo | None:
        live = self.live()
        leader = self._shard_leader_id(topic, shard, live)
        return None if leader is None else live[leader]

    def _shard_leader_id(
        self, topic: str, shard: int, live: Mapping[int, BrokerInfo]
    ) -> int | None:
        if not live:
            return None
        shards = self._shard_count(topic)
        if shards is None or shard >= shards:
            return max(live, key=lambda b: rendezvous_weight(topic, shard, b))
        return leaders_of(topic, shards, tuple(sorted(live)))[shard]

    def replicas(self, topic: str, partition: int) -> list[int]:
        """Brokers serving the partition (its shard's), leader first."""
        return self.shard_replicas(topic, self.shard_of(topic, partition))

    def leader(self, topic: str, partition: int) -> BrokerInfo | None:
        """The leader of the partition's shard."""
        return self.shard_leader(topic, self.shard_of(topic, partition))

    def is_leader(self, topic: str, partition: int) -> bool:
        if self.force_leader:
            return True
        if not self.healthy:
            return False
        leader = self.leader(topic, partition)
        return leader is not None and leader.broker_id == self.broker_id

    def resign(self) -> None:
        """Unregister and delete our lease (graceful shutdown) so survivors take over at
        their next look at the metadata log."""
        record: BrokerUnregisteredRecord = {
            "type": "broker_unregistered",
            "id": self.broker_id,
            "incarnation": self.incarnation,
        }

        def build(image: MetadataImage) -> list[Record] | None:
            current = image.broker(self.broker_id)
            if current is None or current["incarnation"] != self.incarnation:
                return None
            return [record]

        try:
            self.root.metadata.append(build)
            self._store.delete(self._key(self.broker_id))
        except SparklogError as exc:
            log.warning("could not unregister", extra=fields(error=str(exc)))
