"""Online migration between classic and KIP-848 groups, on the coordinator in-process.

Kafka 4's ``group.consumer.migration.policy`` (broker key
``group_consumer_migration_policy``): a ConsumerGroupHeartbeat to a Stable classic
group of Kafka consumers converts it to a consumer group whose classic members keep
their partitions and go on with JoinGroup/SyncGroup/Heartbeat; when the last
consumer-protocol member leaves, the group becomes classic again and rebalances.
Committed offsets are the group's throughout.  The real-client version is in
``tests/kafka/test_compat_kip848.py``.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from sparklog.broker_lite.kafka.groups import encode_assignment, encode_subscription
from sparklog.errors import (
    FencedInstanceIdError,
    GroupIdNotFoundError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)
from sparklog.groups.consumer_groups import Heartbeat
from sparklog.groups.coordinator import GroupCoordinator
from sparklog.storage import open_root
from sparklog.topic_partition import TopicPartition

GROUP = "migrating"


@pytest.fixture
def root(root_spec):
    url, options = root_spec
    open_root(url, options, create=True).create_topic("t", partitions=4)
    return open_root(url, options, metadata_max_staleness_ms=None)


def _coordinator(root, policy: str = "bidirectional") -> GroupCoordinator:
    """An in-memory coordinator (a broker's) whose empty group waits 300 ms for a second
    member, so two concurrent joins make one generation."""
    return GroupCoordinator(
        root,
        in_memory=True,
        min_session_timeout_ms=100,
        initial_rebalance_delay_ms=300,
        poll_ms=10,
        consumer_migration_policy=policy,
    )


def _join(coordinator: GroupCoordinator, member: str = "", owned=None, instance_id=None):
    """A Kafka consumer's JoinGroup (``range``), owning ``owned``, static with ``instance_id``."""
    return coordinator.join_group(
        GROUP,
        member,
        ["t"],
        session_timeout_ms=30_000,
        rebalance_timeout_ms=5_000,
        protocol_metadata={"range": encode_subscription(["t"])},
        protocol_type="consumer",
        owned_partitions=owned,
        group_instance_id=instance_id,
    )


def _classic_pair(coordinator: GroupCoordinator) -> dict[str, list[TopicPartition]]:
    """Two Kafka consumers in a Stable classic group: the leader gives each two partitions."""
    with ThreadPoolExecutor(2) as pool:
        joins = list(pool.map(lambda _: _join(coordinator), range(2)))
    leader = next(j for j in joins if j.leader_id == j.member_id)
    members = sorted(leader.members)
    plan = {
        members[0]: [TopicPartition("t", 0), TopicPartition("t", 1)],
        members[1]: [TopicPartition("t", 2), TopicPartition("t", 3)],
    }
    opaque = {m: encode_assignment(tps) for m, tps in plan.items()}
    coordinator.sync_group_opaque(GROUP, leader.generation, leader.member_id, plan, opaque)
    follower = next(j for j in joins if j is not leader)
    coordinator.sync_group_opaque(GROUP, follower.generation, follower.member_id)
    assert coordinator.group_state(GROUP)["state"] == "Stable"
    return plan


def _beat(coordinator: GroupCoordinator, member: str, epoch: int, owned=()):
    return coordinator.consumer_group_heartbeat(
        GROUP,
        Heartbeat(
            group=GROUP,
            member_id=member,
            member_epoch=epoch,
            rebalance_timeout_ms=5_000,
            topic_names=["t"] if epoch == 0 else None,
            owned=list(owned),
        ),
    )


def _owners(coordinator: GroupCoordinator) -> dict[str, set[tuple[str, int]]]:
    """Each consumer-group member's owned partitions, checked never to overlap."""
    members = coordinator.group_state(GROUP)["consumer"]["members"]
    owned = {m: {(t, p) for t, p in e["assigned"] + e["revoking"]} for m, e in members.items()}
    seen: set[tuple[str, int]] = set()
    for tps in owned.values():
        assert not (tps & seen), owned
        seen |= tps
    return owned


def _rejoin(coordinator: GroupCoordinator, member: str, owned) -> list[TopicPartition]:
    """A cooperative classic member's rejoin and sync: the partitions it may own now."""
    joined = _join(coordinator, member, owned=[(t, p) for t, p in owned])
    assert joined.leader_id == "" and joined.protocol == "range"
    partitions, raw = coordinator.sync_group_opaque(GROUP, joined.generation, member)
    assert raw is None  # the listener encodes a ConsumerProtocolAssignment
    return partitions


def test_upgrade_serve_classic_members_and_downgrade(root):
    coordinator = _coordinator(root)
    plan = _classic_pair(coordinator)
    first, second = sorted(plan)
    generation = coordinator.group_state(GROUP)["generation"]
    coordinator.commit_offsets(GROUP, generation, first, {("t", 0): 7})

    answer = _beat(coordinator, "modern", 0)
    state = coordinator.group_state(GROUP)
    assert state["type"] == "consumer" and state["members"] == {}
    described = coordinator.consumer_group_describe(GROUP)
    assert described["members"][first]["classic"] and not described["members"]["modern"]["classic"]
    assert described["members"][first]["assigned"] == [("t", 0), ("t", 1)]
    assert answer.assignment == []  # every partition is still owned by a classic member
    _owners(coordinator)
    # the classic members are told to rejoin; their old generation still commits
    coordinator.commit_offsets(GROUP, generation, first, {("t", 0): 8})
    for member in (first, second):
        with pytest.raises(RebalanceInProgressError):
            coordinator.heartbeat(GROUP, generation, member)
    # cooperative rejoins: each gives up one partition, then gets its new epoch
    held = {m: [(tp.topic, tp.partition) for tp in plan[m]] for m in plan}
    for _ in range(3):
        for member in (first, second):
            held[member] = [
                (tp.topic, tp.partition) for tp in _rejoin(coordinator, member, held[member])
            ]
            _owners(coordinator)
        modern = _beat(coordinator, "modern", answer.member_epoch, owned=answer.assignment or ())
        answer = modern if modern.assignment is not None else answer
        _owners(coordinator)
    # uniform over three members: 2, 1 and 1 partitions, each owned by one member
    assert answer.assignment is not None
    assert sorted(len(tps) for tps in (held[first], held[second], answer.assignment)) == [1, 1, 2]
    assert {tp for tps in (held[first], held[second], answer.assignment) for tp in tps} == {
        ("t", p) for p in range(4)
    }
    epoch = coordinator.group_state(GROUP)["consumer"]["members"][first]["member_epoch"]
    coordinator.heartbeat(GROUP, epoch, first)  # reconciled: no rebalance
    with pytest.raises(IllegalGenerationError):
        coordinator.heartbeat(GROUP, generation, first)

    # the last consumer-protocol member leaves: classic again, rebalancing
    _beat(coordinator, "modern", -1)
    state = coordinator.group_state(GROUP)
    assert "type" not in state and sorted(state["members"]) == [first, second]
    assert state["state"] == "PreparingRebalance"
    with pytest.raises(RebalanceInProgressError):
        coordinator.heartbeat(GROUP, epoch, first)
    again = _classic_pair_rejoin(coordinator, first, second)
    assert sorted(again) == [first, second]
    assert coordinator.fetch_offsets(GROUP) == {TopicPartition("t", 0): 8}


def _classic_pair_rejoin(coordinator: GroupCoordinator, first: str, second: str) -> list[str]:
    with ThreadPoolExecutor(2) as pool:
        joins = list(pool.map(lambda m: _join(coordinator, m), (first, second)))
    assert len({j.generation for j in joins}) == 1
    return sorted(next(j for j in joins if j.leader_id == j.member_id).members)


def test_a_classic_member_leaves_a_consumer_group(root):
    coordinator = _coordinator(root)
    plan = _classic_pair(coordinator)
    first, second = sorted(plan)
    _beat(coordinator, "modern", 0)
    coordinator.leave_group(GROUP, first)
    members = coordinator.group_state(GROUP)["consumer"]["members"]
    assert sorted(members) == sorted(["modern", second])
    with pytest.raises(UnknownMemberIdError):
        coordinator.heartbeat(GROUP, 0, first)


def test_the_disabled_policy_keeps_them_apart(root):
    coordinator = _coordinator(root, "disabled")
    _classic_pair(coordinator)
    with pytest.raises(GroupIdNotFoundError, match="group_consumer_migration_policy"):
        _beat(coordinator, "modern", 0)
    other = GroupCoordinator(root, in_memory=True, consumer_migration_policy="disabled")
    other.consumer_group_heartbeat(
        "modern-only",
        Heartbeat(
            group="modern-only",
            member_id="m",
            member_epoch=0,
            rebalance_timeout_ms=1,
            topic_names=["t"],
            owned=[],
        ),
    )
    with pytest.raises(InconsistentGroupProtocolError, match="group_consumer_migration_policy"):
        other.join_group(
            "modern-only",
            "",
            ["t"],
            protocol_metadata={"range": encode_subscription(["t"])},
            protocol_type="consumer",
        )


def test_a_rebalancing_classic_group_is_upgraded(root):
    """As Kafka does: the pending sync answers REBALANCE_IN_PROGRESS, the member rejoins
    the consumer group; what it owned is the last completed rebalance's (nothing)."""
    coordinator = _coordinator(root)
    leader = _join(coordinator)  # a Kafka leader that has not synced yet
    assert coordinator.group_state(GROUP)["state"] == "CompletingRebalance"
    answer = _beat(coordinator, "modern", 0)
    assert answer.assignment is not None and len(answer.assignment) == 2  # all were free
    with pytest.raises(RebalanceInProgressError):
        coordinator.sync_group_opaque(GROUP, leader.generation, leader.member_id)
    mine = {(tp.topic, tp.partition) for tp in _rejoin(coordinator, leader.member_id, [])}
    assert mine == {("t", p) for p in range(4)} - set(answer.assignment)
    assert _owners(coordinator) == {leader.member_id: mine, "modern": set(answer.assignment)}


def test_a_static_classic_member_comes_back_under_a_new_id(root):
    """KIP-345 in a consumer group: the same group.instance.id under a new member id takes
    the old member's place and partitions; the old id is fenced."""
    coordinator = _coordinator(root)
    _beat(coordinator, "modern", 0)

    first = _join(coordinator, instance_id="pod-a")
    coordinator.sync_group_opaque(GROUP, first.generation, first.member_id)
    before = coordinator.group_state(GROUP)["consumer"]["members"][first.member_id]
    back = _join(coordinator, instance_id="pod-a")
    assert back.member_id != first.member_id and back.generation == first.generation
    members = coordinator.group_state(GROUP)["consumer"]["members"]
    assert sorted(members) == sorted(["modern", back.member_id])
    assert members[back.member_id]["assigned"] == before["assigned"]
    with pytest.raises(FencedInstanceIdError):
        coordinator.heartbeat(GROUP, first.generation, first.member_id)
