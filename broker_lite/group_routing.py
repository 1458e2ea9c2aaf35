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
from typing import Any

from sparklog.groups.coordinator import GroupCoordinator

#: coordinator calls whose first argument is a group and that need its coordinator
ROUTED = frozenset(
    {
        "join_group",
        "join_group_parked",
        "sync_group",
        "sync_group_opaque",
        "sync_group_parked",
        "heartbeat",
        "leave_group",
        "commit_offsets",
        "describe_group",
        "delete_group",
        "delete_offsets",
        "group_state",
        "consumer_group_heartbeat",
        "consumer_group_describe",
        "check_consumer_member",
    }
)


class CoordinatedGroups:
    """``coordinator``'s calls, each group call checked by ``check(group)`` first."""

    def __init__(self, coordinator: GroupCoordinator, check: Callable[[str], None]) -> None:
        self._coordinator = coordinator
        self._check = check

    def __getattr__(self, name: str) -> Any:
        call = getattr(self._coordinator, name)
        if name not in ROUTED:
            return call

        def routed(group: str, *args: Any, **kwargs: Any) -> Any:
            self._check(group)
            return call(group, *args, **kwargs)

        return routed
