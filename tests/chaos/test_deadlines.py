"""Every object-store call has a deadline; leases survive store faults (issue 15, item 1)."""

from __future__ import annotations

import time

import pytest

from sparklog.broker_lite.cluster import Cluster
from sparklog.client.transports.flight_client import BrokerClient
from sparklog.clock import now_ms
from sparklog.errors import (
    CommitStateUnknownError,
    NotLeaderOrFollowerError,
    StoreUnavailableError,
)
from sparklog.storage import make_batch, open_root
from sparklog.storage.objectstore import ObjectStore
from tests.chaos.conftest import ProxiedS3
from tests.chaos.inproc import inproc_broker
from tests.support.waiting import wait_for


def test_black_holed_calls_end_at_their_deadline(proxied_s3: ProxiedS3) -> None:
    store = ObjectStore(proxied_s3.root, proxied_s3.storage_options(request_timeout_ms=1_000))
    assert store.create("a", b"1")
    proxied_s3.proxy.set("blackhole")
    started = time.monotonic()
    with pytest.raises(CommitStateUnknownError) as created:
        store.create("b", b"2")
    with pytest.raises(StoreUnavailableError):
        store.get("a")
    with pytest.raises(StoreUnavailableError):
        store.list_names("")
    # three calls, each bounded by its 1 s deadline (plus fsspec's 1 s polling grain)
    assert time.monotonic() - started < 12
    assert "may or may not have been created" in str(created.value)
    proxied_s3.proxy.heal()
    assert store.get("a") == b"1"


def test_reset_connections_are_retriable_outages(proxied_s3: ProxiedS3) -> None:
    store = ObjectStore(proxied_s3.root, proxied_s3.storage_options(request_timeout_ms=1_000))
    assert store.create("a", b"1")
    proxied_s3.proxy.set("reset")
    with pytest.raises(StoreUnavailableError) as info:
        store.get("a")
    assert info.value.retriable
    proxied_s3.proxy.heal()
    assert store.get("a") == b"1"


def test_request_timeout_option_is_checked() -> None:
    with pytest.raises(ValueError, match="request_timeout_ms"):
        ObjectStore("memory://x", {"request_timeout_ms": "soon"})


def test_commit_deadline_option_is_checked_and_reaches_every_metadata_log(tmp_path) -> None:
    with pytest.raises(ValueError, match="commit_deadline_ms"):
        ObjectStore("memory://x", {"commit_deadline_ms": "0"})
    root = open_root(f"file://{tmp_path}/root", {"commit_deadline_ms": "1500"})
    root.create_topic("t", 1)
    assert root.metadata.log.commit_deadline_ms == 1500
    assert root.topic("t").shard(0).commit_deadline_ms == 1500
    assert root.groups.log("g")[0].commit_deadline_ms == 1500
    assert open_root(f"file://{tmp_path}/root", {}).metadata.log.commit_deadline_ms == 120_000


def test_lease_ignores_peer_wall_clocks(tmp_path) -> None:
    """A peer whose clock runs 6 s behind is live as long as its lease keeps changing."""
    root = open_root(f"file://{tmp_path}/root")
    ours = Cluster(root, 1, "127.0.0.1:1", lease_interval_ms=100, lease_timeout_ms=2_000)
    skewed = Cluster(
        root,
        2,
        "127.0.0.1:2",
        lease_interval_ms=100,
        lease_timeout_ms=2_000,
        clock_ms=lambda: now_ms() - 6_000,
    )
    for _ in range(3):
        skewed.renew()
        ours.renew()
        assert sorted(ours.live()) == [1, 2]
        assert sorted(skewed.refresh()) == [1, 2]


def test_peer_that_stops_renewing_expires_by_our_clock(tmp_path) -> None:
    root = open_root(f"file://{tmp_path}/root")
    ours = Cluster(root, 1, "127.0.0.1:1", lease_interval_ms=100, lease_timeout_ms=300)
    peer = Cluster(root, 2, "127.0.0.1:2", lease_interval_ms=100, lease_timeout_ms=300)
    peer.renew()
    assert sorted(ours.renew()) == [1, 2]
    # the peer's lease file stays, unchanged: after the timeout (our clock) it is dead
    seen = ours._seen[2]
    seen.changed_s -= 1.0  # as if observed a second ago, without waiting a second
    assert sorted(ours.renew()) == [1]


def test_broker_without_lease_never_names_itself(tmp_path) -> None:
    root = open_root(f"file://{tmp_path}/root")
    ours = Cluster(root, 1, "127.0.0.1:1", lease_interval_ms=100, lease_timeout_ms=300)
    peer = Cluster(root, 2, "127.0.0.1:2", lease_interval_ms=100, lease_timeout_ms=300)
    peer.renew()
    ours.renew()
    ours._last_renewal -= 1.0  # our renewals failed for longer than the lease timeout
    assert not ours.healthy
    for p in range(20):
        leader = ours.leader("t", p)
        assert leader is not None and leader.broker_id == 2
        assert not ours.is_leader("t", p)


def test_broker_whose_store_is_gone_says_it_lost_its_lease(proxied_s3: ProxiedS3) -> None:
    """Storage black-holed: the broker's lease lapses; it refuses, naming no leader, not itself;
    once the store is back it renews and serves again (no call hangs past its deadline)."""
    options = proxied_s3.storage_options(request_timeout_ms=2_000)
    with (
        inproc_broker(
            proxied_s3.root,
            storage_options=options,
            lease_interval_ms=200,
            lease_timeout_ms=1_500,
            broker_id=7,
        ) as (server, loc),
        BrokerClient(loc, retry_timeout_ms=0) as client,
    ):
        client.create_topic("t", 1)
        assert client.produce("t", 0, make_batch([b"a"])).base_offset == 0
        registry = server.broker.metrics.registry

        def shards(state: str) -> float | None:
            return registry.get_sample_value("sparklog_leadership_shards", {"state": state})

        # the leadership pass has counted the new topic's shard (CI at load once black-holed
        # the store before it ran: the broker then led nothing it knew of)
        wait_for(lambda: shards("leading") == 1, 30, "the shard counted as led")
        proxied_s3.proxy.set("blackhole")
        cluster = server.broker.cluster
        assert cluster is not None
        wait_for(lambda: not cluster.healthy, 30, "the lease to lapse")

        # the operator can see why: the shard it led is held back by its stale lease
        wait_for(lambda: shards("lease_stale") == 1 and shards("leading") == 0, 30, "the metric")
        with pytest.raises(NotLeaderOrFollowerError) as info:
            server.broker.produce("t", [(0, make_batch([b"b"]))])
        assert "lost its lease" in str(info.value)
        assert info.value.details["leader_id"] != 7
        proxied_s3.proxy.heal()
        wait_for(lambda: cluster.healthy, 30, "the lease renewed after the store came back")
        assert client.produce("t", 0, make_batch([b"c"])).base_offset == 1
