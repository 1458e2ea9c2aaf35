"""The Arrow Flight face of the broker, and ``serve()``, the blocking entry point.

The wire format (requests, replies, errors) is :mod:`sparklog.protocol.flight`:

* ``DoPut``   produce: a ``PRODUCE`` command, batches with ``PRODUCE_BATCH`` metadata.
* ``DoGet``   fetch: a ``FETCH`` ticket; every batch carries the fetch metadata.
* ``GetFlightInfo`` / ``ListFlights``: a topic's partitions as endpoints at their leaders.
* ``DoAction``: admin, metadata, offsets and group calls, bodies as in ``ACTIONS``.

Errors leave as a FlightServerError whose message holds a stable code and JSON
details (``wire.encode``); nothing a client sends crashes the broker.

Resources are bounded: calls served at once (``max_concurrent_calls``, and
``max_calls_per_connection`` per client connection), memory of produce requests
being received or committed (``max_inflight_request_bytes``, checked batch by
batch while a DoPut streams in, as are ``max_request_bytes`` and
``max_request_batches``); a call over a bound is refused at once with a
retriable THROTTLING_QUOTA_EXCEEDED.  Refusals are logged at most
``REFUSAL_LOG_PER_S`` times a second (the rest are counted in the next line).
"""

from __future__ import annotations

import contextlib
import faulthandler
import gc
import json
import logging
import resource
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight

from sparklog.broker_lite import flight_acls
from sparklog.broker_lite.config import BrokerConfig, load_config
from sparklog.broker_lite.damage import report_damage
from sparklog.broker_lite.handed_commits import (
    commit_handed_over,
    commit_mirrored_handed_over,
)
from sparklog.broker_lite.logs import fields, setup_logging
from sparklog.broker_lite.security_warnings import warn_at_start
from sparklog.broker_lite.service import Broker
from sparklog.broker_lite.transactions.markers import write_led_markers
from sparklog.clock import Clock, now_ms
from sparklog.errors import (
    BrokerNotAvailableError,
    CorruptRecordError,
    InvalidConfigurationError,
    InvalidRequestError,
    MessageSizeTooLargeError,
    NotLeaderOrFollowerError,
    RebalanceInProgressError,
    SparklogError,
    ThrottlingQuotaExceededError,
    UnknownServerError,
)
from sparklog.protocol import actions
from sparklog.protocol import flight as wire
from sparklog.protocol.flight import encode
from sparklog.protocol.hooks import MirrorLinks
from sparklog.security import users
from sparklog.storage import LogRoot
from sparklog.topic_partition import TopicPartition

log = logging.getLogger("sparklog.broker_lite.server")
#: most "request refused" log lines per second (the others are counted, not written)
REFUSAL_LOG_PER_S = 10
#: what a produce batch costs beyond its bytes (Arrow and gRPC bookkeeping)
BATCH_OVERHEAD_BYTES = 512


class _Budget:
    """A count (bytes, calls) that many threads take from and give back; never blocks."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self._lock = threading.Lock()

    def take(self, amount: int) -> bool:
        with self._lock:
            if self.used + amount > self.limit and self.used > 0:
                return False
            self.used += amount
            return True

    def give(self, amount: int) -> None:
        with self._lock:
            self.used -= amount


class _RefusalLog:
    """Logs refused requests at most ``per_s`` times a second; counts what it skips."""

    def __init__(self, per_s: int = REFUSAL_LOG_PER_S) -> None:
        self.per_s = per_s
        self._lock = threading.Lock()
        self._window = 0
        self._written = 0
        self.suppressed = 0

    def refused(self, method: str, code: str, message: str) -> None:
        with self._lock:
            window = int(time.monotonic())
            if window != self._window:
                self._window, self._written = window, 0
            if self._written >= self.per_s:
                self.suppressed += 1
                return
            self._written += 1
            skipped, self.suppressed = self.suppressed, 0
        log.info(
            "request refused",
            extra=fields(method=method, code=code, error=message[:500], suppressed=skipped),
        )


class _Released:
    """Iterates ``chunks``, then leaves ``slot`` (also when dropped half-read)."""

    def __init__(self, chunks: list[Any], slot: contextlib.AbstractContextManager[None]) -> None:
        self._chunks = iter(chunks)
        self._slot: contextlib.AbstractContextManager[None] | None = slot

    def __iter__(self) -> _Released:
        return self

    def __next__(self) -> Any:
        try:
            return next(self._chunks)
        except StopIteration:
            self.release()
            raise

    def release(self) -> None:
        slot, self._slot = self._slot, None
        if slot is not None:
            slot.__exit__(None, None, None)

    def __del__(self) -> None:
        self.release()


class _CallLimit(flight.ServerMiddlewareFactory):
    """Refuses a call at once when ``max_concurrent_calls`` are being served."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.calls = _Budget(limit)

    def start_call(self, info: Any, headers: Any) -> flight.ServerMiddleware:
        if not self.calls.take(1):
            err = ThrottlingQuotaExceededError(
                f"broker is serving max_concurrent_calls={self.calls.limit} calls; retry"
            )
            raise flight.FlightServerError(encode(err), extra_info=encode(err).encode())
        return _CallDone(self.calls)


class _CallDone(flight.ServerMiddleware):
    def __init__(self, calls: _Budget) -> None:
        super().__init__()
        self.calls = calls

    def call_completed(self, exception: Any) -> None:
        self.calls.give(1)


def _tp_list(raw: Any) -> list[TopicPartition]:
    try:
        return [TopicPartition(str(t), int(p)) for t, p in raw]
    except (TypeError, ValueError):
        raise InvalidRequestError(
            "partition list is not accepted; accepted: [[topic, partition], ...]"
        ) from None


class FlightBroker(flight.FlightServerBase):
    """Arrow Flight server delegating to a :class:`Broker`."""

    def __init__(self, broker: Broker, location: str) -> None:
        config = broker.config
        self.call_limit = _CallLimit(config.max_concurrent_calls)
        from sparklog.broker_lite import flight_security

        super().__init__(
            location,
            middleware={"limit": self.call_limit, **flight_security.middleware(broker)},
            **flight_security.server_options(config),
        )
        self.broker = broker
        self.kafka: Any = None  # the Kafka listener, set by start_broker
        self.request_bytes = _Budget(config.max_inflight_request_bytes)
        self._per_connection: dict[str, int] = {}
        self._connections_lock = threading.Lock()
        self.refusals = _RefusalLog()
        groups = broker.groups

        def create_topic(
            name: str,
            partitions: int,
            config: Any,
            value_schema: Any,
            replication_factor: int,
            created_by: str | None = None,
        ) -> Any:
            # created_by: the caller, added by do_action (per-principal caps)
            return broker.create_topic(
                name, partitions, config, value_schema, replication_factor, created_by
            )

        # the server function of each action of sparklog.protocol.actions.ACTIONS, called with
        # that action's parsed fields by name; its result crosses as wire.encode_result
        self.actions: dict[str, Callable[..., Any]] = {
            "metadata": lambda topics, sizes: broker.metadata(topics, sizes=sizes),
            "describe_cluster": lambda: broker.describe_cluster(),
            "list_topics": lambda: broker.root.list_topics(),
            "create_topic": create_topic,
            "delete_topic": lambda name: broker.delete_topic(name),
            "alter_topic_config": lambda name, updates, remove: broker.alter_topic_config(
                name, updates, remove
            ),
            "add_partitions": lambda name, total: broker.add_partitions(name, total),
            "list_offsets": lambda topic, partition, spec: broker.list_offsets(
                topic, partition, spec
            ),
            "init_producer_id": lambda: list(broker.init_producer_id()),
            "delete_records": lambda topic, partition, offset: broker.delete_records(
                topic, partition, offset
            ),
            "join_group": self._join,
            "sync_group": self._sync,
            "heartbeat": lambda group, generation, member_id: groups.heartbeat(
                group, generation, member_id
            ),
            "leave_group": lambda group, member_id: groups.leave_group(group, member_id),
            "commit_offsets": self._commit,
            "fetch_offsets": lambda group: [
                [t, p, o, m] for (t, p), (o, m) in sorted(groups.fetch_committed(group).items())
            ],
            "list_groups": lambda: groups.list_groups(),
            "describe_group": lambda group: groups.describe_group(group),
            "delete_group": lambda group: groups.delete_group(group),
            "list_transactions": lambda: broker.transactions.list(),
            "transaction_state": lambda transactional_id: broker.transactions.state_for_leader(
                transactional_id
            ),
            "write_txn_markers": lambda topic, markers: write_led_markers(
                broker.state, topic, markers
            ),
            "commit_staged": lambda topic, topic_id, appends, producers, txn: commit_handed_over(
                broker.state, topic, topic_id, appends, producers, txn
            ),
            "commit_mirrored": lambda topic, topic_id, appends, link, expected: (
                commit_mirrored_handed_over(broker.state, topic, topic_id, appends, link, expected)
            ),
            "abort_transaction": lambda transactional_id: broker.transactions.abort(
                transactional_id
            ),
            "set_scram_credential": lambda user, mechanism, **salted: users.set_salted(
                broker.root.metadata, user, mechanism, **salted
            ),
            "delete_scram_credential": lambda user, mechanism: users.delete(
                broker.root.metadata, user, mechanism
            ),
            "list_users": lambda: users.users(broker.root.metadata.image()),
            # mirror links: the hook the broker's entry point handed it (sparklog.mirror's)
            "create_mirror_link": lambda **link: broker.mirror_links().create(**link),
            "list_mirror_links": lambda: broker.mirror_links().list_all(),
            "describe_mirror_link": lambda name: broker.mirror_links().describe(name),
            "pause_mirror_link": lambda name, paused: broker.mirror_links().pause(name, paused),
            "delete_mirror_link": lambda name: broker.mirror_links().delete(name),
            "promote_mirror_topic": lambda topic: broker.mirror_links().promote(topic),
            "reverse_mirror_link": lambda **how: broker.mirror_links().reverse(**how),
            "delete_offsets": lambda group, partitions: wire.encode_partition_errors(
                groups.delete_offsets(
                    group, [TopicPartition(str(t), int(p)) for t, p in partitions]
                )
            ),
        }
        assert set(self.actions) == set(actions.ACTIONS), "every action has one server function"

    # -- error boundary ----------------------------------------------------
    def _guard(self, method: str, call: Callable[[], Any]) -> Any:
        try:
            if not self.broker.ready:
                # The listener is up before the broker has its lease and threads (it needs
                # the port to advertise): refuse with a retriable error until it is ready.
                raise BrokerNotAvailableError(
                    f"broker {self.broker.config.broker_id} is starting; retry"
                )
            result = call()
            self.broker.metrics.requests.labels(method, "NONE").inc()
            return result
        except flight.FlightError:
            raise
        except SparklogError as exc:
            err = exc
            if isinstance(exc, CorruptRecordError):
                report_damage(exc)  # the operator must hear of it; the client is not at fault
        except Exception as exc:
            # only the request decoders' own errors are the client's fault (they raise
            # InvalidRequestError); anything else is the broker's, with its traceback
            log.exception("unexpected error", extra=fields(method=method))
            err = UnknownServerError(f"internal error in {method}: {type(exc).__name__}: {exc}")
        self.broker.metrics.requests.labels(method, err.code).inc()
        if not isinstance(err, NotLeaderOrFollowerError | RebalanceInProgressError):
            self.refusals.refused(method, err.code, err.message)
        raise flight.FlightServerError(encode(err), extra_info=encode(err).encode())

    @contextlib.contextmanager
    def _connection_slot(self, method: str, context: flight.ServerCallContext) -> Iterator[None]:
        """Hold one of the ``max_calls_per_connection`` slots of the caller's connection."""
        peer = context.peer()
        limit = self.broker.config.max_calls_per_connection
        with self._connections_lock:
            held = self._per_connection.get(peer, 0)
            if held >= limit:
                refused = True
            else:
                refused = False
                self._per_connection[peer] = held + 1
        if refused:

            def refuse() -> None:
                raise ThrottlingQuotaExceededError(
                    f"connection has max_calls_per_connection={limit} calls open; retry"
                )

            self._guard(method, refuse)
        try:
            yield
        finally:
            with self._connections_lock:
                left = self._per_connection.get(peer, 1) - 1
                if left > 0:
                    self._per_connection[peer] = left
                else:
                    self._per_connection.pop(peer, None)

    # -- actions -----------------------------------------------------------
    def list_actions(self, context: flight.ServerCallContext) -> list[tuple[str, str]]:
        return [(name, "JSON body, JSON result") for name in sorted(self.actions)]

    def do_action(
        self, context: flight.ServerCallContext, action: flight.Action
    ) -> Iterator[bytes]:
        name = action.type

        def run() -> bytes:
            handler = self.actions.get(name)
            spec = actions.ACTIONS.get(name)
            if handler is None or spec is None:
                raise InvalidRequestError(
                    f"unknown action {name!r}; accepted: {', '.join(sorted(self.actions))}"
                )
            body = wire.body(action.body.to_pybytes() if action.body is not None else b"")
            args = spec.parse(body)
            who = flight_acls.caller(self.broker, context)
            flight_acls.check_action(who, spec, args, self.broker.root.list_topics)
            if name == "create_topic":  # the topic is the caller's (per-principal caps)
                auth = context.get_middleware("auth")
                args["created_by"] = getattr(auth, "principal", None) or flight_acls.ANONYMOUS
            return wire.encode_result(flight_acls.filter_result(who, name, args, handler(**args)))

        with self._connection_slot(name, context):
            payload = self._guard(name, run)
        return iter([payload])

    def _join(
        self,
        group: str,
        member_id: str,
        topics: list[str],
        strategy: Any,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
    ) -> dict[str, Any]:
        result = self.broker.groups.join_group(
            group, member_id, topics, strategy, session_timeout_ms, rebalance_timeout_ms
        )
        return wire.encode_join_result(result)

    def _sync(
        self, group: str, generation: int, member_id: str, assignment: dict[str, Any] | None
    ) -> list[list[Any]]:
        tps = None if assignment is None else {m: _tp_list(v) for m, v in assignment.items()}
        got = self.broker.groups.sync_group(group, generation, member_id, tps)
        return [[t, p] for t, p in got]

    def _commit(
        self, group: str, generation: int, member_id: str, offsets: list[Any], metadata: str
    ) -> None:
        try:
            by_partition = {TopicPartition(str(t), int(p)): int(o) for t, p, o in offsets}
        except (TypeError, ValueError):
            raise InvalidRequestError(
                "offsets are not accepted; accepted: [[topic, partition, offset], ...]"
            ) from None
        self.broker.groups.commit_offsets(group, generation, member_id, by_partition, metadata)

    # -- produce -----------------------------------------------------------
    def do_put(
        self,
        context: flight.ServerCallContext,
        descriptor: flight.FlightDescriptor,
        reader: flight.MetadataRecordBatchReader,
        writer: flight.FlightMetadataWriter,
    ) -> None:
        config = self.broker.config
        reserved = [0]

        def run() -> bytes:
            command = wire.parse(wire.PRODUCE, wire.body(descriptor.command or b""))
            who = flight_acls.caller(self.broker, context)
            if who is not None:
                who.check("WRITE", "TOPIC", str(command["topic"]))
            default_partition = command["partition"]
            items: list[tuple[int, pa.RecordBatch]] = []
            size = 0
            while True:
                try:
                    chunk = reader.read_chunk()
                except StopIteration:
                    break
                except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
                    raise InvalidRequestError(
                        f"produce stream does not parse as Arrow IPC: {exc}"
                    ) from exc
                if chunk.data is None:
                    continue
                partition = default_partition
                if chunk.app_metadata is not None and chunk.app_metadata.size:
                    meta = wire.parse(
                        wire.PRODUCE_BATCH,
                        wire.body(chunk.app_metadata.to_pybytes()),
                        {"partition": default_partition},
                    )
                    partition = meta["partition"]
                if partition is None:
                    raise InvalidRequestError(
                        "no partition for a produced batch; give 'partition' in the command or "
                        "in the batch's app_metadata"
                    )
                cost = chunk.data.nbytes + BATCH_OVERHEAD_BYTES
                size += cost
                if size > config.max_request_bytes:
                    raise MessageSizeTooLargeError(
                        f"produce request exceeds max_request_bytes={config.max_request_bytes}"
                    )
                if len(items) >= config.max_request_batches:
                    raise InvalidRequestError(
                        f"produce request carries more than max_request_batches="
                        f"{config.max_request_batches} record batches; send fewer, larger ones"
                    )
                if not self.request_bytes.take(cost):
                    raise ThrottlingQuotaExceededError(
                        f"broker holds max_inflight_request_bytes="
                        f"{config.max_inflight_request_bytes} of produce requests; retry"
                    )
                reserved[0] += cost
                items.append((partition, chunk.data))
            outcomes = self.broker.produce(
                command["topic"],
                items,
                acks=str(command["acks"]),
                producer_id=command["producer_id"],
                producer_epoch=command["producer_epoch"],
                base_sequence=command["base_sequence"],
                compression=command["compression"],
            )
            return wire.encode_produce_reply(
                [
                    wire.PartitionAppend(partition, o.base_offset, o.record_count, o.duplicate)
                    for (partition, _), o in zip(items, outcomes, strict=True)
                ]
            )

        with self._connection_slot("produce", context):
            try:
                payload = self._guard("produce", run)
            finally:
                self.request_bytes.give(reserved[0])
        writer.write(pa.py_buffer(payload))

    # -- fetch -------------------------------------------------------------
    def do_get(
        self, context: flight.ServerCallContext, ticket: flight.Ticket
    ) -> flight.FlightDataStream:
        def run() -> flight.FlightDataStream:
            request = wire.parse(wire.FETCH, wire.body(ticket.ticket))
            who = flight_acls.caller(self.broker, context)
            if who is not None:
                who.check("READ", "TOPIC", str(request["topic"]))
            batches, hwm, lso, schema = self.broker.fetch(
                request["topic"],
                request["partition"],
                request["offset"],
                request["max_bytes"],
                request["max_wait_ms"],
                isolation_level=request["isolation_level"],
            )
            meta = pa.py_buffer(wire.encode_fetch_meta(hwm, lso))
            empty = pa.RecordBatch.from_pylist([], schema=schema)
            chunks = [(b, meta) for b in batches] or [(empty, meta)]
            return chunks, schema

        slot = self._connection_slot("fetch", context)
        slot.__enter__()
        try:
            chunks, schema = self._guard("fetch", run)
        except BaseException:
            slot.__exit__(None, None, None)
            raise

        # the slot is held until the client has read the stream (or the call is dropped)
        return flight.GeneratorStream(schema, _Released(chunks, slot))

    # -- metadata ----------------------------------------------------------
    def _flight_info(self, name: str, topic: dict[str, Any]) -> flight.FlightInfo:
        schema = pa.schema([("offset", pa.int64())])
        endpoints = []
        for p in topic["partitions"]:
            ticket = wire.build(
                wire.FETCH, topic=name, partition=p["partition"], offset=p["log_start_offset"]
            )
            locations = [f"grpc://{p['leader_location']}"] if p["leader_location"] else []
            endpoints.append(flight.FlightEndpoint(ticket, locations))
        return flight.FlightInfo(
            schema,
            flight.FlightDescriptor.for_path(name),
            endpoints,
            total_records=sum(
                p["high_watermark"] - p["log_start_offset"] for p in topic["partitions"]
            ),
            total_bytes=-1,
            app_metadata=json.dumps(topic).encode(),
        )

    def get_flight_info(
        self, context: flight.ServerCallContext, descriptor: flight.FlightDescriptor
    ) -> flight.FlightInfo:
        def run() -> flight.FlightInfo:
            if descriptor.path:
                name = descriptor.path[0].decode(errors="replace")
            else:
                command = wire.body(descriptor.command or b"")
                name = wire.parse(wire.FLIGHT_INFO, command)["topic"]
            who = flight_acls.caller(self.broker, context)
            if who is not None:
                who.check("DESCRIBE", "TOPIC", name)
            meta = self.broker.metadata([name])
            return self._flight_info(name, meta["topics"][name])

        with self._connection_slot("get_flight_info", context):
            return self._guard("get_flight_info", run)

    def list_flights(
        self, context: flight.ServerCallContext, criteria: bytes
    ) -> Iterator[flight.FlightInfo]:
        def run() -> dict[str, Any]:
            who = flight_acls.caller(self.broker, context)
            return flight_acls.filter_result(who, "metadata", {}, self.broker.metadata(None))

        meta = self._guard("list_flights", run)
        for name, topic in meta["topics"].items():
            yield self._flight_info(name, topic)


def _raise_open_files_limit() -> None:
    """Use the hard limit on open files: every client connection holds one."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def _check_port_free(host: str, port: int) -> None:
    """Refuse a Flight listen address another process holds, in one line.

    gRPC reports a port in use only through its C++ log (several lines on stderr)
    and a bare "Server did not start properly"; a plain bind first, with the
    SO_REUSEADDR gRPC itself uses, names the cause. A port taken between this check
    and gRPC's bind still fails, with gRPC's words.
    """
    import socket

    if port == 0:
        return
    try:
        infos = socket.getaddrinfo(host.strip("[]") or None, port, type=socket.SOCK_STREAM)
    except OSError:
        return  # an unresolvable host: gRPC's own error says so
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            raise InvalidConfigurationError(
                f"config key 'listen' = {host}:{port}: cannot listen there "
                f"({exc.strerror or exc}: another process, perhaps another broker, holds it); "
                "accepted: a free HOST:PORT on this machine (each broker on one host needs its "
                "own, e.g. --listen 127.0.0.1:8816), port 0 to pick one"
            ) from None


def start_broker(
    config: BrokerConfig,
    root: LogRoot | None = None,
    *,
    clock_ms: Clock = now_ms,
    mirror: Callable[[LogRoot], MirrorLinks] | None = None,
) -> tuple[FlightBroker, Broker, int | None]:
    """Start a broker in this process; return (flight server, broker, metrics port).
    ``mirror``: the mirroring application's hook (:class:`Broker`), if this process has it."""
    _check_port_free(config.listen_host, config.listen_port)
    broker = Broker(config, root, clock_ms=clock_ms, mirror=mirror)
    try:
        from sparklog.broker_lite.flight_security import scheme

        server = FlightBroker(broker, f"{scheme(config)}://{config.listen}")
    except (flight.FlightError, pa.ArrowException, OSError) as exc:
        raise InvalidConfigurationError(
            f"config key 'listen' = {config.listen!r}: cannot listen there ({exc}); accepted: "
            "a free HOST:PORT on this machine (port 0 picks one)"
        ) from None
    host = config.advertised_host or config.listen_host
    location = f"{host}:{server.port}"
    metrics_port = None
    if config.metrics_listen:  # before the lease: a broker that cannot start must not lead
        try:
            metrics_port = broker.metrics.serve(
                config.metrics_listen, hide_names=config.metrics_names_hidden
            )
        except OSError as exc:
            server.shutdown()
            raise InvalidConfigurationError(
                f"config key 'metrics_listen' = {config.metrics_listen!r}: cannot listen there "
                f"({exc.strerror or exc}); accepted: a free HOST:PORT on this machine (each broker "
                "on one host needs its own, e.g. SPARKLOG_METRICS_LISTEN=127.0.0.1:9816), port 0 "
                "to pick one, or empty to disable"
            ) from None
    kafka = None
    if config.kafka_listen:
        from sparklog.broker_lite.kafka.server import KafkaListener

        try:
            kafka = KafkaListener(broker, config.kafka_listen, config.kafka_advertised)
        except OSError as exc:
            server.shutdown()
            broker.metrics.stop()
            raise InvalidConfigurationError(
                f"config key 'kafka_listen' = {config.kafka_listen!r}: cannot listen there "
                f"({exc}); accepted: a free HOST:PORT on this machine (port 0 picks one) or "
                '"" to disable'
            ) from None
    try:
        broker.start(location, kafka.advertised if kafka else None)
    except BaseException:
        server.shutdown()
        broker.metrics.stop()
        if kafka is not None:
            kafka.close()
        raise
    if kafka is not None:
        kafka.start()
    server.kafka = kafka
    warn_at_start(config)
    log.info(
        "broker started",
        extra=fields(
            broker_id=config.broker_id,
            location=location,
            port=server.port,
            kafka_address=kafka.advertised if kafka else None,
            metrics_port=metrics_port,
            root=broker.root.url,
        ),
    )
    return server, broker, metrics_port


def stop_broker(server: FlightBroker, broker: Broker) -> None:
    """Graceful stop: flush and commit pending produce, resign the lease, stop serving."""
    broker.close()
    if server.kafka is not None:
        server.kafka.close()
    server.shutdown()
    broker.metrics.stop()


def _freeze_startup_heap(kafka: Any) -> None:
    """Move the objects made at startup out of the garbage collector's reach.

    A broker process holds some hundred thousand long-lived objects (pyarrow,
    pandas, kio's message classes); each full collection walks all of them, a
    pause of tens of milliseconds for every request in flight.  Once startup
    (and the Kafka codec's lazy imports) is done they are collected once and
    frozen, so later collections walk only what requests create.
    """
    if kafka is not None:
        kafka.warmed.wait(60)
    gc.collect()
    gc.freeze()


def dump_stacks_on_sigusr1() -> Any:
    """An operator's view of a stuck broker, as a JVM's thread dump on SIGQUIT: every
    thread's stack to stderr on SIGUSR1 (docs/operations.md).

    A Python-level handler, not ``faulthandler.register``: the C-level handler walks
    other threads' frames while they run and crashes the process when a thread starts
    or ends during the walk. Run between bytecodes in the main thread, the walk sees
    every other thread parked off the GIL. The broker's main thread only waits on an
    event, which a signal interrupts, so the dump comes at once. Returns the handler
    it replaced."""

    def on_dump(signum: int, frame: Any) -> None:
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)

    return signal.signal(signal.SIGUSR1, on_dump)


def serve(
    config_path: str | None = None,
    root: str | LogRoot | None = None,
    listen: str | None = None,
    broker_id: int | None = None,
    kafka_listen: str | None = None,
    *,
    clock_ms: Clock = now_ms,
    mirror: Callable[[LogRoot], MirrorLinks] | None = None,
) -> None:
    """Run a broker until SIGTERM or SIGINT (blocking); the CLI's ``broker start``.
    ``clock_ms``: the broker's wall clock (a test launcher skews it); ``mirror``: the
    mirroring application's hook, handed by the entry point (:class:`Broker`)."""
    overrides: dict[str, Any] = {
        "listen": listen,
        "broker_id": broker_id,
        "kafka_listen": kafka_listen,
    }
    if isinstance(root, str):
        overrides["root"] = root
    config = load_config(config_path, overrides)
    setup_logging(config.log_level, config.log_format, config.broker_id)
    _raise_open_files_limit()
    stop = threading.Event()

    def on_signal(signum: int, frame: Any) -> None:
        log.info("signal received; shutting down", extra=fields(signal=signum))
        stop.set()

    # before the broker says it started: a SIGUSR1 sent as soon as the "broker started"
    # line appears must find its handler, not SIGUSR1's default action (ending the process)
    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    previous[signal.SIGUSR1] = dump_stacks_on_sigusr1()
    try:
        server, broker, _ = start_broker(
            config, root if isinstance(root, LogRoot) else None, clock_ms=clock_ms, mirror=mirror
        )
    except BaseException:
        for s, handler in previous.items():
            signal.signal(s, handler)
        raise
    threading.Thread(
        target=_freeze_startup_heap, args=(server.kafka,), name="gc-freeze", daemon=True
    ).start()
    try:
        while not stop.wait(0.5):
            pass
    finally:
        stop_broker(server, broker)
        for s, handler in previous.items():
            signal.signal(s, handler)
