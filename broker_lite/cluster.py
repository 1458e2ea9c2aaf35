"""Cluster membership and partition leadership, derived from leases in the root.

Each broker renews ``cluster/brokers/<id>.json`` every ``lease_interval_ms``.
A broker whose lease is older than ``lease_timeout_ms`` is dead.  The leader of
a partition is the live broker with the highest rendezvous weight
``hash(topic, partition, broker)``, so every broker that sees the same live set
derives the same map with no coordination, and a death moves only the dead
broker's partitions.  Views can disagree briefly (while a lease expires); the
leader epochs in the partition logs make that safe (DESIGN.md §3-4).
"""

from __future__ import annotations

import hashlib
import json
import logging
import socket
import threading
import time
import uuid
from dataclasses import dataclass

from sparklog.broker_lite.logs import fields
from sparklog.storage import LogRoot, StorageError

log = logging.getLogger("sparklog.broker_lite.cluster")
LEASE_PREFIX = "cluster/brokers"


@dataclass(frozen=True)
class BrokerInfo:
    broker_id: int
    location: str  # host:port
    renewed_ms: int


def rendezvous_weight(topic: str, partition: int, broker_id: int) -> int:
    digest = hashlib.blake2b(f"{topic}/{partition}/{broker_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def _now_ms() -> int:
    return int(time.time() * 1000)


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
    ) -> None:
        self.root = root
        self.broker_id = broker_id
        self.location = location
        self.lease_interval_ms = lease_interval_ms
        self.lease_timeout_ms = lease_timeout_ms
        self.replication_factor = replication_factor
        self.force_leader = force_leader
        self.incarnation = uuid.uuid4().hex
        self.started_ms = _now_ms()
        self._lock = threading.Lock()
        self._live: dict[int, BrokerInfo] = {}
        self._last_renewal = 0.0  # monotonic time of our last successful lease write
        self._gone: set[tuple[int, int]] = set()  # (broker id, renewed_ms) of dead holders
        self._first_look = True

    def _key(self, broker_id: int) -> str:
        return f"{LEASE_PREFIX}/{broker_id}.json"

    def renew(self) -> dict[int, BrokerInfo]:
        """Write our lease and re-read everyone's; return the live set."""
        now = _now_ms()
        lease = {
            "broker_id": self.broker_id,
            "location": self.location,
            "renewed_ms": now,
            "lease_timeout_ms": self.lease_timeout_ms,
            "incarnation": self.incarnation,
            "started_ms": self.started_ms,
        }
        self.root.store.put(self._key(self.broker_id), json.dumps(lease).encode())
        self._last_renewal = time.monotonic()
        return self.refresh()

    def refresh(self) -> dict[int, BrokerInfo]:
        """Re-read the leases (without renewing ours)."""
        names = self.root.store.list_names(LEASE_PREFIX)
        keys = [f"{LEASE_PREFIX}/{n}" for n in names if n.endswith(".json")]
        found = self.root.store.get_many(keys)
        now = _now_ms()
        live: dict[int, BrokerInfo] = {}
        for raw in found.values():
            if raw is None:
                continue
            try:
                doc = json.loads(raw)
                info = BrokerInfo(
                    int(doc["broker_id"]), str(doc["location"]), int(doc["renewed_ms"])
                )
            except (ValueError, KeyError, TypeError):
                continue  # a torn or foreign file: ignore it
            if now - info.renewed_ms <= self.lease_timeout_ms and not self._holder_gone(info, now):
                live[info.broker_id] = info
        self._first_look = False
        self._gone = {g for g in self._gone if now - g[1] <= self.lease_timeout_ms}
        if self.healthy:
            live.setdefault(self.broker_id, BrokerInfo(self.broker_id, self.location, now))
        with self._lock:
            self._live = live
        return live

    def _holder_gone(self, info: BrokerInfo, now: int) -> bool:
        """Whether an unexpired lease's broker is certainly dead, so its partitions move now.

        Without this a crashed broker's lease keeps its partitions leaderless for up to
        ``lease_timeout_ms`` and a freshly started broker leads nothing meanwhile.  Certain
        means: it listened where we now listen, or (checked on our first look and once it
        missed two renewals) its address refuses connections.  An address that does not
        answer at all (a partition, a slow host) counts as alive: the lease decides.
        """
        if info.broker_id == self.broker_id:
            return False
        if info.location == self.location:
            return True
        key = (info.broker_id, info.renewed_ms)
        if key in self._gone:
            return True
        if not self._first_look and now - info.renewed_ms <= 2 * self.lease_interval_ms:
            return False
        if _refuses_connections(info.location):
            self._gone.add(key)
            log.info(
                "lease holder is gone", extra=fields(broker=info.broker_id, location=info.location)
            )
            return True
        return False

    @property
    def healthy(self) -> bool:
        """False once our own lease may have expired in others' eyes (we must not lead)."""
        return (time.monotonic() - self._last_renewal) * 1000 < self.lease_timeout_ms

    def live(self) -> dict[int, BrokerInfo]:
        with self._lock:
            return dict(self._live)

    def replicas(self, topic: str, partition: int) -> list[int]:
        """Brokers serving the partition, leader first (rendezvous order)."""
        ids = sorted(
            self.live(), key=lambda b: rendezvous_weight(topic, partition, b), reverse=True
        )
        return ids[: self.replication_factor]

    def leader(self, topic: str, partition: int) -> BrokerInfo | None:
        live = self.live()
        if not live:
            return None
        best = max(live, key=lambda b: rendezvous_weight(topic, partition, b))
        return live[best]

    def is_leader(self, topic: str, partition: int) -> bool:
        if self.force_leader:
            return True
        if not self.healthy:
            return False
        leader = self.leader(topic, partition)
        return leader is not None and leader.broker_id == self.broker_id

    def resign(self) -> None:
        """Delete our lease (graceful shutdown) so survivors take over at once."""
        try:
            self.root.store.delete(self._key(self.broker_id))
        except StorageError as exc:
            log.warning("could not delete lease", extra=fields(error=str(exc)))
