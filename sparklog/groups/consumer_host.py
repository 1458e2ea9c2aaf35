"""What KIP-848's protocol needs of its group coordinator: :class:`ConsumerGroupHost`.

The protocol (:mod:`~sparklog.groups.consumer_groups` and the classic bridge,
:mod:`~sparklog.groups.consumer_classic`) is handed its coordinator through this
Protocol: the group's state document to update, members' heartbeat times, partition
counts and topic names, and the classic state machine's steps a migration takes.  The
coordinator (:class:`~sparklog.groups.coordinator.GroupCoordinator`) is one; the
protocol never names its class, so neither module imports the other.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from sparklog.groups.classic_group import GroupDoc


class StateDocument(Protocol):
    """One group's versioned state document."""

    def update(
        self, change: Callable[[dict[str, Any]], dict[str, Any] | None], attempts: int = 50
    ) -> dict[str, Any]:
        """Apply ``change`` to the newest state and write it as the next version."""
        ...


class ConsumerGroupHost(Protocol):
    """The coordinator as KIP-848's protocol uses it."""

    def state_doc(self, group: str) -> StateDocument: ...

    def maintain_doc(self, group: str, doc: GroupDoc, now: int) -> bool:
        """Expire silent members and finish due rebalances of ``doc`` (either type)."""
        ...

    def touch(self, group: str, member_id: str) -> None:
        """Note that ``member_id`` is alive now."""
        ...

    def forget_heartbeat(self, group: str, member_id: str) -> None: ...

    def last_heartbeats(self, group: str, members: Sequence[str]) -> dict[str, int]: ...

    def partition_counts(self, topics: set[str]) -> dict[str, int]:
        """Partitions per topic (0 for a topic that does not exist)."""
        ...

    def topic_names(self) -> Iterable[str]:
        """Every topic's name (a regex subscription is matched against them)."""
        ...

    def start_rebalance(self, doc: GroupDoc, now: int) -> None:
        """Start a rebalance of the classic group ``doc`` (a consumer group just downgraded)."""
        ...

    def fence(self, doc: GroupDoc, old: str, instance_id: str) -> None:
        """Remember that member ``old`` was replaced by a newer member with ``instance_id``."""
        ...
