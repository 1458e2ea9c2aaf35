"""What the transaction coordinator and its marker writer need of a broker.

:class:`TransactionHost` lists it, so the coordinator is handed a typed view of its
host (Kafka's ``TransactionCoordinator`` is given a replica manager and a metadata
cache, not the broker) and never reaches into the broker's private state.  The broker
(:class:`~sparklog.broker_lite.service.Broker`) is one; tests may hand another.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from sparklog.broker_lite.cluster import Cluster
    from sparklog.broker_lite.config import BrokerConfig
    from sparklog.broker_lite.partition_state import PartitionState
    from sparklog.broker_lite.peers import Peers
    from sparklog.storage import LogRoot, Topic


class PartitionHost(Protocol):
    """The broker's partitions as a reader of their transactions needs them."""

    @property
    def config(self) -> BrokerConfig: ...

    def topic(self, name: str) -> Topic:
        """The broker's data handle of topic ``name``."""
        ...

    def partition_state(self, topic: Topic, partition: int) -> PartitionState:
        """The broker's state of one partition (its shard's writer log and lock)."""
        ...


class TransactionHost(PartitionHost, Protocol):
    """The root (metadata log, groups), the shard logs the markers go to, the live brokers."""

    @property
    def root(self) -> LogRoot: ...

    @property
    def cluster(self) -> Cluster | None:
        """The live brokers and leadership (None before the broker started)."""
        ...

    @property
    def peers(self) -> Peers:
        """Calls to the other brokers (markers to the leader of their partitions)."""
        ...

    def count_commit(self) -> None:
        """Count a commit made through the broker (markers), waking waits on it."""
        ...
