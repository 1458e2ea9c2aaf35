"""Several real brokers on one root: failover under SIGKILL, split brain, consumer groups."""

from __future__ import annotations

import threading
import time

import pyarrow as pa
import pytest

from sparklog.client.transports.flight import BrokerBackend
from sparklog.client.transports.flight_client import BrokerClient
from sparklog.errors import IllegalGenerationError, SparklogError
from sparklog.protocol import actions
from sparklog.storage import make_batch, open_root
from tests.broker_lite.members import Member, wait_stable


def read_partition(root: str | tuple[str, dict], topic: str, partition: int) -> pa.Table:
    url, options = (root, {}) if isinstance(root, str) else root
    return open_root(url, options).topic(topic).partition(partition).read(0)


def wait_for(condition, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def lease_holder(url: str, topic: str, partition: int) -> int | None:
    """The broker whose journal leases ``partition``'s shard (the one writing it)."""
    handle = open_root(url).topic(topic)
    ref = handle.shard(handle.info.shard_of(partition)).refresh().journal
    return None if ref is None else ref.broker


def metadata_leader(admin: BrokerClient) -> int:
    admin._meta.clear()
    return int(admin.metadata(["f"])["f"].partitions[0].leader_id)


@pytest.mark.slow
def test_failover_sigkill_leader_acked_records_read_back_exactly_once(file_root, cluster_on):
    cluster = cluster_on(file_root)
    for broker_id in range(3):
        cluster.start(broker_id, replication_factor=2)  # a warm follower per partition
    admin = BrokerClient(cluster.bootstrap)
    admin.create_topic("f", 2)
    assert all(len(p.replicas) == 2 for p in admin.metadata(["f"])["f"].partitions)
    client = BrokerClient(cluster.bootstrap, retry_timeout_ms=30_000)
    pid, epoch = client.call(actions.INIT_PRODUCER_ID)
    acked: dict[int, list[tuple[int, list[bytes]]]] = {0: [], 1: []}
    errors: list[BaseException] = []
    stop = threading.Event()

    def produce() -> None:
        sequence = {0: 0, 1: 0}
        i = 0
        while not stop.is_set():
            p = i % 2
            values = [f"{p}-{sequence[p] + j}".encode() for j in range(3)]
            try:
                result = client.produce(
                    "f",
                    p,
                    make_batch(values),
                    producer_id=pid,
                    producer_epoch=epoch,
                    base_sequence=sequence[p],
                )
            except SparklogError as exc:
                errors.append(exc)
                return
            acked[p].append((result.base_offset, values))
            sequence[p] += 3
            i += 1

    def acked_count() -> int:
        return sum(len(v) for v in acked.values())

    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    try:
        for _ in range(3):
            start = acked_count()
            wait_for(lambda s=start: acked_count() >= s + 10, 30, "producing to make progress")
            # the broker writing partition 0 now (its shard's lease names its journal), once
            # the brokers' metadata names it too: after a restart leadership moves back, and
            # killing a broker it has just left would move nothing
            wait_for(
                lambda: metadata_leader(admin) == lease_holder(file_root[0], "f", 0),
                30,
                "the metadata to name the broker that writes partition 0",
            )
            leader = lease_holder(file_root[0], "f", 0)
            cluster.brokers[leader].kill()
            killed_at = acked_count()
            # producing resumes (through a new leader) within a bounded time
            wait_for(lambda k=killed_at: acked_count() >= k + 10, 30, "producing to resume")
            cluster.restart(leader)
    finally:
        stop.set()
        producer.join(timeout=60)
    assert not errors
    # each kill moved partition 0 to a new leader, which bumped the epoch
    assert open_root(file_root[0]).topic("f").partition(0).leader_epoch >= 4
    for p in (0, 1):
        table = read_partition(file_root[0], "f", p)
        expected = [v for _, values in acked[p] for v in values]
        assert table.column("value").to_pylist() == expected  # exactly once, in order
        for base, values in acked[p]:
            assert table.column("value")[base : base + len(values)].to_pylist() == values
    client.close()
    admin.close()


@pytest.mark.slow
def test_split_brain_two_forced_leaders_assign_no_offset_twice(any_root, cluster_on):
    cluster = cluster_on(any_root)
    brokers = [cluster.start(i, force_leader=True) for i in range(2)]
    with BrokerClient(brokers[0].location) as admin:
        admin.create_topic("sb", 1)
    acked: dict[int, list[tuple[int, list[bytes]]]] = {0: [], 1: []}
    errors: list[BaseException] = []

    def produce(worker: int) -> None:
        # pinned to one broker, which claims to lead the partition
        with BrokerClient(brokers[worker].location, discover=False) as client:
            for i in range(40):
                values = [f"{worker}-{i}-{j}".encode() for j in range(2)]
                try:
                    result = client.produce("sb", 0, make_batch(values))
                except SparklogError as exc:
                    errors.append(exc)
                    continue
                acked[worker].append((result.base_offset, values))

    threads = [threading.Thread(target=produce, args=(w,)) for w in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    table = read_partition(any_root, "sb", 0)
    values = table.column("value").to_pylist()
    assert table.column("offset").to_pylist() == list(range(len(values)))
    assert len(values) == len(set(values)), "a record was committed twice"
    for worker in (0, 1):
        for base, sent in acked[worker]:
            assert values[base : base + len(sent)] == sent, "an acknowledged record is lost"
    assert sum(len(v) for v in acked.values()) >= 40  # both made progress despite fencing
    log = open_root(*any_root).topic("sb").partition(0)
    assert log.leader_epoch >= 2  # both brokers took leadership, and fenced each other
    for b in brokers:
        assert b.alive


@pytest.mark.slow
def test_groups_split_partitions_rebalance_and_offsets_survive_restart(file_root, cluster_on):
    cluster = cluster_on(file_root)
    brokers = [cluster.start(i) for i in range(3)]
    with BrokerClient(cluster.bootstrap) as admin:
        admin.create_topic("g6", 6)
    # each member starts at its own broker (the client's group calls find the coordinator)
    backends = [BrokerBackend(b.location) for b in brokers]
    clients = [backend.client for backend in backends]
    members = [
        Member(backends[i], "grp", ["g6"], session_timeout_ms=3000, rebalance_timeout_ms=3000)
        for i in range(3)
    ]
    for m in members:
        m.start()
    try:
        generation = wait_stable(members, 6)
        assert sorted(len(m.assignment) for m in members) == [2, 2, 2]
        leaver, *rest = members
        gone = set(leaver.assignment)
        leaver.stop(leave=True)
        new_generation = wait_stable(rest, 6)
        assert new_generation > generation
        assert gone <= {tp for m in rest for tp in m.assignment}  # its partitions moved
        with pytest.raises(IllegalGenerationError):
            clients[1].call(
                actions.COMMIT_OFFSETS,
                group="grp",
                generation=generation,
                member_id=rest[0].member_id,
                offsets=[["g6", 0, 1]],
            )
        committed = {("g6", p): 10 + p for p in range(6)}
        clients[1].call(
            actions.COMMIT_OFFSETS,
            group="grp",
            generation=new_generation,
            member_id=rest[0].member_id,
            offsets=[[t, p, o] for (t, p), o in committed.items()],
        )
        desc = clients[2].call(actions.DESCRIBE_GROUP, group="grp")
        assert desc["state"] == "Stable" and len(desc["members"]) == 2
        assert not [e for m in members for e in m.errors]
    finally:
        for m in members:
            m.stop(leave=True)
        for backend in backends:
            backend.close()
    for broker_id in list(cluster.brokers):
        assert cluster.brokers[broker_id].terminate() == 0
    for broker_id in list(cluster.brokers):
        cluster.restart(broker_id)
    with BrokerClient(cluster.bootstrap) as client:
        found = client.call(actions.FETCH_OFFSETS, group="grp")
        assert {tp: offset for tp, (offset, _) in found.items()} == committed
        assert "grp" in client.call(actions.LIST_GROUPS)
