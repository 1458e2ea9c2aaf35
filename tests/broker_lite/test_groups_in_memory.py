"""A broker's group coordinator holds its groups in memory (the control plane's groups).

Heartbeats cost no storage request and an offset commit one create; what a new
coordinator needs (generations with their assignments, offsets) is in the root,
so a coordinator's death loses no assignment and no committed offset.  Request
counts go through ``tests/support/counting_store.RequestCounter``.
"""

from __future__ import annotations

import pytest

from sparklog.errors import NotCoordinatorError
from sparklog.groups.coordinator import GroupCoordinator
from sparklog.storage import open_root
from sparklog.topic_partition import TopicPartition
from tests.support.counting_store import RequestCounter
from tests.support.waiting import wait_for


@pytest.fixture
def root(root_spec):
    """A root opened as a broker opens it: topic metadata answered from memory."""
    url, options = root_spec
    open_root(url, options, create=True).create_topic("t", partitions=4)
    return open_root(url, options, metadata_max_staleness_ms=None)


def _reopened(root):
    """The root as another broker (the next coordinator) opens it."""
    return open_root(root.url, root.store.storage_options, metadata_max_staleness_ms=None)


def _coordinator(root) -> GroupCoordinator:
    return GroupCoordinator(root, in_memory=True, min_session_timeout_ms=100, poll_ms=10)


def _stable_member(coordinator: GroupCoordinator, session_timeout_ms: int = 30_000):
    joined = coordinator.join_group(
        "g", "", ["t"], session_timeout_ms=session_timeout_ms, rebalance_timeout_ms=5_000
    )
    assigned = coordinator.sync_group("g", joined.generation, joined.member_id)
    return joined, assigned


def test_heartbeats_cost_nothing_and_an_offset_commit_one_create(root):
    coordinator = _coordinator(root)
    joined, assigned = _stable_member(coordinator)
    assert sorted(assigned) == [TopicPartition("t", p) for p in range(4)]
    coordinator.commit_offsets("g", joined.generation, joined.member_id, {("t", 0): 1})
    counter = RequestCounter(root.store)
    for _ in range(50):
        coordinator.heartbeat("g", joined.generation, joined.member_id)
    assert counter.total == 0
    for offset in range(2, 12):
        coordinator.commit_offsets("g", joined.generation, joined.member_id, {("t", 0): offset})
    assert dict(counter.counts) == {"PUT": 10}
    assert (
        open_root(root.url, root.store.storage_options)
        .groups.fetch("g")[TopicPartition("t", 0)]
        .offset
        == 11
    )


def test_a_new_coordinator_restores_the_group_and_its_members_carry_on(root):
    first = _coordinator(root)
    joined, assigned = _stable_member(first)
    first.commit_offsets("g", joined.generation, joined.member_id, {("t", 2): 7})
    # the first coordinator's broker dies; another broker takes the group over
    second = _coordinator(_reopened(root))
    second.heartbeat("g", joined.generation, joined.member_id)  # no rebalance needed
    state = second.group_state("g")
    assert state["generation"] == joined.generation and state["state"] == "Stable"
    assert sorted(map(tuple, state["assignment"][joined.member_id])) == sorted(assigned)
    assert second.fetch_offsets("g") == {TopicPartition("t", 2): 7}
    second.commit_offsets("g", joined.generation, joined.member_id, {("t", 2): 8})
    assert second.fetch_offsets("g") == {TopicPartition("t", 2): 8}


def test_restored_members_that_never_come_back_expire_after_their_session(root):
    first = _coordinator(root)
    joined, _ = _stable_member(first, session_timeout_ms=1_000)
    second = _coordinator(_reopened(root))
    assert joined.member_id in second.group_state("g")["members"]  # one session to return
    wait_for(lambda: not second.group_state("g")["members"], 30, "the silent member to expire")
    assert second.group_state("g")["state"] == "Empty"


def test_a_crashed_member_does_not_stall_a_rebalance_a_newcomer_started(root):
    """B crashes (no leave), C joins before B's session ends: B is expelled after its
    session timeout in PreparingRebalance too, so A and C settle long before the
    60 s rebalance timeout (before: the group waited out B's rebalance timeout)."""
    from tests.broker_lite.members import Member, wait_stable

    coordinator = _coordinator(root)
    timeouts = {"session_timeout_ms": 1_000, "rebalance_timeout_ms": 60_000}
    a = Member(coordinator, "g", ["t"], **timeouts).start()
    b = Member(coordinator, "g", ["t"], **timeouts).start()
    try:
        wait_stable([a, b], 4)
        b.stop(leave=False)  # SIGKILL: no LeaveGroup, no more heartbeats
        c = Member(coordinator, "g", ["t"], **timeouts).start()
        try:
            wait_stable([a, c], 4, timeout_s=20)
            assert b.member_id not in coordinator.group_state("g")["members"]
        finally:
            c.stop()
    finally:
        a.stop()


def test_a_followers_sync_is_parked_until_the_leader_syncs(root):
    """A broker's coordinator parks a waiting join or follower sync (issue 36 item 4):
    the call returns a pending future at once, answered by the change that completes
    it, with no thread waiting meanwhile."""
    coordinator = _coordinator(root)
    leader, _ = _stable_member(coordinator)
    follower_join = coordinator.join_group_parked(
        "g", "", ["t"], session_timeout_ms=30_000, rebalance_timeout_ms=30_000
    )
    assert not follower_join.done()  # waits for the leader to join again
    assert coordinator.parked() == 1
    leader_join = coordinator.join_group_parked(
        "g", leader.member_id, ["t"], session_timeout_ms=30_000, rebalance_timeout_ms=30_000
    )
    assert leader_join.done() and follower_join.done()  # the leader's join completed both
    generation = leader_join.result().generation
    assert follower_join.result().generation == generation == leader.generation + 1
    follower = follower_join.result().member_id
    synced = coordinator.sync_group_parked("g", generation, follower)
    assert not synced.done()  # waits for the leader's sync
    coordinator.sync_group("g", generation, leader.member_id)
    assert synced.done() and coordinator.parked() == 0
    mine, raw = synced.result()
    assert raw is None and len(mine) == 2  # the coordinator's range assignment: 2 of 4


def test_a_group_taken_over_answers_its_parked_joins_not_coordinator(root):
    coordinator = _coordinator(root)
    _stable_member(coordinator)
    waiting = coordinator.join_group_parked(
        "g", "", ["t"], session_timeout_ms=30_000, rebalance_timeout_ms=30_000
    )
    assert not waiting.done()
    coordinator.forget("g")  # another broker coordinates the group now
    with pytest.raises(NotCoordinatorError):
        waiting.result(timeout=0)
    assert coordinator.parked() == 0


def test_a_closed_coordinator_answers_its_parked_joins_not_coordinator(root):
    coordinator = _coordinator(root)
    _stable_member(coordinator)
    waiting = coordinator.join_group_parked(
        "g", "", ["t"], session_timeout_ms=30_000, rebalance_timeout_ms=30_000
    )
    coordinator.close()  # the broker stops: no caller is left waiting
    with pytest.raises(NotCoordinatorError):
        waiting.result(timeout=0)
