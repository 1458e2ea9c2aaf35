"""The broker's face of the group coordinator: only groups this broker coordinates.

A broker holds the state of the groups it coordinates in memory
(``GroupCoordinator(in_memory=True)``), so a group's members must all talk to
one broker: the live broker with the highest rendezvous weight for the group
id (Kafka's FindCoordinator answers the same broker).  Calls that change or
read a group's membership are refused elsewhere with ``NOT_COORDINATOR``,
naming the coordinator (Kafka clients find it again; sparklog's client goes
there); reading committed offsets and listing groups work on any broker.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Concatenate, ParamSpec, TypeVar

from sparklog.groups.coordinator import GroupCoordinator
from sparklog.topic_partition import TopicPartition

P = ParamSpec("P")
R = TypeVar("R")


def _routed(
    call: Callable[Concatenate[GroupCoordinator, str, P], R],
) -> Callable[Concatenate[CoordinatedGroups, str, P], R]:
    """The coordinator's ``call`` on a group, after the broker's check that it coordinates
    that group (``NOT_COORDINATOR`` naming the one that does, otherwise); typed as ``call``."""

    def routed(self: CoordinatedGroups, group: str, /, *args: P.args, **kwargs: P.kwargs) -> R:
        self._check(group)
        return call(self._coordinator, group, *args, **kwargs)

    routed.__name__ = routed.__qualname__ = call.__name__
    routed.__doc__ = call.__doc__
    return routed


class CoordinatedGroups:
    """``coordinator``'s group calls, each checked by ``check(group)`` first (the calls that
    change or read a group's membership), and the two any broker answers (committed offsets,
    the list of groups).  Each is spelled out, typed as the coordinator's own method."""

    def __init__(self, coordinator: GroupCoordinator, check: Callable[[str], None]) -> None:
        self._coordinator = coordinator
        self._check = check

    join_group = _routed(GroupCoordinator.join_group)
    join_group_parked = _routed(GroupCoordinator.join_group_parked)
    sync_group = _routed(GroupCoordinator.sync_group)
    sync_group_opaque = _routed(GroupCoordinator.sync_group_opaque)
    sync_group_parked = _routed(GroupCoordinator.sync_group_parked)
    heartbeat = _routed(GroupCoordinator.heartbeat)
    leave_group = _routed(GroupCoordinator.leave_group)
    commit_offsets = _routed(GroupCoordinator.commit_offsets)
    describe_group = _routed(GroupCoordinator.describe_group)
    delete_group = _routed(GroupCoordinator.delete_group)
    delete_offsets = _routed(GroupCoordinator.delete_offsets)
    group_state = _routed(GroupCoordinator.group_state)
    consumer_group_heartbeat = _routed(GroupCoordinator.consumer_group_heartbeat)
    consumer_group_describe = _routed(GroupCoordinator.consumer_group_describe)
    check_consumer_member = _routed(GroupCoordinator.check_consumer_member)

    def fetch_offsets(self, group: str) -> dict[TopicPartition, int]:
        """The group's committed offsets: any broker reads them from the group's log."""
        return self._coordinator.fetch_offsets(group)

    def fetch_offsets_and_unstable(
        self, group: str
    ) -> tuple[dict[TopicPartition, int], frozenset[TopicPartition]]:
        """The group's committed offsets and the partitions an open transaction holds
        offsets of, read on any broker."""
        return self._coordinator.fetch_offsets_and_unstable(group)

    def fetch_committed(self, group: str) -> dict[TopicPartition, tuple[int, str]]:
        """The group's committed ``(offset, metadata)`` per partition, read on any broker."""
        return self._coordinator.fetch_committed(group)

    def list_groups(self) -> list[str]:
        """Every group in the root: any broker lists them."""
        return self._coordinator.list_groups()
