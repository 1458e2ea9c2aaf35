"""Resource bounds of the Kafka listener: no one client can take the broker from the others.

* **Connections** (:class:`ConnectionTable`): ``max_connections`` in all,
  ``max_connections_per_ip`` from one address, ``max_connections_per_principal``
  authenticated as one principal (a login past it is closed; super users and
  User:ANONYMOUS are not counted), new ones at most
  ``max_connection_creation_rate`` a second (:class:`CreationRate`), and at most
  ``max_unauthenticated_connections`` that have not finished authentication
  (on a PLAINTEXT listener: not yet sent one whole request).  A connection
  over that last cap closes the *oldest* unauthenticated one rather than
  being refused, so a peer holding thousands of silent connections cannot
  lock a newcomer out; once the table is full, a newcomer also takes the
  place of the oldest unauthenticated connection.
* **Frames** (:func:`read_frame`): a frame's buffer grows as its bytes arrive,
  never allocated from the size prefix alone, and the memory all frames being
  read (and then handled) hold together is bounded by
  ``queued_max_request_bytes`` (:class:`ByteBudget`); a reader that cannot get
  memory for ``QUEUED_WAIT_S`` closes its connection, so half-sent frames that
  hold the budget cannot stall the listener for good.  Before SASL
  authentication a frame may be ``sasl_server_max_receive_size`` at most
  (Kafka's ``sasl.server.max.receive.size``, checked on the size prefix) and is
  charged to a budget of its own, room for that size on each of the
  ``max_unauthenticated_connections``: connections that never log in cannot
  take memory from the tenants that did, nor from each other.
* **Requests** (:class:`PrincipalRequests`): at most ``queued_max_requests_per_principal``
  of one principal's requests are handled at once; the rest wait unread in that
  principal's own connections, never in the shared request pool.
* **Produce** (:func:`bounded_produce`): the Kafka path applies Flight's
  ``max_request_batches`` and ``max_inflight_request_bytes``.
* **Logs** (:class:`RateLimitedLog`): refusals are logged a few times a second
  at most, with the count of the lines skipped.
"""

from __future__ import annotations

import logging
import socket
import struct
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kio.index import load_response_schema

from sparklog.broker_lite.kafka.messages import make, nested
from sparklog.broker_lite.logs import fields
from sparklog.errors import InvalidRequestError, SparklogError, ThrottlingQuotaExceededError

if TYPE_CHECKING:
    from sparklog.broker_lite.kafka.api_types import ProduceRequest, ProduceResponse
    from sparklog.broker_lite.kafka.context import HandlerContext


log = logging.getLogger("sparklog.broker_lite.kafka")

#: How long a frame being read waits for memory under ``queued_max_request_bytes``.
QUEUED_WAIT_S = 10.0
#: The first buffer of a frame; it doubles as bytes arrive, up to the frame's size.
FIRST_CHUNK_BYTES = 65_536
#: Refusal log lines written per second at most.
REFUSAL_LOG_PER_S = 5
SIZE = struct.Struct(">i")


class FrameError(Exception):
    """A frame that cannot be read: its connection is closed.

    ``limit`` names the key whose bound refused it (None: the peer broke the framing),
    ``size`` the frame's announced size; a refusal by a bound is logged at WARNING.
    """

    def __init__(self, message: str, limit: str | None = None, size: int = 0) -> None:
        super().__init__(message)
        self.limit = limit
        self.size = size


class Idle(Exception):
    """No byte of a new frame arrived within the socket's timeout (connections_max_idle_ms)."""


class RateLimitedLog:
    """Writes a warning at most ``per_s`` times a second and counts the ones it skipped."""

    def __init__(self, per_s: int = REFUSAL_LOG_PER_S) -> None:
        self.per_s = per_s
        self._lock = threading.Lock()
        self._window = 0
        self._written = 0
        self.suppressed = 0

    def warning(self, message: str, **extra: Any) -> None:
        with self._lock:
            window = int(time.monotonic())
            if window != self._window:
                self._window, self._written = window, 0
            if self._written >= self.per_s:
                self.suppressed += 1
                return
            self._written += 1
            skipped, self.suppressed = self.suppressed, 0
        log.warning(message, extra=fields(suppressed=skipped, **extra))


class ByteBudget:
    """Bytes many readers take and give back; ``take`` waits (bounded) for room.

    When nothing is taken any amount is granted, so one frame as large as the
    biggest accepted request can always be read.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self._cond = threading.Condition()

    def take(self, amount: int, timeout_s: float) -> bool:
        with self._cond:
            ok = self._cond.wait_for(
                lambda: self.used == 0 or self.used + amount <= self.limit, timeout=timeout_s
            )
            if not ok:
                return False
            self.used += amount
            return True

    def try_take(self, amount: int) -> bool:
        return self.take(amount, 0)

    def give(self, amount: int) -> None:
        if amount:
            with self._cond:
                self.used -= amount
                self._cond.notify_all()


class ConnectionTable:
    """The listener's open connections: totals per IP and the unauthenticated ones in age order."""

    def __init__(
        self,
        max_connections: int,
        max_per_ip: int,
        max_unauthenticated: int,
        max_per_principal: int | None = None,
    ) -> None:
        self.max_connections = max_connections
        self.max_per_ip = max_per_ip
        self.max_unauthenticated = max_unauthenticated
        self.max_per_principal = max_per_principal
        self._lock = threading.Lock()
        self.open: dict[Any, str] = {}
        self.per_ip: dict[str, int] = {}
        #: authenticated connections of each capped principal, and each one's principal
        self.per_principal: dict[str, int] = {}
        self.principal_of: dict[Any, str] = {}
        #: unauthenticated connections, oldest first
        self.unauthenticated: OrderedDict[Any, None] = OrderedDict()

    def admit(self, conn: socket.socket, ip: str) -> tuple[str | None, list[socket.socket]]:
        """(why refused or None, connections to close to make room for ``conn``)."""
        evict: list[socket.socket] = []
        with self._lock:
            if self.per_ip.get(ip, 0) >= self.max_per_ip:
                return f"max_connections_per_ip={self.max_per_ip} reached for {ip}", []
            if len(self.open) >= self.max_connections:
                if not self.unauthenticated:
                    return f"max_connections={self.max_connections} reached", []
                oldest, _ = self.unauthenticated.popitem(last=False)
                evict.append(oldest)
            while len(self.unauthenticated) >= self.max_unauthenticated:
                oldest, _ = self.unauthenticated.popitem(last=False)
                evict.append(oldest)
            self.open[conn] = ip
            self.per_ip[ip] = self.per_ip.get(ip, 0) + 1
            self.unauthenticated[conn] = None
        return None, evict

    def swap(self, old: Any, new: Any) -> None:
        """``new`` takes ``old``'s place (a TLS connection over the accepted socket)."""
        with self._lock:
            ip = self.open.pop(old, None)
            if ip is None:
                return
            self.open[new] = ip
            if old in self.unauthenticated:
                self.unauthenticated[new] = None
                self.unauthenticated.pop(old, None)

    def authenticated(self, conn: Any, principal: str | None = None) -> bool:
        """``conn`` has authenticated as ``principal`` (None: a principal not capped); False
        if that principal already holds ``max_per_principal`` connections (close it)."""
        with self._lock:
            if principal is not None and conn not in self.principal_of:
                held = self.per_principal.get(principal, 0)
                if self.max_per_principal is not None and held >= self.max_per_principal:
                    return False
                self.per_principal[principal] = held + 1
                self.principal_of[conn] = principal
            self.unauthenticated.pop(conn, None)
            return True

    def remove(self, conn: socket.socket) -> None:
        with self._lock:
            ip = self.open.pop(conn, None)
            self.unauthenticated.pop(conn, None)
            _count_down(self.per_principal, self.principal_of.pop(conn, None))
            _count_down(self.per_ip, ip)

    def all(self) -> list[socket.socket]:
        with self._lock:
            return list(self.open)

    def __len__(self) -> int:
        with self._lock:
            return len(self.open)


def _count_down(counts: dict[str, int], key: str | None) -> None:
    """One fewer for ``key`` (none: no entry)."""
    if key is None:
        return
    left = counts.get(key, 1) - 1
    if left:
        counts[key] = left
    else:
        counts.pop(key, None)


class PrincipalRequests:
    """Requests of one principal being handled at once (``queued_max_requests_per_principal``):
    queued for or running on a request thread.  A connection's reader takes a slot before
    it hands a request to the shared pool and waits, reading nothing more, while its
    principal holds them all, so one tenant's requests (many connections, each pipelining
    ``MAX_IN_FLIGHT``) wait in that tenant's own sockets instead of ahead of everyone's in
    the pool.  ``None`` as the principal (super users, User:ANONYMOUS) is not counted."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._held: dict[str, int] = {}
        self._cond = threading.Condition()

    def take(self, principal: str | None, stopping: threading.Event) -> bool:
        """Take a slot of ``principal`` (waiting while it holds ``limit``); False if
        ``stopping`` was set meanwhile."""
        if principal is None:
            return True
        with self._cond:
            while self._held.get(principal, 0) >= self.limit:
                if stopping.is_set():
                    return False
                self._cond.wait(0.5)
            self._held[principal] = self._held.get(principal, 0) + 1
        return True

    def give(self, principal: str | None) -> None:
        if principal is None:
            return
        with self._cond:
            _count_down(self._held, principal)
            self._cond.notify_all()

    def held(self, principal: str) -> int:
        """Requests of ``principal`` being handled now."""
        with self._cond:
            return self._held.get(principal, 0)


class CreationRate:
    """Kafka's ``max.connection.creation.rate``: new connections a second on the listener,
    a burst of one second's worth; the accept loop waits out the delay, so a flood waits
    in the kernel's backlog instead of taking threads. 0: unbounded."""

    def __init__(self, per_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.per_s = per_s
        self.clock = clock
        self.tokens = per_s
        self.last = clock()

    def delay_s(self) -> float:
        """Take one connection's token; how long to wait before accepting it (0: at once)."""
        if self.per_s <= 0:
            return 0.0
        now = self.clock()
        self.tokens = min(self.per_s, self.tokens + (now - self.last) * self.per_s)
        self.last = now
        self.tokens -= 1
        return 0.0 if self.tokens >= 0 else -self.tokens / self.per_s


def _recv_into(conn: socket.socket, view: memoryview) -> int:
    got = 0
    while got < len(view):
        n = conn.recv_into(view[got:], len(view) - got)
        if n == 0:
            return got
        got += n
    return got


def read_frame(
    conn: socket.socket,
    max_request_bytes: int,
    budget: ByteBudget,
    limit_key: str = "kafka_max_request_bytes",
    budget_key: str = "queued_max_request_bytes",
) -> tuple[bytes, int] | None:
    """One request frame and the bytes it holds of ``budget`` (None: the peer closed).

    A size prefix over ``max_request_bytes`` (the key ``limit_key``) is refused
    before a byte of the body is read.  The buffer starts at
    :data:`FIRST_CHUNK_BYTES` and doubles as the bytes arrive, each growth taken
    from ``budget`` (the key ``budget_key``) first: a peer announcing a 100 MiB
    frame and sending 4 bytes holds 64 KiB, not 100 MiB.  The caller gives the
    returned amount back once the request is answered.
    """
    head = bytearray(4)
    try:
        got = conn.recv_into(head, 4)
    except TimeoutError:
        raise Idle() from None
    if got == 0:
        return None
    try:
        got += _recv_into(conn, memoryview(head)[got:])
    except TimeoutError:
        raise FrameError("a frame's size arrived in part, then nothing") from None
    if got < 4:
        raise FrameError("connection closed inside a frame's size")
    (size,) = SIZE.unpack(head)
    if size < 8:
        raise FrameError(f"request frame of {size} bytes; accepted: 8 to {max_request_bytes}")
    if size > max_request_bytes:
        raise FrameError(
            f"request frame of {size} bytes; accepted: 8 to {limit_key}={max_request_bytes}",
            limit=limit_key,
            size=size,
        )
    held = 0
    buf = bytearray()
    try:
        filled = 0
        while filled < size:
            capacity = min(size, max(FIRST_CHUNK_BYTES, 2 * len(buf)))
            grow = capacity - len(buf)
            if not budget.take(grow, QUEUED_WAIT_S):
                raise FrameError(
                    f"no memory for a {size}-byte request within {QUEUED_WAIT_S:.0f} s "
                    f"({budget_key}={budget.limit} held by requests being read)",
                    limit=budget_key,
                    size=size,
                )
            held += grow
            buf += bytearray(grow)
            try:
                n = _recv_into(conn, memoryview(buf)[filled:capacity])
            except TimeoutError:
                raise FrameError("a request frame stopped arriving half-way") from None
            filled += n
            if filled < capacity:
                raise FrameError("connection closed inside a request frame")
        return bytes(buf), held
    except BaseException:
        budget.give(held)
        raise


# -- produce: Flight's per-request bounds on the Kafka path ------------------------------
def count_batches(records: bytes | None) -> int:
    """Record batches (or legacy message-set entries) in a ``records`` field, by headers only."""
    if not records:
        return 0
    count = pos = 0
    end = len(records)
    while pos + 12 <= end:
        (length,) = struct.unpack_from(">i", records, pos + 8)
        if length < 0:
            break
        count += 1
        pos += 12 + length
    return count


def bounded_produce(handler: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    """``handler`` (Produce) behind ``max_request_batches`` and ``max_inflight_request_bytes``.

    A request over either bound is answered at once, every partition with the
    refusal (INVALID_REQUEST: too many batches; THROTTLING_QUOTA_EXCEEDED: the
    broker holds its in-flight bytes, retry), as the Flight path refuses it.
    """

    def produce(ctx: HandlerContext, request: ProduceRequest) -> ProduceResponse | None:
        config = ctx.broker.config
        batches = 0
        size = 0
        for topic_data in request.topic_data:
            for pdata in topic_data.partition_data:
                batches += count_batches(pdata.records)
                size += len(pdata.records or b"")
        refusal: SparklogError | None = None
        if batches > config.max_request_batches:
            refusal = InvalidRequestError(
                f"produce request carries {batches} record batches, more than "
                f"max_request_batches={config.max_request_batches}; send fewer, larger ones"
            )
        budget = ctx.listener.produce_bytes
        if refusal is None and not budget.try_take(size):
            refusal = ThrottlingQuotaExceededError(
                f"broker holds max_inflight_request_bytes={config.max_inflight_request_bytes} "
                "of produce requests; retry"
            )
        if refusal is not None:
            ctx.listener.refusals.warning(
                "kafka produce refused", code=type(refusal).code, error=str(refusal)[:300]
            )
            return _refuse_produce(ctx, request, refusal)
        try:
            return handler(ctx, request)
        finally:
            budget.give(size)

    return produce


def _refuse_produce(
    ctx: HandlerContext, request: ProduceRequest, refusal: SparklogError
) -> ProduceResponse | None:
    if int(request.acks) == 0:
        return None
    cls = load_response_schema(0, ctx.api_version)
    topic_cls = nested(cls, "TopicProduceResponse")
    part_cls = nested(cls, "PartitionProduceResponse")
    errno = int(type(refusal).errno)
    return make(
        cls,
        responses=tuple(
            make(
                topic_cls,
                name=topic_data.name,
                partition_responses=tuple(
                    make(
                        part_cls,
                        index=pdata.index,
                        error_code=errno,
                        base_offset=-1,
                        log_append_time=-1,
                        log_start_offset=-1,
                        record_errors=(),
                        error_message=str(refusal),
                    )
                    for pdata in topic_data.partition_data
                ),
            )
            for topic_data in request.topic_data
        ),
        throttle_time=0,
    )
