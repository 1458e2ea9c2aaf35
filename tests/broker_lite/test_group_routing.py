"""The broker's face of the group coordinator (``broker_lite/group_routing.py``): each call
that changes or reads a group's membership is checked first (NOT_COORDINATOR for a group
another broker coordinates); committed offsets and the list of groups are read on any broker.
The face spells each call out, typed as the coordinator's own (no ``__getattr__``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparklog.broker_lite.group_routing import CoordinatedGroups
from sparklog.errors import NotCoordinatorError
from sparklog.groups.coordinator import GroupCoordinator
from sparklog.storage import open_root
from sparklog.topic_partition import TopicPartition


def _refuse_elsewhere(group: str) -> None:
    """This broker coordinates only the group "here"."""
    if group != "here":
        raise NotCoordinatorError(f"group {group!r} is coordinated by broker 2")


@pytest.fixture
def coordinator(tmp_path: Path) -> GroupCoordinator:
    root = open_root(f"file://{tmp_path}", create=True)
    root.create_topic("t", partitions=2)
    return GroupCoordinator(root, in_memory=True, min_session_timeout_ms=100)


@pytest.fixture
def groups(coordinator: GroupCoordinator) -> CoordinatedGroups:
    return CoordinatedGroups(coordinator, _refuse_elsewhere)


def test_membership_calls_run_on_the_coordinator_and_are_refused_elsewhere(
    groups: CoordinatedGroups,
) -> None:
    joined = groups.join_group("here", "", ["t"], session_timeout_ms=10_000)
    assigned = groups.sync_group("here", joined.generation, joined.member_id)
    assert sorted(assigned) == [TopicPartition("t", 0), TopicPartition("t", 1)]
    groups.heartbeat("here", joined.generation, joined.member_id)
    groups.commit_offsets(
        "here", joined.generation, joined.member_id, {TopicPartition("t", 0): 7}, metadata="m"
    )
    assert groups.group_state("here")["generation"] == joined.generation
    with pytest.raises(NotCoordinatorError, match="'there' is coordinated by broker 2"):
        groups.join_group("there", "", ["t"])
    with pytest.raises(NotCoordinatorError):
        groups.describe_group("there")
    with pytest.raises(NotCoordinatorError):
        groups.commit_offsets("there", -1, "", {TopicPartition("t", 0): 1})


def test_committed_offsets_and_the_group_list_are_read_on_any_broker(
    coordinator: GroupCoordinator, groups: CoordinatedGroups
) -> None:
    joined = groups.join_group("here", "", ["t"], session_timeout_ms=10_000)
    groups.sync_group("here", joined.generation, joined.member_id)
    groups.commit_offsets(
        "here", joined.generation, joined.member_id, {TopicPartition("t", 1): 3}, metadata="m"
    )
    elsewhere = CoordinatedGroups(coordinator, lambda group: _refuse_elsewhere("-"))
    assert elsewhere.fetch_offsets("here") == {TopicPartition("t", 1): 3}
    assert elsewhere.fetch_committed("here") == {TopicPartition("t", 1): (3, "m")}
    assert elsewhere.list_groups() == ["here"]


def test_the_face_forwards_nothing_it_does_not_spell_out(
    coordinator: GroupCoordinator, groups: CoordinatedGroups
) -> None:
    """A coordinator call the face does not name is not reachable through it (before, a
    ``__getattr__`` handed on any attribute, untyped)."""
    assert hasattr(coordinator, "state_doc")
    assert not hasattr(groups, "state_doc")
    assert not hasattr(type(groups), "__getattr__")
    assert groups.join_group.__name__ == "join_group"
