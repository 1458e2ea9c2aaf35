"""Client quotas on the Kafka listener: enforcement, DescribeClientQuotas, AlterClientQuotas.

Quotas (:mod:`sparklog.security.quotas`) are per user and client id, as
Kafka's: ``producer_byte_rate`` (bytes of Produce records), ``consumer_byte_rate``
(bytes of Fetch records answered) and ``request_percentage`` (KIP-124: the CPU
time the request handlers take on request threads, in percent of one thread; a
Produce's wait for its commit is not charged, as Kafka's purgatory wait is not).
Each (quota entity, quota) has a :class:`Meter` over Kafka's window
(``WINDOW_S``), shared as Kafka shares it: a quota set on a user counts all that
user's client ids together, one on a client id all its users
(:func:`~sparklog.security.quotas.resolve_shared`); when a request takes the
rate over the quota, the answer reports Kafka's throttle time,
``(rate - quota) / quota * window``, in ``throttle_time_ms`` and leaves at once,
and the connection is muted for that time (:class:`Mute`: its reader reads no
further request until then), as Kafka answers and mutes a throttled channel
(KIP-219).  No request thread waits for a throttle, so throttled clients cannot
take the request pool from the others.  A parked request (a long-poll Fetch) is
metered when its answer is ready.  Clients without a quota cost one dictionary
lookup.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime
import threading
import time
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from kio.index import load_response_schema

from sparklog.broker_lite.kafka.messages import errno_of, has_field, make, nested
from sparklog.broker_lite.kafka.parking import then
from sparklog.errors import SparklogError
from sparklog.security import quotas

if TYPE_CHECKING:
    from sparklog.broker_lite.kafka.api_types import (
        AlterClientQuotasRequest,
        AlterClientQuotasResponse,
        DescribeClientQuotasRequest,
        DescribeClientQuotasResponse,
    )
    from sparklog.broker_lite.kafka.context import HandlerContext


#: Kafka's quota.window.num x quota.window.size.seconds
WINDOW_S = 11.0
#: The longest delay of one answer (Kafka caps throttling at the request timeout).
MAX_THROTTLE_MS = 30_000


class Meter:
    """Amounts recorded over the last ``WINDOW_S``; the throttle time of a rate quota."""

    def __init__(self) -> None:
        self._samples: collections.deque[tuple[float, float]] = collections.deque()
        self._total = 0.0
        self._first = time.monotonic()
        self._lock = threading.Lock()

    def record(self, amount: float, quota_per_s: float) -> int:
        """Record ``amount``; the throttle time in ms (0 within the quota)."""
        now = time.monotonic()
        with self._lock:
            self._samples.append((now, amount))
            self._total += amount
            while self._samples and self._samples[0][0] < now - WINDOW_S:
                self._total -= self._samples.popleft()[1]
            # the window is as long as the meter has lived, at least 1 s, at most WINDOW_S
            window = min(WINDOW_S, max(1.0, now - self._first))
            rate = self._total / window
        if rate <= quota_per_s:
            return 0
        return min(MAX_THROTTLE_MS, int((rate - quota_per_s) / quota_per_s * window * 1000))


class Mute:
    """One connection's mute (Kafka's muted channel): after a throttled answer its
    reader reads nothing more until the throttle time has passed; the reader waits on
    its own connection thread, never on a request thread."""

    def __init__(self) -> None:
        self._until = 0.0
        self._lock = threading.Lock()

    def extend(self, throttle_ms: int) -> None:
        """Mute for ``throttle_ms`` from now (a longer mute already set stands)."""
        with self._lock:
            self._until = max(self._until, time.monotonic() + throttle_ms / 1000)

    def remaining_s(self) -> float:
        """Seconds the connection stays muted (0: not muted)."""
        with self._lock:
            return max(0.0, self._until - time.monotonic())

    def wait_out(self, stopping: threading.Event) -> bool:
        """Wait until the mute ends; True if ``stopping`` was set meanwhile."""
        while True:
            left = self.remaining_s()
            if left <= 0:
                return stopping.is_set()
            if stopping.wait(left):
                return True


class IpConnectionQuota:
    """KIP-612's per-IP ``connection_creation_rate`` (a client quota on an ``ip`` entity, or
    the default IP): new connections a second from one address, metered over Kafka's
    window as the other rate quotas.  A connection past it is held unread for the
    throttle time and then closed, as Kafka's acceptor delays closing a throttled
    connection, so a flooding address gets no service and cannot reconnect in a loop.
    Every attempt counts, refused ones too.  Meters of addresses idle for a window are
    dropped once more than ``MAX_IP_METERS`` are kept."""

    #: meters kept before idle ones are dropped (a flood from many addresses stays bounded)
    MAX_IP_METERS = 10_000

    def __init__(self) -> None:
        self._meters: dict[str, tuple[Meter, float]] = {}
        self._lock = threading.Lock()

    def throttle_ms(self, image: Any, ip: str) -> int:
        """Record one new connection from ``ip``; its throttle time in ms (0: accept it)."""
        if not image.client_quotas:
            return 0
        rate = quotas.ip_connection_rate(image, ip)
        if rate is None:
            return 0
        now = time.monotonic()
        with self._lock:
            found = self._meters.get(ip)
            meter = found[0] if found is not None else Meter()
            self._meters[ip] = (meter, now)
            if len(self._meters) > self.MAX_IP_METERS:
                self._meters = {k: v for k, v in self._meters.items() if v[1] >= now - WINDOW_S}
        return meter.record(1, rate)


class QuotaManager:
    """The listener's meters, one per (entity, quota)."""

    def __init__(self) -> None:
        self._meters: dict[tuple[str, str, str], Meter] = {}
        self._lock = threading.Lock()

    def meter(self, user: str, client_id: str, key: str) -> Meter:
        with self._lock:
            found = self._meters.get((user, client_id, key))
            if found is None:
                found = self._meters[(user, client_id, key)] = Meter()
            return found


def _user(ctx: HandlerContext) -> str:
    session = getattr(ctx, "session", None)
    principal = session.principal if session is not None else "User:ANONYMOUS"
    return str(principal).removeprefix("User:")


def _records_bytes(items: Any, records_of: tuple[str, str]) -> int:
    total = 0
    for topic in items or ():
        for part in getattr(topic, records_of[0], None) or ():
            records = getattr(part, records_of[1], None)
            total += len(records) if records else 0
    return total


def run(ctx: Any, request: Any, call: Any) -> Any:
    """``call()``'s answer marked with the throttle time the quotas of the request's
    client give it; a throttled connection is muted for that time (``ctx.mute``)."""
    image = ctx.broker.root.metadata.image()
    if not image.client_quotas or ctx.api_key in (17, 18, 36):
        return call()
    user, client_id = _user(ctx), str(ctx.client_id or "")
    resolved = quotas.resolve_shared(image, user, client_id)
    if not resolved:
        return call()
    limits = {k: value for k, (value, _) in resolved.items()}

    def meter(key: str) -> Meter:
        # one meter per sharing entity: a user quota counts all the user's client ids
        shared_user, shared_client = resolved[key][1]
        return manager.meter(shared_user, shared_client, key)

    # request_percentage meters the CPU time the handler takes on this request thread,
    # not its wall time: a Produce waits here for its commit (Kafka parks it in its
    # purgatory, uncharged), and a thread waiting for the GIL is not working for it
    started_cpu_s = time.thread_time()
    response = call()
    handler_cpu_ms = (time.thread_time() - started_cpu_s) * 1000
    manager: QuotaManager = ctx.listener.quotas

    def throttled(answer: Any) -> Any:
        """``answer`` marked with the throttle its request earned; the connection muted."""
        throttle_ms = 0
        if ctx.api_key == 0 and "producer_byte_rate" in limits:
            size = _records_bytes(request.topic_data, ("partition_data", "records"))
            used = meter("producer_byte_rate")
            throttle_ms = max(throttle_ms, used.record(size, limits["producer_byte_rate"]))
        if ctx.api_key == 1 and "consumer_byte_rate" in limits and answer is not None:
            size = _records_bytes(answer.responses, ("partitions", "records"))
            used = meter("consumer_byte_rate")
            throttle_ms = max(throttle_ms, used.record(size, limits["consumer_byte_rate"]))
        if "request_percentage" in limits:
            # percent of one thread: 100 = 1000 ms of handler CPU time per second (a parked
            # request's handler time, not its wait)
            used = meter("request_percentage")
            quota_ms_per_s = limits["request_percentage"] * 10
            throttle_ms = max(throttle_ms, used.record(handler_cpu_ms, quota_ms_per_s))
        if throttle_ms <= 0:
            return answer
        mute: Mute | None = getattr(ctx, "mute", None)
        if mute is not None:
            mute.extend(throttle_ms)  # the reader reads nothing more for that long
        if answer is not None and has_field(type(answer), "throttle_time"):
            answer = dataclasses.replace(
                answer, throttle_time=datetime.timedelta(milliseconds=throttle_ms)
            )
        return answer

    if isinstance(response, Future):
        if ctx.api_key != 1:
            return response  # a parked group request (a JoinGroup) is not metered
        return then(response, throttled)
    return throttled(response)


# -- DescribeClientQuotas / AlterClientQuotas --------------------------------------------
def _entity(items: Any) -> list[tuple[str, str | None]]:
    return [(str(e.entity_type), e.entity_name) for e in items]


def handle_describe_client_quotas(
    ctx: HandlerContext, request: DescribeClientQuotasRequest
) -> DescribeClientQuotasResponse:
    cls = load_response_schema(48, ctx.api_version)
    entry_cls = nested(cls, "EntryData")
    entity_cls = nested(cls, "EntityData")
    value_cls = nested(cls, "ValueData")
    components = [(str(c.entity_type), int(c.match_type), c.match) for c in request.components]
    found = [
        (entity, values)
        for entity, values in quotas.entries(ctx.broker.root.metadata.image())
        if quotas.matches(entity, components, bool(request.strict))
    ]
    return make(
        cls,
        throttle_time=0,
        error_code=0,
        error_message=None,
        entries=tuple(
            make(
                entry_cls,
                entity=tuple(make(entity_cls, entity_type=t, entity_name=n) for t, n in entity),
                values=tuple(make(value_cls, key=k, value=float(v)) for k, v in values.items()),
            )
            for entity, values in found
        ),
    )


def handle_alter_client_quotas(
    ctx: HandlerContext, request: AlterClientQuotasRequest
) -> AlterClientQuotasResponse:
    cls = load_response_schema(49, ctx.api_version)
    entry_cls = nested(cls, "EntryData")
    entity_cls = nested(cls, "EntityData")
    results = []
    for entry in request.entries:
        entity = _entity(entry.entity)
        error, message = 0, None
        try:
            sets = {str(op.key): float(op.value) for op in entry.ops if not op.remove}
            removes = [str(op.key) for op in entry.ops if op.remove]
            if request.validate_only:
                checked = quotas.check_entity(entity)
                for k, v in [*sets.items(), *((k, 1.0) for k in removes)]:
                    quotas.check_quota_of(checked, k, v)
            else:
                quotas.alter(ctx.broker.root.metadata, entity, sets, removes)
        except SparklogError as exc:
            error, message = errno_of(exc), str(exc)
        results.append(
            make(
                entry_cls,
                error_code=error,
                error_message=message,
                entity=tuple(make(entity_cls, entity_type=t, entity_name=n) for t, n in entity),
            )
        )
    return make(cls, throttle_time=0, entries=tuple(results))
