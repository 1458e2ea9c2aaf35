"""One Flight DoAction call over plain gRPC: the small request path of metadata commands.

``sparklog topics list`` through a broker needs one DoAction and its JSON
reply.  ``pyarrow.flight`` brings pyarrow and numpy with it, about 0.2 s of CPU
to import: more than the rest of the command.  This module makes the same call
with grpcio.  Flight's ``Action`` and ``Result`` messages (Arrow's
``format/Flight.proto``) are two small protobuf messages, encoded here; the
action bodies, replies and error text are :mod:`sparklog.protocol.flight`'s,
as for the full client (:mod:`sparklog.client.transports.flight_client`).

Plaintext only: with TLS or SASL configured the CLI uses the full client.
"""

from __future__ import annotations

from typing import Any, TypeVar

from sparklog.client.address import parse_bootstrap
from sparklog.client.transports.kafka_probe import kafka_listener_error
from sparklog.errors import BrokerNotAvailableError, SparklogError, UnknownServerError
from sparklog.protocol import flight as wire
from sparklog.protocol.actions import Action
from sparklog.retry import retrying

R = TypeVar("R")
#: the gRPC method Flight's DoAction is served as
DO_ACTION = "/arrow.flight.protocol.FlightService/DoAction"
#: protobuf tags: field 1 and 2, wire type 2 (length-delimited)
_FIELD_1, _FIELD_2 = 0x0A, 0x12


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data):
            raise ValueError("truncated varint")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def encode_action(action: str, body: bytes) -> bytes:
    """Flight's ``Action {string type = 1; bytes body = 2;}``."""
    name = action.encode()
    out = bytes([_FIELD_1]) + _varint(len(name)) + name
    if body:  # proto3 leaves an empty field out
        out += bytes([_FIELD_2]) + _varint(len(body)) + body
    return out


def decode_result(message: bytes) -> bytes:
    """The body of Flight's ``Result {bytes body = 1;}`` (other fields skipped)."""
    pos, body = 0, b""
    while pos < len(message):
        key, pos = _read_varint(message, pos)
        wire_type = key & 0x7
        if wire_type == 0:
            _, pos = _read_varint(message, pos)
        elif wire_type == 2:
            size, pos = _read_varint(message, pos)
            if key >> 3 == 1:
                body = message[pos : pos + size]
            pos += size
        else:
            raise ValueError(f"unexpected protobuf wire type {wire_type} in a Flight Result")
    return body


class ActionClient:
    """DoAction calls to the brokers of ``bootstrap`` (``host:port[,host:port]``), retried
    as the full client retries an unreachable or starting broker."""

    def __init__(self, bootstrap: str, *, retry_timeout_ms: int, request_timeout_s: float = 30):
        self.locations = parse_bootstrap(bootstrap)
        self.retry_timeout_ms = retry_timeout_ms
        self.request_timeout_s = request_timeout_s

    def call(self, action: Action[R], /, **fields: Any) -> R:
        """The decoded reply of ``action`` (its ``fields`` as in its table entry), from any
        broker (this path serves the listings, which any broker answers)."""
        body = action.build(**fields)
        return action.result(
            retrying(
                lambda: self._any_broker(action.name, body),
                deadline_ms=self.retry_timeout_ms,
                backoff_initial_ms=20,
                backoff_max_ms=1_000,
            )
        )

    def _any_broker(self, action: str, body: bytes) -> Any:
        last: SparklogError | None = None
        for location in self.locations:
            try:
                return self._on(location, action, body)
            except BrokerNotAvailableError as err:
                last = err
        assert last is not None
        raise last

    def _on(self, location: str, action: str, body: bytes) -> Any:
        import grpc

        with grpc.insecure_channel(location) as channel:
            do_action = channel.unary_stream(
                DO_ACTION, request_serializer=None, response_deserializer=None
            )
            try:
                results = list(
                    do_action(encode_action(action, body), timeout=self.request_timeout_s)
                )
            except grpc.RpcError as exc:
                raise self._translate(location, exc) from None
        return wire.decode_result(decode_result(results[0])) if results else None

    @staticmethod
    def _translate(location: str, exc: Any) -> SparklogError:
        import grpc

        details = str(exc.details() or "")
        found = wire.decode(details)
        if found is not None:
            return found
        if exc.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
            from sparklog.client.transports.tls_probe import tls_listener_error  # ssl: lazily

            wrong = kafka_listener_error(location) or tls_listener_error(location)
            if wrong is not None:
                return wrong
            return BrokerNotAvailableError(f"broker {location} is unreachable: {details}")
        return UnknownServerError(f"broker {location} failed: {exc.code().name}: {details}")
