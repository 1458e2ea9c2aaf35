"""What a consumer reads: its subscription or assignment and each partition's position.

Pure state with small methods and no I/O (kafka-python's ``SubscriptionState``):
the subscribed topic names or pattern, whether the partitions were assigned by the
user (``assign``) or by the group, the assigned partitions in assignment order,
the next offset to fetch per partition, the paused partitions, the offset reset
policy applied where a partition has no position, the high watermark last fetched,
and the rebalance callbacks.  The ``Fetcher`` and the ``Consumer`` façade read and
change it; deciding what to do and talking to the backend stays with them.
Committed offsets are not kept here: the consumer asks the group each time.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from sparklog.client.types import TopicPartition
from sparklog.errors import InvalidConfigurationError

Listener = Callable[[list[TopicPartition]], Any]


class SubscriptionState:
    """The consumer's subscription, assignment, positions, pauses and reset policy.

    ``offset_reset_policy`` is ``auto_offset_reset``: "earliest", "latest" or
    "error" (reset nothing and raise), applied by the fetcher to a partition with
    no position and no committed offset, or whose position is out of range.
    """

    def __init__(self, offset_reset_policy: str) -> None:
        self.offset_reset_policy = offset_reset_policy
        #: subscribed topic names (those matching ``pattern`` when one is given), sorted
        self.topics: list[str] = []
        self.pattern: re.Pattern[str] | None = None
        #: monotonic seconds when the pattern was last matched against the topics
        self.pattern_checked_s = 0.0
        #: True after ``assign()``: partitions chosen by the user, not by a group
        self.user_assigned = False
        self.on_assign: Listener | None = None
        self.on_revoke: Listener | None = None
        self._assigned: list[TopicPartition] = []
        self._positions: dict[TopicPartition, int] = {}
        self._paused: set[TopicPartition] = set()
        self._highwater: dict[TopicPartition, int] = {}

    # -- subscription ---------------------------------------------------------------
    def subscribe_topics(self, names: Iterable[str]) -> None:
        """Subscribe to exactly these topic names (any pattern is dropped)."""
        self.pattern = None
        self.topics = sorted(set(names))

    def subscribe_pattern(self, pattern: re.Pattern[str]) -> None:
        """Subscribe to the topics ``pattern`` matches (``update_pattern_matches`` lists them)."""
        self.pattern = pattern

    def update_pattern_matches(self, matched: Iterable[str]) -> bool:
        """The topics the pattern matches now; True if they changed."""
        topics = sorted(matched)
        changed = topics != self.topics
        self.topics = topics
        return changed

    def has_subscription(self) -> bool:
        """True if subscribed to topic names or to a pattern."""
        return bool(self.topics) or self.pattern is not None

    def set_listeners(self, on_assign: Listener | None, on_revoke: Listener | None) -> None:
        """The callbacks told of the partitions the group assigns and revokes."""
        self.on_assign, self.on_revoke = on_assign, on_revoke

    def unsubscribe(self) -> None:
        """Forget the topics, the pattern and any user assignment (not the partitions)."""
        self.topics, self.pattern, self.user_assigned = [], None, False

    # -- assignment -----------------------------------------------------------------
    def set_assignment(self, partitions: Sequence[TopicPartition]) -> set[TopicPartition]:
        """Assign ``partitions`` (duplicates dropped, order kept); returns the set assigned.

        Positions and pauses of partitions no longer assigned are forgotten.
        """
        self._assigned = list(dict.fromkeys(partitions))
        keep = set(self._assigned)
        self._positions = {tp: o for tp, o in self._positions.items() if tp in keep}
        self._paused &= keep
        return keep

    def assigned_partitions(self) -> list[TopicPartition]:
        """The assigned partitions, in assignment order (a copy)."""
        return list(self._assigned)

    def require_assigned(self, tp: TopicPartition) -> None:
        """Raise InvalidConfigurationError unless ``tp`` is assigned."""
        if tp not in self._assigned:
            raise InvalidConfigurationError(f"partition {tp} is not assigned to this consumer")

    def fetchable_partitions(self) -> list[TopicPartition]:
        """The assigned partitions not paused, in assignment order."""
        return [tp for tp in self._assigned if tp not in self._paused]

    # -- positions ------------------------------------------------------------------
    def position(self, tp: TopicPartition) -> int:
        """The next offset to fetch of ``tp`` (KeyError if it has none)."""
        return self._positions[tp]

    def seek(self, tp: TopicPartition, offset: int) -> None:
        """Set the next offset to fetch of ``tp``."""
        self._positions[tp] = offset

    def positions(self) -> dict[TopicPartition, int]:
        """Every partition's next offset to fetch (a copy)."""
        return dict(self._positions)

    def missing_positions(self) -> list[TopicPartition]:
        """The assigned partitions without a position, in assignment order."""
        return [tp for tp in self._assigned if tp not in self._positions]

    def clear_positions(self) -> None:
        """Forget every position (a new assignment starts from committed offsets)."""
        self._positions.clear()

    # -- pauses and watermarks --------------------------------------------------------
    def pause(self, partitions: Iterable[TopicPartition]) -> None:
        self._paused |= set(partitions)

    def resume(self, partitions: Iterable[TopicPartition]) -> None:
        self._paused -= set(partitions)

    def paused_partitions(self) -> set[TopicPartition]:
        return set(self._paused)

    def record_highwater(self, tp: TopicPartition, offset: int) -> None:
        """Keep the high watermark a fetch of ``tp`` returned."""
        self._highwater[tp] = offset

    def highwater(self, tp: TopicPartition) -> int | None:
        """The high watermark last fetched of ``tp`` (None before a fetch)."""
        return self._highwater.get(tp)
