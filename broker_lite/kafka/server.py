"""The Kafka listener: TCP framing, request headers, dispatch, responses.

One thread per connection reads size-prefixed frames; up to ``MAX_IN_FLIGHT`` of
them are handled at once (so a client pipelining small produce requests gets them
joined into one commit by the broker's batcher) and a writer thread sends the
answers in request order, as Kafka requires.  A request that waits (a JoinGroup
until its rebalance completes, a follower's SyncGroup, a long-poll Fetch until
records come: :mod:`~sparklog.broker_lite.kafka.fetch_waits`) is parked: its
handler returns a future of the response and the request thread goes back to the
pool; the answer takes its place in the connection's order when the future
completes (:mod:`~sparklog.broker_lite.kafka.parking`). A throttled answer leaves
at once and mutes its connection (:class:`~sparklog.broker_lite.kafka.quotas.Mute`):
the reader handles nothing more from it until the throttle time has passed. A
connection's Produce requests reach the batchers in the order they were sent
(Kafka appends them in that order, idempotent or not: :class:`ProduceTurn`); an
idempotent producer's wait for the previous one's commit, so its sequence numbers
reach the log in order. Frames larger than ``kafka_max_request_bytes``, negative
sizes and headers that do not parse close that connection only (frames are read within the bounds of
:mod:`~sparklog.broker_lite.kafka.limits`: connections per IP and in all, idle and
unauthenticated ones, memory of frames being read); a request for an unknown API or
an unsupported version closes the connection too, as Kafka does, except ApiVersions,
which follows KIP-511 (a v0 answer with UNSUPPORTED_VERSION listing the supported
ranges). Old versions kio does not generate go through
:mod:`~sparklog.broker_lite.kafka.legacy` (aiokafka's schemas of them).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import queue
import socket
import struct
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import IO, Any, cast

from kio.index import load_request_schema
from kio.serial import entity_reader, entity_writer

from sparklog.broker_lite.kafka import authorize, limits, metadata, quotas, sasl, tls
from sparklog.broker_lite.kafka.fetch_waits import FetchPurgatory
from sparklog.broker_lite.kafka.legacy import LEGACY, Legacy, LegacyDecodeError, decode_header
from sparklog.broker_lite.kafka.parking import chain
from sparklog.broker_lite.kafka.producer_ids import ProducerIdAllocator
from sparklog.broker_lite.logs import fields
from sparklog.clock import now_ms
from sparklog.errors import SslAuthenticationFailedError
from sparklog.groups.purgatory import DeadlineTimer
from sparklog.security.acls import super_users

log = logging.getLogger("sparklog.broker_lite.kafka")
SIZE = struct.Struct(">i")
CORRELATION = struct.Struct(">i")
#: Requests of one connection handled at once (answers still leave in order).
MAX_IN_FLIGHT = 64


@dataclass
class RequestContext:
    """What a handler knows about the request besides its body."""

    listener: KafkaListener
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    produce_turn: ProduceTurn | None = None
    #: the connection's authentication state and principal (sasl.Session)
    session: Any = None
    #: the connection's mute: a throttled answer stops its reader for the throttle time
    mute: quotas.Mute | None = None

    @property
    def broker(self) -> Any:
        return self.listener.broker


class ProduceTurn:
    """One Produce request's place in its connection's line of Produce requests.

    Kafka handles a connection's requests one at a time, so records a client sends
    in two requests land in the order sent even without idempotence (kcat, a
    producer with ``max.in.flight`` above 1).  Here requests run at once, so each
    waits until the previous one's records are queued in the batchers (``queued``)
    before queueing its own; an idempotent one waits until it is committed
    (``finished``).  A finished turn forgets the one before it, so a long-lived
    connection holds no chain of them.
    """

    def __init__(self, previous: ProduceTurn | None) -> None:
        self.previous = previous
        self.queued = threading.Event()
        self.finished = threading.Event()

    def wait_for_previous(self, *, committed: bool) -> None:
        """Until the previous request's records are queued (``committed``: committed)."""
        previous = self.previous
        if previous is not None:
            (previous.finished if committed else previous.queued).wait()

    def finish(self) -> None:
        self.queued.set()
        self.finished.set()
        self.previous = None


class MalformedRequest(Exception):
    """The frame cannot be parsed as a request: the connection is closed."""


class KafkaListener:
    """Accepts Kafka clients on ``listen`` (HOST:PORT; port 0 = a free port)."""

    def __init__(self, broker: Any, listen: str, advertised: str = "") -> None:
        from sparklog.broker_lite.kafka.versions import API_TABLE

        self.broker = broker
        self.table = API_TABLE
        config = broker.config
        self.max_request_bytes = int(config.kafka_max_request_bytes)
        self.idle_s = config.connections_max_idle_ms / 1000
        self.failed_auth_delay_s = config.connection_failed_authentication_delay_ms / 1000
        self.connections = limits.ConnectionTable(
            config.max_connections,
            config.max_connections_per_ip,
            config.max_unauthenticated_connections,
            config.max_connections_per_principal,
        )
        self.creation_rate = limits.CreationRate(config.max_connection_creation_rate)
        #: a principal's requests handled at once (queued_max_requests_per_principal; 0: a
        #: quarter of the request threads): more wait unread in its own connections
        self.principal_requests = limits.PrincipalRequests(
            int(config.queued_max_requests_per_principal) or max(1, int(config.num_io_threads) // 4)
        )
        #: KIP-612's per-IP connection_creation_rate (client quotas on ip entities); a
        #: connection past it is held unread for its throttle time, then closed
        self.ip_creation = quotas.IpConnectionQuota()
        self._held: dict[str, socket.socket] = {}
        self._held_ids = itertools.count()
        self._held_lock = threading.Lock()
        self._release = DeadlineTimer(self._close_held, name="kafka-throttled-connections")
        self._uncapped = super_users(config) | {sasl.ANONYMOUS}
        #: memory of the frames being read and handled (queued_max_request_bytes)
        self.queued_bytes = limits.ByteBudget(config.queued_max_request_bytes)
        #: before SASL authentication: frames of sasl_server_max_receive_size at most, in a
        #: budget of their own with room for one on each unauthenticated connection
        self.pre_auth_max_bytes = min(
            self.max_request_bytes, int(config.sasl_server_max_receive_size)
        )
        self.pre_auth_bytes = limits.ByteBudget(
            self.pre_auth_max_bytes * int(config.max_unauthenticated_connections)
        )
        #: bytes of Produce requests being handled (max_inflight_request_bytes, as Flight)
        self.produce_bytes = limits.ByteBudget(config.max_inflight_request_bytes)
        self.refusals = limits.RateLimitedLog()
        #: api name -> its ``sparklog_kafka_request_seconds`` child, looked up once
        self._request_timers: dict[str, Any] = {}
        self.security_protocol = str(config.kafka_security_protocol)
        self.tls = tls.server_context(config)
        self.quotas = quotas.QuotaManager()
        #: each topic's Metadata answer entry, encoded once (kept while it holds)
        self.metadata_entries = metadata.topic_entries()
        #: each open connection's mute (throttled connections read nothing until it ends)
        self._mutes: set[quotas.Mute] = set()
        self._mutes_lock = threading.Lock()
        host, _, port = listen.rpartition(":")
        host = host.strip("[]")
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._sock = socket.socket(family, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self._sock.bind((host, int(port)))
        except OSError:
            self._sock.close()
            raise
        self._sock.listen(256)
        self.port = int(self._sock.getsockname()[1])
        if advertised:
            adv_host, _, adv_port = advertised.rpartition(":")
            self.advertised = f"{adv_host}:{self.port if adv_port == '0' else adv_port}"
        else:
            self.advertised = f"{host}:{self.port}"
        self.pool = ThreadPoolExecutor(32, thread_name_prefix="kafka-work")
        self.requests = ThreadPoolExecutor(
            int(config.num_io_threads), thread_name_prefix="kafka-request"
        )
        #: long-poll fetches waiting for records, tried again on the request pool
        self.fetches = FetchPurgatory(self.requests.submit, int(config.fetch_refresh_ms))
        broker.commit_hooks.append(self.fetches.committed)
        self.producer_ids = ProducerIdAllocator(broker.root.store, broker.config.broker_id)
        self._stopping = threading.Event()
        #: Set once the record codec's lazy imports are done (see records.warm_up).
        self.warmed = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def advertised_host(self) -> str:
        return self.advertised.rpartition(":")[0]

    @property
    def advertised_port(self) -> int:
        return int(self.advertised.rpartition(":")[2])

    def start(self) -> None:
        threading.Thread(target=self._warm_up, name="kafka-warm-up", daemon=True).start()
        self._thread = threading.Thread(target=self._accept_loop, name="kafka-accept", daemon=True)
        self._thread.start()

    def _warm_up(self) -> None:
        from sparklog.broker_lite.kafka.records import warm_up

        try:
            warm_up()
        finally:
            self.warmed.set()

    def muted_connections(self) -> int:
        """Connections muted now for a throttle (their readers wait, no request thread)."""
        with self._mutes_lock:
            return sum(1 for mute in self._mutes if mute.remaining_s() > 0)

    def close(self) -> None:
        self._stopping.set()
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()
        for conn in self.connections.all():
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._release.close()
        with self._held_lock:
            held, self._held = list(self._held.values()), {}
        for sock in held:
            sock.close()
        with contextlib.suppress(ValueError):
            self.broker.commit_hooks.remove(self.fetches.committed)
        self.fetches.close()
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.requests.shutdown(wait=False, cancel_futures=True)

    def _accept_loop(self) -> None:
        while not self._stopping.is_set():
            try:
                conn, peer = self._sock.accept()
            except OSError:
                if self._stopping.is_set():
                    return
                continue
            pause_s = self.creation_rate.delay_s()  # max_connection_creation_rate
            if pause_s > 0 and self._stopping.wait(pause_s):
                conn.close()
                return
            throttle_ms = self.ip_creation.throttle_ms(
                self.broker.root.metadata.image(), str(peer[0])
            )
            if throttle_ms > 0:
                self._hold_then_close(conn, throttle_ms)
                self.refusals.warning(
                    "kafka connection throttled: connection_creation_rate of its address",
                    peer=str(peer),
                    throttle_ms=throttle_ms,
                )
                continue
            refused, evicted = self.connections.admit(conn, str(peer[0]))
            for old in evicted:  # the oldest connections that never authenticated
                with contextlib.suppress(OSError):
                    old.shutdown(socket.SHUT_RDWR)
            if evicted:
                self.refusals.warning(
                    "kafka connections closed before authenticating",
                    count=len(evicted),
                    limit="max_unauthenticated_connections",
                )
            if refused is not None:
                conn.close()
                self.refusals.warning("kafka connection refused", reason=refused, peer=str(peer))
                continue
            conn.settimeout(self.idle_s)
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(
                target=self._serve, args=(conn, peer), name="kafka-conn", daemon=True
            ).start()

    def _hold_then_close(self, conn: socket.socket, throttle_ms: int) -> None:
        """Keep ``conn`` open and unread for ``throttle_ms``, then close it (Kafka's
        acceptor delays closing a connection throttled by its IP's quota); once
        ``max_connections`` are held, a throttled one is closed at once, so a flood
        cannot take the process's file descriptors."""
        key = f"held-{next(self._held_ids)}"
        with self._held_lock:
            if len(self._held) >= self.connections.max_connections:
                conn.close()
                return
            self._held[key] = conn
        self._release.at(now_ms() + throttle_ms, key)

    def _close_held(self, key: str) -> None:
        with self._held_lock:
            conn = self._held.pop(key, None)
        if conn is not None:
            conn.close()

    # -- one connection ------------------------------------------------------
    def _serve(self, conn: Any, peer: Any) -> None:
        """Read requests, handle up to ``MAX_IN_FLIGHT`` at once, answer them in order."""
        principal = sasl.ANONYMOUS
        if self.tls is not None:  # SSL, SASL_SSL: the handshake first, in this thread
            try:
                wrapped, cert_principal = tls.accept(self.tls, conn, self.idle_s)
            except (OSError, ValueError, SslAuthenticationFailedError) as exc:
                self.refusals.warning("kafka TLS handshake failed", peer=str(peer), error=str(exc))
                conn.close()
                self.connections.remove(conn)
                return
            self.connections.swap(conn, wrapped)
            conn = wrapped
            principal = cert_principal or principal
        pending: queue.Queue[Future[bytes | None] | None] = queue.Queue(MAX_IN_FLIGHT)
        closed = threading.Event()
        writer = threading.Thread(
            target=self._write_loop, args=(conn, peer, pending, closed), daemon=True
        )
        writer.start()
        last_produce: ProduceTurn | None = None
        last: Future[bytes | None] | None = None
        session = sasl.Session.for_listener(self.security_protocol, str(peer[0]), principal)
        mute = quotas.Mute()
        with self._mutes_lock:
            self._mutes.add(mute)
        try:
            while not self._stopping.is_set() and not closed.is_set():
                # a throttled answer mutes the connection: nothing is read until it ends
                # (Kafka's muted channel); this connection's thread waits, no request thread
                if mute.wait_out(self._stopping):
                    break
                try:
                    got = self._read_frame(conn, session)
                except limits.Idle:
                    if last is not None and not last.done():
                        continue  # a request is being answered (a long-polling fetch)
                    log.info(
                        "kafka connection closed: idle for connections_max_idle_ms",
                        extra=fields(peer=str(peer)),
                    )
                    break
                except limits.FrameError as exc:
                    if exc.limit is None:
                        raise MalformedRequest(str(exc)) from None
                    self.refusals.warning(
                        "kafka connection closed: request frame over a limit",
                        peer=str(peer),
                        size=exc.size,
                        limit=exc.limit,
                        authenticated=session.authenticated,
                        error=str(exc),
                    )
                    break
                if got is None:
                    break
                frame, held = got
                # a frame read while an earlier answer muted the connection waits too
                if mute.wait_out(self._stopping):
                    self._budget_of(session).give(held)
                    break
                if not session.authenticated:
                    if not self._authenticate(frame, held, session, pending, conn, peer):
                        break
                    continue
                if not self._admit_principal(conn, peer, session):
                    break
                # the principal's share of the request pool: while it has its cap of
                # requests being handled, this one waits here and the socket stays unread
                capped = None if session.principal in self._uncapped else session.principal
                if not self.principal_requests.take(capped, self._stopping):
                    self.queued_bytes.give(held)
                    break
                turn = None
                if frame[:2] == b"\x00\x00":  # Produce: appended in the order sent
                    turn = last_produce = ProduceTurn(last_produce)
                # the request's place in the answer order, filled when its answer is ready:
                # by the request thread, or later by a parked request's continuation
                future: Future[bytes | None] = Future()
                self.requests.submit(
                    self._handle_in_order, frame, turn, held, session, future, mute, capped
                )
                last = future
                while not closed.is_set():
                    try:
                        pending.put(future, timeout=0.5)
                        break
                    except queue.Full:
                        continue
        except MalformedRequest as exc:
            log.info("kafka connection closed: %s", exc, extra=fields(peer=str(peer)))
        except OSError:
            pass  # the client went away
        finally:
            while not closed.is_set():
                try:
                    pending.put(None, timeout=0.5)
                    break
                except queue.Full:
                    continue
            writer.join()
            with self._mutes_lock:
                self._mutes.discard(mute)
            if session.sasl and not session.authenticated and session.close_after:
                # a failed login: its answer is sent; the close waits, reading nothing
                # (Kafka's connection.failed.authentication.delay.ms), so a password
                # guesser gets one guess per delay per connection
                self._stopping.wait(self.failed_auth_delay_s)
            conn.close()
            self.connections.remove(conn)

    def _budget_of(self, session: Any) -> limits.ByteBudget:
        """The memory budget a frame of ``session`` is read into (see :meth:`_read_frame`)."""
        return self.queued_bytes if session.authenticated else self.pre_auth_bytes

    def _read_frame(self, conn: Any, session: Any) -> tuple[bytes, int] | None:
        """The next frame within the bounds of the connection's state: before SASL
        authentication ``sasl_server_max_receive_size`` and the pre-authentication budget."""
        if session.authenticated:
            return limits.read_frame(conn, self.max_request_bytes, self.queued_bytes)
        return limits.read_frame(
            conn,
            self.pre_auth_max_bytes,
            self.pre_auth_bytes,
            "sasl_server_max_receive_size",
            "max_unauthenticated_connections x sasl_server_max_receive_size",
        )

    def _handle_in_order(
        self,
        frame: bytes,
        turn: ProduceTurn | None,
        held: int,
        session: Any,
        answer: Future[bytes | None],
        mute: quotas.Mute | None = None,
        capped: str | None = None,
    ) -> None:
        """Handle one request on a request thread and fill its ``answer`` slot; a parked
        request (a JoinGroup waiting for its rebalance) fills it later, from the
        continuation that completes it, and this thread returns to the pool at once
        (giving back ``capped``'s slot: a parked request holds no thread)."""
        try:
            result = self.dispatch_frame(frame, turn, session, mute)
        except BaseException as exc:
            answer.set_exception(exc)
            return
        finally:
            self.queued_bytes.give(held)
            self.principal_requests.give(capped)
            if turn is not None:
                turn.finish()
        if isinstance(result, Future):
            chain(result, answer, lambda frame: frame)
        else:
            answer.set_result(result)

    def _write_loop(
        self,
        conn: socket.socket,
        peer: Any,
        pending: queue.Queue[Future[bytes | None] | None],
        closed: threading.Event,
    ) -> None:
        """Send responses in request order; a malformed request closes the connection."""
        try:
            while True:
                future = pending.get()
                if future is None:
                    return
                response = future.result()
                if response is not None:
                    conn.sendall(response)
        except MalformedRequest as exc:
            log.info("kafka connection closed: %s", exc, extra=fields(peer=str(peer)))
        except OSError:
            pass
        closed.set()
        with contextlib.suppress(OSError):
            conn.shutdown(socket.SHUT_RDWR)
        while True:  # unblock the reader; drop what is left
            try:
                if pending.get_nowait() is None:
                    return
            except queue.Empty:
                return

    def _admit_principal(self, conn: Any, peer: Any, session: Any) -> bool:
        """Count ``conn`` as its principal's; False: ``max_connections_per_principal`` is
        reached (a WARNING; the caller closes it)."""
        principal = session.principal
        capped = None if principal in self._uncapped else principal
        if self.connections.authenticated(conn, capped):
            return True
        self.refusals.warning(
            "kafka connection closed: max_connections_per_principal reached",
            principal=principal,
            peer=str(peer),
            limit=self.connections.max_per_principal,
        )
        return False

    def _authenticate(
        self,
        frame: bytes,
        held: int,
        session: Any,
        pending: queue.Queue[Any],
        conn: Any = None,
        peer: Any = None,
    ) -> bool:
        """Handle a request of a connection still authenticating, in the reader (one at a
        time, so the exchange stays in order); False: close the connection after it."""
        try:
            if session.raw_tokens:  # after SaslHandshake v0: a raw token, a raw reply
                reply = sasl.raw_token_reply(self.broker, session, frame)
                if reply is None:
                    self.refusals.warning(
                        "kafka SASL authentication failed", mechanism=session.mechanism
                    )
                    return False
                if session.authenticated and not self._admit_principal(conn, peer, session):
                    return False
                raw: Future[bytes | None] = Future()
                raw.set_result(struct.pack(">i", len(reply)) + reply)
                pending.put(raw)
                return True
            api_key = struct.unpack_from(">h", frame, 0)[0]
            if api_key not in sasl.PRE_AUTH_APIS:
                raise MalformedRequest(
                    f"api {api_key} before SASL authentication finished (kafka_security_protocol="
                    f"{self.security_protocol}: a client must authenticate first)"
                )
            answer: Future[bytes | None] = Future()
            answer.set_result(self.handle_frame(frame, None, session))  # never parked
        finally:
            self.pre_auth_bytes.give(held)
        if session.authenticated and not self._admit_principal(conn, peer, session):
            return False  # logged in past its principal's cap: closed, no success answer
        pending.put(answer)
        return not session.close_after

    # -- one request -----------------------------------------------------------
    def handle_frame(
        self,
        frame: bytes,
        produce_turn: ProduceTurn | None = None,
        session: Any = None,
    ) -> bytes | None:
        """The response frame for one request frame (None: no response, e.g. acks=0),
        waited for on this thread if the request is parked (:meth:`dispatch_frame`).

        ``produce_turn`` is a Produce request's place among its connection's.
        """
        result = self.dispatch_frame(frame, produce_turn, session)
        return result.result() if isinstance(result, Future) else result

    def dispatch_frame(
        self,
        frame: bytes,
        produce_turn: ProduceTurn | None = None,
        session: Any = None,
        mute: quotas.Mute | None = None,
    ) -> bytes | Future[bytes | None] | None:
        """The response frame for one request frame, or a future of it when the handler
        parked the request (:mod:`~sparklog.broker_lite.kafka.parking`); ``mute`` is the
        connection's, muted when its quota throttles the answer."""
        api_key, api_version, correlation_id = struct.unpack_from(">hhi", frame, 0)
        entry = self.table.get(api_key)
        if entry is None or not entry.min_version <= api_version <= entry.max_version:
            if api_key == 18:  # KIP-511: answer in v0 with the ranges we support
                from sparklog.broker_lite.kafka.versions import api_versions_fallback

                return self._encode(api_versions_fallback(self), correlation_id)
            # Kafka cannot parse such a request either and closes the connection (its
            # RequestContext.parseRequest fails): a body the client would misread is worse
            raise MalformedRequest(
                f"unsupported API {api_key} version {api_version} (ApiVersions lists the "
                "supported ranges)"
            )
        old = LEGACY.get((api_key, api_version))
        if old is not None:
            return self._handle_legacy(old, entry, frame, produce_turn, session, mute)
        request_cls = load_request_schema(api_key, api_version)
        try:
            header, offset = entity_reader(request_cls.__header_schema__)(frame, 0)
            request, _size = entity_reader(request_cls)(frame, offset)
        except Exception as exc:  # kio raises several types for bad bytes
            raise MalformedRequest(
                f"api {api_key} v{api_version} request does not parse ({type(exc).__name__}: {exc})"
            ) from None
        ctx = RequestContext(
            self,
            api_key,
            api_version,
            correlation_id,
            getattr(header, "client_id", None),
            produce_turn,
            session,
            mute,
        )
        response = self._run(entry, ctx, request)
        if isinstance(response, Future):
            encoded: Future[bytes | None] = Future()
            chain(
                response, encoded, lambda r: None if r is None else self._encode(r, correlation_id)
            )
            return encoded
        if response is None:
            return None
        return self._encode(response, correlation_id)

    def _handle_legacy(
        self,
        old: Legacy,
        entry: Any,
        frame: bytes,
        produce_turn: ProduceTurn | None,
        session: Any = None,
        mute: quotas.Mute | None = None,
    ) -> bytes | Future[bytes | None] | None:
        """An old version kio lacks: decoded by aiokafka's schema of it, run as
        ``old.served_as`` (a parked one, an old long-poll Fetch, answered when its
        future completes)."""
        try:
            api_key, _version, correlation_id, client_id, offset = decode_header(frame)
            request = old.read_request(frame, offset)
        except LegacyDecodeError as exc:
            raise MalformedRequest(
                f"api {old.api_key} v{old.version} request does not parse ({exc})"
            ) from None
        ctx = RequestContext(
            self, api_key, old.served_as, correlation_id, client_id, produce_turn, session, mute
        )
        response = self._run(entry, ctx, request)

        def encoded(answer: Any) -> bytes | None:
            if answer is None:
                return None
            return _frame(CORRELATION.pack(correlation_id) + old.write_response(answer))

        if isinstance(response, Future):
            later: Future[bytes | None] = Future()
            chain(response, later, encoded)
            return later
        return encoded(response)

    def _run(self, entry: Any, ctx: RequestContext, request: Any) -> Any:
        """The handler's response (within ACLs and quotas), or a future of it if the
        handler parked the request; a failure closes the connection, logged once.  The
        request's time is observed when its answer is ready, parked or not."""
        api_key, api_version = ctx.api_key, ctx.api_version
        started = time.perf_counter()
        parked = False
        try:
            response = quotas.run(ctx, request, lambda: authorize.run(entry.handler, ctx, request))
            if isinstance(response, Future):
                parked = True
                return self._when_answered(response, entry.name, started, api_key, api_version)
            return response
        except MalformedRequest:
            raise
        except Exception:
            log.exception(
                "kafka request failed", extra=fields(api_key=api_key, api_version=api_version)
            )
            raise MalformedRequest(f"api {api_key} v{api_version}: internal error") from None
        finally:
            if not parked:
                self._observe(entry.name, started)

    def _when_answered(
        self, parked: Future[Any], name: str, started: float, api_key: int, api_version: int
    ) -> Future[Any]:
        """A parked request's response once it is ready: its time observed then, and an
        unexpected failure (not an error the handler answered) logged and closing the
        connection, as a failing handler's does."""
        answer: Future[Any] = Future()

        def done(_: Future[Any]) -> None:
            self._observe(name, started)
            exc = parked.exception()
            if exc is None:
                answer.set_result(parked.result())
                return
            if not isinstance(exc, MalformedRequest):
                log.error(
                    "kafka request failed",
                    exc_info=exc,
                    extra=fields(api_key=api_key, api_version=api_version),
                )
                exc = MalformedRequest(f"api {api_key} v{api_version}: internal error")
            answer.set_exception(exc)

        parked.add_done_callback(done)
        return answer

    def _observe(self, name: str, started: float) -> None:
        timer = self._request_timers.get(name)
        if timer is None:
            timer = self.broker.metrics.kafka_request_seconds.labels(name)
            self._request_timers[name] = timer
        timer.observe(time.perf_counter() - started)

    def _encode(self, response: Any, correlation_id: int) -> bytes:
        header_cls = response.__header_schema__
        parts = _Parts()
        out = cast(IO[bytes], parts)  # kio only calls write()
        entity_writer(header_cls)(out, header_cls(correlation_id=correlation_id))
        if response.__api_key__ == metadata.API_KEY:  # its topics' entries kept encoded
            self.metadata_entries.write(out, response)
        else:
            entity_writer(type(response))(out, response)
        return parts.frame()


class _Parts:
    """What kio writes, kept as the pieces it wrote and joined once into a frame.

    A fetch response is mostly record batches of some megabytes; a growing
    buffer would copy them several times, the join copies them once.
    """

    def __init__(self) -> None:
        self.parts: list[bytes] = [b""]
        self.size = 0

    def write(self, data: bytes) -> int:
        self.parts.append(bytes(data) if not isinstance(data, bytes) else data)
        self.size += len(data)
        return len(data)

    def frame(self) -> bytes:
        self.parts[0] = SIZE.pack(self.size)
        return b"".join(self.parts)


def _frame(payload: bytes) -> bytes:
    return SIZE.pack(len(payload)) + payload
