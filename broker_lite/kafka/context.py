"""What a Kafka API handler is given: a typed view of the request's context and the broker.

Every handler of :data:`~sparklog.broker_lite.kafka.versions.API_TABLE` is a
:data:`Handler`: ``handler(ctx, request) -> response``, with ``ctx`` a
:class:`HandlerContext` and ``request``/``response`` kio's classes of the API's served
versions (:mod:`~sparklog.broker_lite.kafka.api_types`).  The context and the broker are
seen through the Protocols here, which list only what handlers use (Kafka's
``KafkaApis`` is likewise handed a replica manager, coordinators and a metadata cache,
not the broker): the listener's :class:`~sparklog.broker_lite.kafka.server.RequestContext`
and :class:`~sparklog.broker_lite.service.Broker` satisfy them, which mypy checks where
the listener hands its context to a handler.  A handler needing more of the broker adds
it here, in view.

This module imports no handler module (the classes named are the broker's parts), so
handler modules may import it without a loop.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

if TYPE_CHECKING:
    import pyarrow as pa

    from sparklog.broker_lite.cluster import Cluster
    from sparklog.broker_lite.config import BrokerConfig
    from sparklog.broker_lite.group_routing import CoordinatedGroups
    from sparklog.broker_lite.kafka.fetch_waits import FetchPurgatory
    from sparklog.broker_lite.kafka.metadata_entries import TopicEntries
    from sparklog.broker_lite.kafka.producer_ids import ProducerIdAllocator
    from sparklog.broker_lite.kafka.session import Session
    from sparklog.broker_lite.partition_state import PartitionState
    from sparklog.broker_lite.produce import ProduceItem, ProduceOutcome
    from sparklog.broker_lite.transactions.coordinator import TransactionCoordinator
    from sparklog.groups.coordinator import GroupCoordinator
    from sparklog.storage import LogRoot, Topic


class BrokerView(Protocol):
    """The broker as the Kafka handlers use it: its root, configuration and roles."""

    @property
    def root(self) -> LogRoot: ...

    @property
    def config(self) -> BrokerConfig: ...

    @property
    def groups(self) -> CoordinatedGroups:
        """The group coordinator's calls, refusing groups another broker coordinates."""
        ...

    @property
    def coordinator(self) -> GroupCoordinator: ...

    @property
    def transactions(self) -> TransactionCoordinator: ...

    @property
    def cluster(self) -> Cluster | None:
        """The live brokers and leadership (None before the broker started)."""
        ...

    @property
    def commits(self) -> int:
        """Commits made through this broker so far (a Fetch waits for the next one)."""
        ...

    @property
    def stopping(self) -> bool: ...

    def topic(self, name: str) -> Topic: ...

    def partition_state(self, topic: Topic, partition: int) -> PartitionState: ...

    def metadata(
        self, topics: Sequence[str] | None = None, *, sizes: bool = False
    ) -> dict[str, Any]: ...

    def produce_each(
        self,
        topic_name: str,
        items: Sequence[ProduceItem],
        *,
        acks: str = "all",
        compression: str | None = "none",
        all_or_nothing: bool = False,
        on_queued: Callable[[], None] | None = None,
    ) -> list[ProduceOutcome | BaseException]: ...

    def wait_for_commit(self, seen: int, timeout_s: float) -> None: ...

    def fetch(
        self,
        topic_name: str,
        partition: int,
        offset: int,
        max_bytes: int,
        max_wait_ms: int,
        *,
        isolation_level: str = "read_uncommitted",
    ) -> tuple[list[pa.RecordBatch], int, int, pa.Schema]: ...

    def list_offsets(self, topic_name: str, partition: int, spec: str | int) -> int:
        """``spec``: "earliest", "latest", "max_timestamp" or a timestamp in ms."""
        ...

    def leader_epoch_end(self, topic_name: str, partition: int) -> tuple[int, int]: ...

    def led_partition_sizes(
        self, topics: Sequence[str] | None = None
    ) -> dict[str, dict[int, int]]: ...

    def create_topic(
        self,
        name: str,
        partitions: int,
        config: Mapping[str, Any] | None = None,
        value_schema: str | None = None,
        replication_factor: int = 1,
        created_by: str | None = None,
    ) -> dict[str, Any]: ...

    def delete_topic(self, name: str) -> None: ...

    def alter_topic_config(
        self,
        name: str,
        updates: Mapping[str, Any],
        remove: Sequence[str] = (),
        *,
        validate_only: bool = False,
        replace: bool = False,
    ) -> dict[str, Any]: ...

    def add_partitions(self, name: str, total: int, *, validate_only: bool = False) -> int: ...

    def delete_records(self, topic_name: str, partition: int, before_offset: int) -> int: ...

    def count_commit(self) -> None: ...


class RefusalLog(Protocol):
    """The listener's rate-limited WARNING log of refusals."""

    def warning(self, message: str, **extra: Any) -> None: ...


class ByteBudgetView(Protocol):
    """Bytes the listener holds at once (``max_inflight_request_bytes``)."""

    def try_take(self, amount: int) -> bool: ...

    def give(self, amount: int) -> None: ...


class ListenerView(Protocol):
    """The Kafka listener's parts a handler uses."""

    @property
    def refusals(self) -> RefusalLog: ...

    @property
    def produce_bytes(self) -> ByteBudgetView: ...

    @property
    def producer_ids(self) -> ProducerIdAllocator: ...

    @property
    def fetches(self) -> FetchPurgatory:
        """Long-poll fetches waiting for records (parked, woken by commits)."""
        ...

    @property
    def pool(self) -> ThreadPoolExecutor:
        """Threads for a request's own work (a Produce's topics at once)."""
        ...

    @property
    def metadata_entries(self) -> TopicEntries:
        """Each topic's Metadata answer entry, built and encoded once while it holds."""
        ...

    @property
    def advertised_host(self) -> str: ...

    @property
    def advertised_port(self) -> int: ...


class ProduceTurnView(Protocol):
    """A Produce request's place in its connection's line of Produce requests."""

    @property
    def queued(self) -> threading.Event:
        """Set once this request's records are queued (the next request may queue then)."""
        ...

    def wait_for_previous(self, *, committed: bool) -> None: ...


class HandlerContext(Protocol):
    """What a handler knows of its request besides the body."""

    @property
    def listener(self) -> ListenerView: ...

    @property
    def broker(self) -> BrokerView: ...

    @property
    def api_key(self) -> int: ...

    @property
    def api_version(self) -> int: ...

    @property
    def correlation_id(self) -> int: ...

    @property
    def client_id(self) -> str | None: ...

    @property
    def produce_turn(self) -> ProduceTurnView | None: ...

    @property
    def session(self) -> Session | None:
        """The connection's authentication state and principal (None: an in-process call)."""
        ...


#: A handler as the API table holds it, whatever its API: each is typed with its API's
#: request and response (``(HandlerContext, ProduceRequest) -> ProduceResponse | None``);
#: the answer may also be None (no answer: Produce with acks=0) or a future of the
#: response (a parked request: a JoinGroup waiting for its rebalance).
Handler: TypeAlias = Callable[[HandlerContext, Any], Any]
