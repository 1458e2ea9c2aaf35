"""BrokerClient: the Python client of the broker protocol (the cross-helper contract).

It keeps a connection per broker, routes produce and fetch to each partition's
leader from cached metadata, and retries retriable errors (NOT_LEADER, an
unreachable broker, a contended root) with backoff and a metadata refresh,
for up to ``retry_timeout_ms``.  Group-protocol errors (REBALANCE_IN_PROGRESS,
ILLEGAL_GENERATION, UNKNOWN_MEMBER) are raised to the caller, who must re-join.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.flight as flight

from sparklog.client.address import parse_bootstrap
from sparklog.client.transports.base import FetchResult, ProduceResult
from sparklog.errors import (
    BrokerNotAvailableError,
    CommitStateUnknownError,
    GroupError,
    IllegalStateError,
    InvalidRecordError,
    InvalidRequestError,
    LeaderNotAvailableError,
    NotCoordinatorError,
    NotLeaderOrFollowerError,
    SparklogError,
    ThrottlingQuotaExceededError,
    UnknownTopicOrPartitionError,
)
from sparklog.groups.coordinator import JoinResult
from sparklog.protocol import actions
from sparklog.protocol import flight as wire
from sparklog.protocol.flight import decode
from sparklog.retry import retrying
from sparklog.storage.topic_info import value_type_from_text, value_type_to_text
from sparklog.topic_partition import TopicPartition

T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True)
class PartitionMetadata:
    partition: int
    leader_id: int
    leader_location: str
    log_start_offset: int
    high_watermark: int
    replicas: tuple[int, ...] = ()
    size_bytes: int | None = None  # bytes of the partition's stored segments


@dataclass(frozen=True)
class TopicMetadata:
    name: str
    topic_id: str
    partitions: list[PartitionMetadata]
    config: dict[str, Any]
    value_type: pa.DataType | None = None
    replication_factor: int = 1


#: errors a broker answers before it writes anything: the produce was certainly not applied
_REFUSED_BEFORE_WRITE = (
    NotLeaderOrFollowerError,
    LeaderNotAvailableError,
    ThrottlingQuotaExceededError,
    UnknownTopicOrPartitionError,
    InvalidRequestError,
    InvalidRecordError,
)


class BrokerClient:
    """A connection to a broker cluster (thread-safe).

    Every admin action of the table (:mod:`sparklog.protocol.actions`) is
    ``call(actions.X, **body)``: routed, retried and decoded as its entry says.  Typed
    methods exist only where the client does work of its own: metadata (its cache and
    broker discovery), produce and fetch (Arrow streams), a join (its longer deadline),
    a sync (the assignment's shape), create_topic (the value type's text),
    delete_topic and add_partitions (cached metadata forgotten), delete_offsets (the
    per-partition errors).

    ``discover=False`` keeps every call on the bootstrap brokers (metadata
    will not add the others), e.g. to pin a client to one broker.
    """

    def __init__(
        self,
        bootstrap: str,
        *,
        retry_timeout_ms: int = 30_000,
        request_timeout_s: float = 60.0,
        discover: bool = True,
        security: Any = None,
    ) -> None:
        from sparklog.client.security import ClientSecurity

        #: TLS and SASL (sparklog.client.security.ClientSecurity); None: PLAINTEXT
        self.security: ClientSecurity = security or ClientSecurity()
        self._headers = self.security.headers()
        self.bootstrap = parse_bootstrap(bootstrap)
        self.retry_timeout_ms = retry_timeout_ms
        self.request_timeout_s = request_timeout_s
        self.discover = discover
        self._lock = threading.Lock()
        self._conns: dict[str, flight.FlightClient] = {}
        #: location -> what probing it as a Kafka listener found (see kafka_probe)
        self._probed: dict[str, SparklogError | None] = {}
        self._brokers: list[str] = list(self.bootstrap)
        self._meta: dict[str, TopicMetadata] = {}
        #: group -> its coordinator's location, as NOT_COORDINATOR answers named it
        self._coordinators: dict[str, str] = {}
        self._next = 0
        self._closed = False

    # -- connections -------------------------------------------------------
    # A connection is never closed explicitly: another thread may be inside a
    # call on it, and closing a FlightClient under a call in flight crashes the
    # process. Dropping it from the table releases it; pyarrow closes it when
    # the last call holding it returns.
    def close(self) -> None:
        """Release every connection; later calls fail instead of reconnecting."""
        with self._lock:
            self._closed = True
            self._conns = {}

    def __enter__(self) -> BrokerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _conn(self, location: str) -> flight.FlightClient:
        with self._lock:
            if self._closed:
                raise IllegalStateError("broker client is closed")
            conn = self._conns.get(location)
            if conn is None:
                conn = flight.connect(
                    f"{self.security.scheme}://{location}", **self.security.connect_options()
                )
                self._conns[location] = conn
            return conn

    def _drop(self, location: str) -> None:
        with self._lock:
            self._conns.pop(location, None)

    def _options(self, timeout_s: float | None = None) -> flight.FlightCallOptions:
        return flight.FlightCallOptions(
            timeout=timeout_s or self.request_timeout_s, headers=self._headers
        )

    def _translate(self, location: str, exc: Exception) -> SparklogError:
        if isinstance(exc, flight.FlightUnauthenticatedError):
            from sparklog.errors import SaslAuthenticationFailedError

            return SaslAuthenticationFailedError(f"broker {location}: {_first_line(exc)}")
        if isinstance(exc, flight.FlightUnauthorizedError):
            from sparklog.errors import ClusterAuthorizationFailedError

            return ClusterAuthorizationFailedError(f"broker {location}: {_first_line(exc)}")
        if isinstance(exc, flight.FlightError):
            err = decode(str(exc))
            if err is None and getattr(exc, "extra_info", None):
                err = decode(exc.extra_info.decode(errors="replace"))
            if err is not None:
                return err
        if isinstance(exc, flight.FlightUnavailableError | flight.FlightTimedOutError | OSError):
            self._drop(location)
            wrong = self._kafka_listener(location)
            if wrong is not None:
                return wrong
            return BrokerNotAvailableError(f"broker {location} is unreachable: {exc}")
        if isinstance(exc, flight.FlightCancelledError):
            self._drop(location)
            return BrokerNotAvailableError(f"call to broker {location} was cancelled: {exc}")
        if isinstance(exc, flight.FlightError | pa.ArrowException):
            self._drop(location)
            return BrokerNotAvailableError(f"broker {location} failed: {exc}")
        raise exc

    def _kafka_listener(self, location: str) -> SparklogError | None:
        """A clear error if ``location`` is a sparklog broker's Kafka port, or serves TLS to
        a client without it (probed once)."""
        from sparklog.client.transports.kafka_probe import kafka_listener_error
        from sparklog.client.transports.tls_probe import tls_listener_error

        if location not in self._probed:
            wrong = kafka_listener_error(location)
            if wrong is None and not self.security.tls:
                wrong = tls_listener_error(location)
            self._probed[location] = wrong
        return self._probed[location]

    def _on(self, location: str, call: Callable[[flight.FlightClient], T]) -> T:
        try:
            return call(self._conn(location))
        except SparklogError:
            raise
        except Exception as exc:
            raise self._translate(location, exc) from None

    def _retrying(self, call: Callable[[], T], *, idempotent: bool = False) -> T:
        """Retry retriable errors with backoff for ``retry_timeout_ms``.

        ``idempotent`` calls (a produce with producer id and sequences) also
        retry an unknown outcome: the same sequences are deduplicated by the log.
        """

        def retry_if(err: BaseException) -> bool:
            if not isinstance(err, SparklogError) or isinstance(err, GroupError):
                return False
            return err.retriable or (idempotent and isinstance(err, CommitStateUnknownError))

        def before_retry(err: BaseException) -> None:
            if isinstance(err, NotLeaderOrFollowerError | BrokerNotAvailableError):
                self._meta.clear()  # the next attempt asks for the leader afresh

        return retrying(
            call,
            deadline_ms=self.retry_timeout_ms,
            backoff_initial_ms=20,
            backoff_max_ms=1_000,
            retry_if=retry_if,
            before_retry=before_retry,
        )

    def _any_broker(self, call: Callable[[flight.FlightClient], T]) -> T:
        """Run ``call`` on some reachable broker, trying the others on failure."""
        with self._lock:
            brokers = list(self._brokers)
            start = self._next
            self._next += 1
        last: SparklogError | None = None
        for i in range(len(brokers)):
            location = brokers[(start + i) % len(brokers)]
            try:
                return self._on(location, call)
            except BrokerNotAvailableError as err:
                last = err
        assert last is not None
        raise last

    def call(self, action: actions.Action[R], /, **body: Any) -> R:
        """Run ``action`` (its ``body`` fields as in its table entry) on the broker its
        ``route`` names, retried as its entry says; its result, decoded."""
        return self._call(action, action.timeout_s, body)

    def _call(self, action: actions.Action[R], timeout_s: float | None, body: Any) -> R:
        payload = action.build(**body)

        def call(conn: flight.FlightClient) -> Any:
            results = list(
                conn.do_action(flight.Action(action.name, payload), self._options(timeout_s))
            )
            return wire.decode_result(results[0].body.to_pybytes()) if results else None

        attempt: Callable[[], Any]
        if action.route == "group":
            attempt = self._on_coordinator(str(body["group"]), call)
        elif action.route == "leader":
            topic, partition = str(body["topic"]), int(body["partition"])
            attempt = lambda: self._on(self._leader(topic, partition), call)  # noqa: E731
        else:
            attempt = lambda: self._any_broker(call)  # noqa: E731
        if not action.retriable:
            return action.result(attempt())
        return action.result(self._retrying(attempt, idempotent=action.idempotent))

    def _on_coordinator(
        self, group: str, call: Callable[[flight.FlightClient], Any]
    ) -> Callable[[], Any]:
        """One attempt of a group's ``call`` on the group's coordinator (learnt from
        NOT_COORDINATOR answers, which name it)."""

        def attempt() -> Any:
            location = self._coordinators.get(group)
            try:
                return self._on(location, call) if location else self._any_broker(call)
            except NotCoordinatorError as err:
                where = str(err.details.get("coordinator_location") or "")
                if where:
                    self._coordinators[group] = where
                else:
                    self._coordinators.pop(group, None)
                raise
            except BrokerNotAvailableError:
                self._coordinators.pop(group, None)
                raise

        return attempt

    # -- metadata ----------------------------------------------------------
    def metadata(
        self, topics: list[str] | None = None, *, sizes: bool = False
    ) -> dict[str, TopicMetadata]:
        """Topics' partitions and leaders (from the broker's memory); ``sizes`` adds every
        partition's watermarks and stored bytes, which the broker reads from the root."""
        raw = self.call(actions.METADATA, topics=topics, sizes=sizes)
        with self._lock:
            for b in raw.get("brokers", []) if self.discover else []:
                if b["location"] not in self._brokers:
                    self._brokers.append(b["location"])
        out = {}
        for name, t in raw["topics"].items():
            value_type = None
            if t.get("value_schema"):
                value_type = value_type_from_text(t["value_schema"])
            out[name] = TopicMetadata(
                name=name,
                topic_id=t["topic_id"],
                partitions=[
                    PartitionMetadata(
                        p["partition"],
                        p["leader_id"],
                        p["leader_location"],
                        p["log_start_offset"],
                        p["high_watermark"],
                        tuple(p.get("replicas", ())),
                        p.get("size_bytes"),
                    )
                    for p in t["partitions"]
                ],
                config=t["config"],
                value_type=value_type,
                replication_factor=int(t.get("replication_factor", 1)),
            )
        self._meta.update(out)
        return out

    def _leader(self, topic: str, partition: int) -> str:
        meta = self._meta.get(topic)
        if meta is None or partition >= len(meta.partitions):
            meta = self.metadata([topic])[topic]
        if partition >= len(meta.partitions) or partition < 0:
            meta = self.metadata([topic])[topic]
            if not 0 <= partition < len(meta.partitions):
                from sparklog.errors import UnknownTopicOrPartitionError

                raise UnknownTopicOrPartitionError(
                    f"topic {topic!r} has no partition {partition}; accepted: 0-"
                    f"{len(meta.partitions) - 1}"
                )
        location = meta.partitions[partition].leader_location
        if not location:
            raise NotLeaderOrFollowerError(
                f"{topic}-{partition} has no live leader", leader_location=""
            )
        return location

    # -- admin -------------------------------------------------------------
    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        config: Mapping[str, Any] | None = None,
        value_type: pa.DataType | None = None,
        *,
        replication_factor: int = 1,
    ) -> dict[str, Any]:
        fields: dict[str, Any] = {}
        if value_type is not None:
            fields["value_schema"] = value_type_to_text(value_type)
        if replication_factor != 1:  # (a broker before it knew the field is asked without it)
            fields["replication_factor"] = replication_factor
        return self.call(
            actions.CREATE_TOPIC,
            name=name,
            partitions=partitions,
            config=dict(config or {}),
            **fields,
        )

    def delete_topic(self, name: str) -> None:
        self.call(actions.DELETE_TOPIC, name=name)
        self._meta.pop(name, None)

    def add_partitions(self, name: str, total: int) -> int:
        self._meta.pop(name, None)
        return self.call(actions.ADD_PARTITIONS, name=name, total=total)

    # -- produce / fetch ---------------------------------------------------
    def produce(
        self,
        topic: str,
        partition: int,
        batch: pa.RecordBatch | pa.Table,
        *,
        acks: str | int = "all",
        producer_id: int | None = None,
        producer_epoch: int | None = None,
        base_sequence: int | None = None,
        compression: str | None = None,
    ) -> ProduceResult:
        """Append ``batch`` to one partition through its leader; the assigned base offset.

        ``compression=None`` lets the broker's configured codec apply.
        """
        command = wire.build(
            wire.PRODUCE,
            topic=topic,
            partition=partition,
            acks=str(acks),
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            base_sequence=base_sequence,
            compression=compression,
        )
        descriptor = flight.FlightDescriptor.for_command(command)

        maybe_applied: list[SparklogError] = []

        def attempt() -> ProduceResult:
            try:
                return self._on(self._leader(topic, partition), call)
            except SparklogError as err:
                if not isinstance(err, _REFUSED_BEFORE_WRITE):
                    maybe_applied.append(err)  # a lost answer, a failed commit...
                raise

        def call(conn: flight.FlightClient) -> ProduceResult:
            writer, reader = conn.do_put(descriptor, batch.schema, self._options())
            try:
                if isinstance(batch, pa.Table):
                    writer.write_table(batch)
                else:
                    writer.write_batch(batch)
                writer.done_writing()
                buf = reader.read()
            finally:
                writer.close()
            if buf is None:
                raise BrokerNotAvailableError("broker closed the produce stream without an answer")
            appends = wire.decode_produce_reply(buf.to_pybytes())
            if not appends:
                return ProduceResult(-1, 0)
            first = appends[0]
            return ProduceResult(
                first.base_offset, sum(a.record_count for a in appends), first.duplicate
            )

        if producer_id is None:
            return self._retrying(attempt)
        try:
            return self._retrying(attempt, idempotent=True)
        except SparklogError as err:
            if not maybe_applied or not (err.retriable or isinstance(err, CommitStateUnknownError)):
                raise
            # Out of time while an earlier attempt may have been committed: say so, never
            # "failed" (the records may be in the log; a re-read tells).
            raise CommitStateUnknownError(
                f"outcome unknown: produce to {topic}-{partition} (producer {producer_id}, "
                f"sequences from {base_sequence}) was not confirmed within "
                f"{self.retry_timeout_ms} ms; the records may or may not be in the log "
                f"(last error: {err.code}: {str(err)[:300]})",
                last_error=err.code,
            ) from err

    def fetch(
        self,
        topic: str,
        partition: int,
        offset: int,
        *,
        max_bytes: int = 1 << 20,
        max_wait_ms: int = 500,
        isolation_level: str = "read_uncommitted",
    ) -> FetchResult:
        """Records from ``offset`` (long-polls up to ``max_wait_ms`` at the head of the log)."""
        ticket = flight.Ticket(
            wire.build(
                wire.FETCH,
                topic=topic,
                partition=partition,
                offset=offset,
                max_bytes=max_bytes,
                max_wait_ms=max_wait_ms,
                isolation_level=isolation_level,
            )
        )

        def call(conn: flight.FlightClient) -> FetchResult:
            reader = conn.do_get(ticket, self._options(max_wait_ms / 1000 + self.request_timeout_s))
            batches = []
            meta: bytes | None = None
            while True:
                try:
                    chunk = reader.read_chunk()
                except StopIteration:
                    break
                if chunk.app_metadata is not None:
                    meta = chunk.app_metadata.to_pybytes()
                if chunk.data is not None and chunk.data.num_rows:
                    batches.append(chunk.data)
            high_watermark, log_start_offset = wire.decode_fetch_meta(meta)
            return FetchResult(batches, high_watermark, log_start_offset)

        return self._retrying(lambda: self._on(self._leader(topic, partition), call))

    # -- consumer groups ---------------------------------------------------
    def join_group(
        self,
        group: str,
        member_id: str,
        topics: Sequence[str],
        strategy: str | Sequence[str] = "range",
        session_timeout_ms: int = 10_000,
        rebalance_timeout_ms: int = 30_000,
    ) -> JoinResult:
        body = {
            "group": group,
            "member_id": member_id,
            "topics": list(topics),
            "strategy": strategy if isinstance(strategy, str) else list(strategy),
            "session_timeout_ms": session_timeout_ms,
            "rebalance_timeout_ms": rebalance_timeout_ms,
        }
        # the coordinator answers when the rebalance completes: wait that long too
        timeout_s = rebalance_timeout_ms / 1000 + self.request_timeout_s
        return JoinResult(**self._call(actions.JOIN_GROUP, timeout_s, body))

    def sync_group(
        self,
        group: str,
        generation: int,
        member_id: str,
        assignment: Mapping[str, Sequence[TopicPartition]] | None = None,
    ) -> list[TopicPartition]:
        fields: dict[str, Any] = {}
        if assignment is not None:
            fields["assignment"] = {m: [list(tp) for tp in tps] for m, tps in assignment.items()}
        return self.call(
            actions.SYNC_GROUP, group=group, generation=generation, member_id=member_id, **fields
        )

    def delete_offsets(
        self, group: str, partitions: Sequence[TopicPartition]
    ) -> dict[TopicPartition, SparklogError | None]:
        """Drop the group's committed offsets of ``partitions``; per partition None or why not."""
        pairs = [[topic, partition] for topic, partition in partitions]
        return self.call(actions.DELETE_OFFSETS, group=group, partitions=pairs)


def _first_line(exc: Exception) -> str:
    """The server's message without gRPC's detail lines."""
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
