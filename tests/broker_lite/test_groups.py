"""GroupCoordinator in-process (the embedded path): joins, assignors, timeouts, commits."""

from __future__ import annotations

import pytest

from sparklog.errors import (
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    InvalidConfigError,
    UnknownMemberError,
)
from sparklog.groups.assignors import range_assign, roundrobin_assign, sticky_assign
from sparklog.groups.coordinator import GroupCoordinator
from sparklog.storage import open_root
from tests.broker_lite.members import Member, wait_stable
from tests.support.counting_store import RequestCounter


@pytest.fixture
def root(tmp_path):
    r = open_root(f"file://{tmp_path}/root")
    r.create_topic("t", partitions=6)
    r.create_topic("u", partitions=3)
    return r


def coordinator(root, **kw) -> GroupCoordinator:
    kw.setdefault("min_session_timeout_ms", 100)
    kw.setdefault("poll_ms", 10)
    return GroupCoordinator(root, **kw)


def test_three_members_split_six_partitions_and_rebalance_on_leave(root):
    coords = [coordinator(root) for _ in range(3)]
    members = [Member(coords[i], "g", ["t"]).start() for i in range(3)]
    try:
        generation = wait_stable(members, 6)
        assert all(len(m.assignment) == 2 for m in members)
        leaver, *stay = members
        old_id = leaver.member_id
        leaver.stop(leave=True)
        new_generation = wait_stable(stay, 6)
        assert new_generation > generation
        moved = {tp for m in stay for tp in m.assignment}
        assert moved == {("t", p) for p in range(6)}
        # the old generation can no longer commit; the current one can
        with pytest.raises(IllegalGenerationError):
            coords[1].commit_offsets("g", generation, stay[0].member_id, {("t", 0): 5})
        coords[1].commit_offsets("g", new_generation, stay[0].member_id, {("t", 0): 5})
        assert coords[2].fetch_offsets("g") == {("t", 0): 5}
        with pytest.raises(UnknownMemberError):
            coords[1].commit_offsets("g", new_generation, old_id, {("t", 1): 1})
        assert not [e for m in members for e in m.errors]
    finally:
        for m in members:
            m.stop(leave=False)


def test_zombie_commit_past_a_stale_membership_check_is_refused_by_the_group_log(root, monkeypatch):
    """The group's log checks the generation in the same create-only step that writes."""
    coords = [coordinator(root), coordinator(root)]
    members = [Member(coords[0], "g", ["t"]).start()]
    try:
        generation = wait_stable(members, 6)
        zombie_id = members[0].member_id
        coords[0].commit_offsets("g", generation, zombie_id, {("t", 0): 3})
        members.append(Member(coords[1], "g", ["t"]).start())
        new_generation = wait_stable(members, 6)
        assert new_generation > generation
        assert open_root(root.url).groups.generation("g") >= new_generation
        # the zombie's membership check passed before the rebalance (check-then-write)
        monkeypatch.setattr(GroupCoordinator, "_check_generation", lambda *args: None)
        with pytest.raises(IllegalGenerationError):
            coords[0].commit_offsets("g", generation, zombie_id, {("t", 0): 99})
        assert coords[1].fetch_offsets("g") == {("t", 0): 3}
    finally:
        for m in members:
            m.stop(leave=False)


def test_silent_member_is_expelled_after_session_timeout(root):
    coords = [coordinator(root), coordinator(root)]
    members = [Member(c, "g", ["t"], session_timeout_ms=300).start() for c in coords]
    try:
        generation = wait_stable(members, 6)
        alive, silent = members
        silent.stop(leave=False)  # dies without leaving: only the session timeout notices
        assert wait_stable([alive], 6) > generation
        with pytest.raises(UnknownMemberError):
            coords[1].heartbeat("g", silent.generation, silent.member_id)
    finally:
        for m in members:
            m.stop(leave=False)


def test_leader_supplies_assignment(root):
    c = coordinator(root)
    j = c.join_group("g", "", ["t", "u"], "roundrobin", 5000, 1000)
    assert j.leader_id == j.member_id and j.protocol == "roundrobin"
    got = c.sync_group("g", j.generation, j.member_id, {j.member_id: [("u", 2), ("t", 0)]})
    assert got == [("t", 0), ("u", 2)]
    desc = c.describe_group("g")
    assert desc["state"] == "Stable" and desc["members"][0]["assignment"] == [["t", 0], ["u", 2]]


def test_standalone_commit_and_describe_lag(root):
    c = coordinator(root)
    root.topic("t").append(0, __import__("storage").make_batch([b"a", b"b", b"c"]))
    c.commit_offsets("solo", -1, "", {("t", 0): 1})
    desc = c.describe_group("solo")
    assert desc["offsets"] == [
        {"topic": "t", "partition": 0, "committed": 1, "high_watermark": 3, "lag": 2}
    ]
    assert "solo" in c.list_groups()
    c.delete_group("solo")
    assert c.fetch_offsets("solo") == {}


def test_bad_input_is_refused_with_accepted_values(root):
    c = coordinator(root)
    with pytest.raises(InvalidConfigError, match="accepted: range, roundrobin, sticky"):
        c.join_group("g", "", ["t"], "fair", 5000, 1000)
    with pytest.raises(InvalidConfigError, match="session_timeout_ms"):
        c.join_group("g", "", ["t"], "range", 10, 1000)
    with pytest.raises(UnknownMemberError):
        c.join_group("g", "ghost", ["t"], "range", 5000, 1000)
    j = c.join_group("g", "", ["t"], "range", 5000, 1000)
    with pytest.raises(InconsistentGroupProtocolError):
        c.join_group("g", "", ["t"], "sticky", 5000, 1000)
    with pytest.raises(IllegalGenerationError):
        c.sync_group("g", j.generation + 7, j.member_id)


def test_assignors():
    members = {"a": ["t"], "b": ["t"], "c": ["t"]}
    counts = {"t": 7}
    r = range_assign(members, counts)
    assert r == {
        "a": [("t", 0), ("t", 1), ("t", 2)],
        "b": [("t", 3), ("t", 4)],
        "c": [("t", 5), ("t", 6)],
    }
    rr = roundrobin_assign(members, counts)
    assert rr["a"] == [("t", 0), ("t", 3), ("t", 6)]
    first = sticky_assign(members, counts, {})
    assert sorted(len(v) for v in first.values()) == [2, 2, 3]
    # c leaves: a and b keep everything they had and share c's partitions
    second = sticky_assign({"a": ["t"], "b": ["t"]}, counts, first)
    for m in ("a", "b"):
        assert set(first[m]) <= set(second[m])
    assert sorted(tp for v in second.values() for tp in v) == [("t", p) for p in range(7)]
    assert abs(len(second["a"]) - len(second["b"])) <= 1


def test_a_round_of_heartbeats_costs_o_members_reads_over_storage(root):
    """Embedded (brokerless) groups keep heartbeats in the root; a round of heartbeats of m
    members reads O(m) objects: the leader's heartbeat checks everyone, the others only
    the leader (it was m reads per member, m² a round)."""
    coords = [coordinator(root) for _ in range(10)]
    members = [Member(coords[i], "g", ["t"], session_timeout_ms=30_000).start() for i in range(10)]
    try:
        generation = wait_stable(members, 6)
    finally:
        for m in members:
            m.stop(leave=False)
    counter = RequestCounter(root.store)
    for i, m in enumerate(members):
        coords[i].heartbeat("g", generation, m.member_id)
    assert counter.counts["GET"] <= 4 * len(members), dict(counter.counts)
    assert counter.counts["LIST"] == 0
