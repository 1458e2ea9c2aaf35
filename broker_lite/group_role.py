"""The broker's group role: which groups it coordinates, their sweeps and lag metric.

Kafka's group coordinator owns the partitions of ``__consumer_offsets`` that hash to
it; here a group is coordinated by the live broker of highest rendezvous weight
(:mod:`~sparklog.broker_lite.group_routing` refuses the others').  :class:`GroupRole`
runs the broker's loops over the groups it coordinates: session expiry and due
rebalances each tick (memory only), the lag metric every few ticks.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from sparklog.broker_lite.broker_state import BrokerState
from sparklog.broker_lite.cluster import rendezvous_weight
from sparklog.broker_lite.upkeep import UPKEEP_FULL_PASS_MS
from sparklog.clock import now_ms
from sparklog.errors import SparklogError
from sparklog.groups.coordinator import GroupCoordinator
from sparklog.groups.lag import lag_of
from sparklog.topic_partition import TopicPartition


class GroupRole:
    """The groups this broker coordinates, swept each tick, their lag measured."""

    def __init__(
        self,
        state: BrokerState,
        coordinator: GroupCoordinator,
        high_watermarks: Callable[[Collection[TopicPartition]], dict[TopicPartition, int | None]],
    ) -> None:
        """``high_watermarks``: the fetch path's, led partitions' from memory."""
        self.state = state
        self.coordinator = coordinator
        self._high_watermarks = high_watermarks
        self._groups_listed: list[str] = []
        self._groups_listed_ms = -UPKEEP_FULL_PASS_MS

    def owned_groups(self, discover: bool = True) -> list[str]:
        """The groups this broker coordinates: all of the root's (a listing, for the cleaner's
        pass), or (``discover=False``, each tick) those it has served since it started."""
        assert self.state.cluster is not None
        live = sorted(self.state.cluster.live())
        if discover and now_ms() - self._groups_listed_ms >= UPKEEP_FULL_PASS_MS:
            # the root's groups are listed once a day (a group another broker coordinated
            # before); in between, those listed then and those served since
            self._groups_listed = self.coordinator.list_groups()
            self._groups_listed_ms = now_ms()
        names = self.coordinator.known_groups()
        if discover:
            names = sorted(set(names) | set(self._groups_listed))
        return [
            g
            for g in names
            if live
            and max(live, key=lambda b: rendezvous_weight(g, 0, b)) == self.state.cluster.broker_id
        ]

    def sweep(self) -> None:
        """Session expiry and due rebalances of the groups we coordinate (memory only)."""
        mine = self.owned_groups(discover=False)
        for group in set(self.coordinator.known_groups()) - set(mine):
            self.coordinator.forget(group)  # another broker coordinates it now
        self.coordinator.sweep(mine)

    def record_lag(self) -> None:
        """The lag metric of the groups we coordinate: their committed offsets (one probe
        of each group's log), then the high watermarks of all those partitions at once
        (led shards from memory, others one read per shard, however many groups)."""
        committed: dict[str, dict[TopicPartition, int]] = {}
        for group in self.owned_groups(discover=False):
            try:
                committed[group] = self.coordinator.fetch_offsets(group)
            except SparklogError:
                continue
        wanted = {tp for offsets in committed.values() for tp in offsets}
        hwms = self._high_watermarks(wanted)
        for group, offsets in committed.items():
            for tp, offset in offsets.items():
                lag = lag_of(hwms.get(tp), offset)
                if lag is not None:
                    self.state.metrics.group_lag.labels(group, tp.topic, str(tp.partition)).set(lag)
