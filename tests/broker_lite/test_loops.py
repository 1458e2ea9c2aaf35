"""A broker's loops cannot block each other (issue 36 item 2).

Leases, the metadata image and leadership run on their own loop; group sweeps,
topic reloads and the lag metric run elsewhere, and lag reads each shard once
(led shards from memory), never a fresh log per group and partition.  The store
is made slow for one broker's reads of topic data only (a store far away, as S3
is): its lease and metadata reads keep their speed, as they did in the issue's
S3 runs, where the lag sweep's many reads made it slow.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from sparklog.broker_lite.cluster import rendezvous_weight
from sparklog.client.transports.flight_client import BrokerClient
from sparklog.protocol import actions
from sparklog.storage import make_batch
from sparklog.storage.objectstore import ObjectStore
from tests.chaos.inproc import inproc_broker
from tests.support.brokers import Cluster
from tests.support.waiting import wait_for

#: every ObjectStore call that reads
READS = ("get", "get_or_none", "get_buffer", "get_range", "get_tail", "get_many", "exists")
INTERVALS = {"lease_interval_ms": 200, "lease_timeout_ms": 3_000, "metadata_refresh_ms": 200}


class TopicReads:
    """Reads of topic data through the root URL ``url``: counted per thread, each
    answered after ``delay_s`` once :attr:`delay_s` is set (a slow store)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, url: str) -> None:
        self.prefix = url.rstrip("/") + "/topics/"
        self.delay_s = 0.0
        self.by_thread: dict[int, int] = {}
        self._lock = threading.Lock()
        for name in READS:
            monkeypatch.setattr(ObjectStore, name, self._counted(getattr(ObjectStore, name)))

    def _counted(self, call: Callable[..., Any]) -> Callable[..., Any]:
        def counted(store: ObjectStore, *args: Any, **kwargs: Any) -> Any:
            if (store.url + "/").startswith(self.prefix):
                with self._lock:
                    ident = threading.get_ident()
                    self.by_thread[ident] = self.by_thread.get(ident, 0) + 1
                if self.delay_s:
                    time.sleep(self.delay_s)  # the store's latency, not a synchronisation
            return call(store, *args, **kwargs)

        return counted

    @property
    def total(self) -> int:
        return sum(self.by_thread.values())

    def of_this_thread(self) -> int:
        return self.by_thread.get(threading.get_ident(), 0)


def coordinated_by(broker_id: int, brokers: list[int], count: int) -> list[str]:
    """``count`` group ids whose coordinator among ``brokers`` is ``broker_id``."""
    names = (f"g{i}" for i in range(10_000))
    return [
        g for g in names if max(brokers, key=lambda b: rendezvous_weight(g, 0, b)) == broker_id
    ][:count]


def leaders(client: BrokerClient, topic: str) -> set[int]:
    return {p.leader_id for p in client.metadata([topic])[topic].partitions}


@pytest.mark.slow
def test_failover_within_two_lease_timeouts_while_a_slow_lag_pass_runs(
    tmp_path, monkeypatch
) -> None:
    """Broker 1 coordinates 12 groups with offsets committed on 6 partitions and reads
    topic data from a slow store.  Broker 3 is SIGKILLed; broker 2 (which watches it)
    fences it, and broker 1 learns that only from the metadata log: its Metadata must
    stop naming broker 3 within two lease timeouts.  Before, its lag sweep opened a
    fresh shard log per group x partition (about 30 s here) on the thread that also
    refreshed the metadata image, so Metadata named the dead broker for that long."""
    (tmp_path / "root").mkdir()
    (tmp_path / "slow").symlink_to(tmp_path / "root")
    shared, slow_url = f"file://{tmp_path}/root", f"file://{tmp_path}/slow"
    reads = TopicReads(monkeypatch, slow_url)
    cluster = Cluster(tmp_path, shared)
    try:
        with inproc_broker(slow_url, broker_id=1, **INTERVALS) as (server, location):
            cluster.start(2, **INTERVALS)
            cluster.start(3, **INTERVALS)
            with BrokerClient(location, discover=False) as client:
                wait_for(
                    lambda: len(client.call(actions.DESCRIBE_CLUSTER)["brokers"]) == 3, 60, "3 live"
                )
                client.create_topic("t", 6)
                wait_for(lambda: leaders(client, "t") == {1, 2, 3}, 60, "a shard per broker")
                for group in coordinated_by(1, [1, 2, 3], 12):
                    server.broker.groups.commit_offsets(
                        group, -1, "", {("t", p): 0 for p in range(6)}
                    )
                reads.delay_s = 0.1
                before = reads.total
                wait_for(lambda: reads.total > before + 5, 60, "broker 1 reading topic data")

                cluster.kill(3)
                killed = time.monotonic()
                timeout_s = 2 * INTERVALS["lease_timeout_ms"] / 1000
                wait_for(
                    lambda: 3 not in leaders(client, "t"),
                    timeout_s,
                    "broker 1's Metadata to name new leaders for broker 3's partitions",
                )
                took = time.monotonic() - killed
                assert leaders(client, "t") <= {1, 2}
                reads.delay_s = 0.0  # a quick stop
        print(f"failover seen by broker 1 after {took:.1f}s")
    finally:
        reads.delay_s = 0.0
        cluster.stop()


def test_describe_group_lag_reads_each_shard_once_and_is_exact(tmp_path, monkeypatch) -> None:
    """A group with offsets on 8 partitions of two shards: its describe answers exact lag
    from the leader's memory and reads each shard at most twice (before: a fresh log per
    partition, several reads each)."""
    url = f"file://{tmp_path}/root"
    reads = TopicReads(monkeypatch, url)
    with inproc_broker(url, broker_id=1) as (server, location):
        broker = server.broker
        broker.create_topic("t", 8, {"commit.shards": 2})
        for p in range(8):
            broker.produce("t", [(p, make_batch([b"x"] * (p + 3)))])
        broker.groups.commit_offsets("g", -1, "", {("t", p): p for p in range(8)})
        before = reads.of_this_thread()
        described = broker.groups.describe_group("g")
        made = reads.of_this_thread() - before
        lags = {e["partition"]: (e["high_watermark"], e["lag"]) for e in described["offsets"]}
        assert lags == {p: (p + 3, 3) for p in range(8)}
        assert made <= 2 * 2, made
        with BrokerClient(location) as client:  # the CLI's path: the Flight action
            offsets = client.call(actions.DESCRIBE_GROUP, group="g")["offsets"]
            assert {e["partition"]: e["lag"] for e in offsets} == {p: 3 for p in range(8)}
