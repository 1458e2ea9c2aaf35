"""The broker's Arrow Flight wire format, defined once for both ends.

``broker_lite/server.py`` (the broker) and
``sparklog/client/transports/flight_client.py`` (the client) import what is
here; neither spells a JSON field name of its own, and this module imports
neither of them (nor the groups it carries: a join's result crosses as fields).

* ``DoPut`` (produce): the descriptor command is a :data:`PRODUCE` request;
  each batch's app_metadata may be a :data:`PRODUCE_BATCH` (its partition).
  The reply is one metadata message, :func:`encode_produce_reply`.
* ``DoGet`` (fetch): the ticket is a :data:`FETCH` request; every batch (or one
  empty batch) carries :func:`encode_fetch_meta`.
* ``GetFlightInfo`` / ``ListFlights``: a topic's partitions as endpoints whose
  tickets are :data:`FETCH` requests.
* ``DoAction``: the action's body is the request of its entry in
  :data:`sparklog.protocol.actions.ACTIONS` (one typed record per action: body, result,
  ACL, routing); the reply is :func:`encode_result`.
* Errors: a FlightError whose message carries :func:`encode` of the error.

A request is a JSON object described by a tuple of :class:`Field`: the broker
reads it with :func:`parse` (which checks types and fills defaults, with an
error naming the field and what it accepts), the client writes it with
:func:`build` (which refuses a field the request does not have).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from sparklog.errors import InvalidRequestError, SparklogError, error_class
from sparklog.topic_partition import TopicPartition

#: a field without a default must be sent
REQUIRED: Any = object()
#: most characters of a client's value echoed in an error message
ECHO_CHARS_MAX = 200


@dataclass(frozen=True)
class Field:
    """One JSON field of a request: its name, accepted type and default."""

    name: str
    kind: Any
    default: Any = REQUIRED


Request = tuple[Field, ...]

#: DoPut's descriptor command
PRODUCE: Request = (
    Field("topic", str),
    Field("partition", int, None),
    Field("acks", Any, "all"),
    Field("producer_id", int, None),
    Field("producer_epoch", int, None),
    Field("base_sequence", int, None),
    Field("compression", str, None),
)
#: a produced batch's app_metadata (the command's partition is the default)
PRODUCE_BATCH: Request = (Field("partition", int, None),)
#: DoGet's ticket (also the tickets of GetFlightInfo's endpoints)
FETCH: Request = (
    Field("topic", str),
    Field("partition", int),
    Field("offset", int),
    Field("max_bytes", int, 1 << 20),
    Field("max_wait_ms", int, 500),
    Field("isolation_level", str, "read_uncommitted"),
)
#: GetFlightInfo's descriptor command (a descriptor path names the topic too)
FLIGHT_INFO: Request = (Field("topic", str),)


def echo(value: Any) -> str:
    """``repr(value)``, capped: user input echoed in errors stays small."""
    text = (
        repr(value)
        if not isinstance(value, str | bytes) or len(value) < 4 * ECHO_CHARS_MAX
        else (repr(value[:ECHO_CHARS_MAX]))
    )
    return text if len(text) <= ECHO_CHARS_MAX else text[:ECHO_CHARS_MAX] + "..."


def body(raw: bytes) -> dict[str, Any]:
    """A request's JSON object (empty bytes: an empty object); InvalidRequestError if not one."""
    if not raw:
        return {}
    try:
        decoded = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise InvalidRequestError(
            f"request body is not JSON ({bytes(raw[:40])!r}...); accepted: a JSON object"
        ) from None
    if not isinstance(decoded, dict):
        raise InvalidRequestError("request body is not a JSON object")
    return decoded


def _value(decoded: Mapping[str, Any], spec: Field, default: Any) -> Any:
    value = decoded.get(spec.name, default)
    if value is REQUIRED:
        raise InvalidRequestError(f"field {echo(spec.name)} is required")
    if value is None and default is None:
        return None
    if isinstance(value, dict | list) and value is default:
        return type(value)(value)  # a fresh copy of a mutable default
    kind = spec.kind
    if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise InvalidRequestError(
            f"field {spec.name!r}={echo(value)} is not accepted; accepted: integer"
        )
    if kind is not int and kind is not Any and not isinstance(value, kind):
        raise InvalidRequestError(
            f"field {spec.name!r}={echo(value)} is not accepted; accepted: "
            f"{getattr(kind, '__name__', kind)}"
        )
    return value


def parse(
    request: Request, decoded: Mapping[str, Any], defaults: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The request's fields by name, checked and with defaults filled (the broker's side).

    ``defaults`` overrides a field's declared default (a batch's partition
    defaults to the command's).
    """
    overrides = defaults or {}
    return {
        spec.name: _value(decoded, spec, overrides.get(spec.name, spec.default)) for spec in request
    }


def build(request: Request, /, **values: Any) -> bytes:
    """The request's JSON bytes (the client's side); TypeError for a field it does not have."""
    names = {spec.name for spec in request}
    unknown = sorted(set(values) - names)
    if unknown:
        raise TypeError(f"request has no field(s) {unknown}; fields: {sorted(names)}")
    missing = [s.name for s in request if s.default is REQUIRED and s.name not in values]
    if missing:
        raise TypeError(f"request lacks required field(s) {missing}")
    return json.dumps(values).encode()


# -- replies ---------------------------------------------------------------
_RESULT = "result"
_RESULTS = "results"
_HIGH_WATERMARK = "high_watermark"
_LOG_START_OFFSET = "log_start_offset"


def encode_result(result: Any) -> bytes:
    """An action's reply."""
    return json.dumps({_RESULT: result}, default=str).encode()


def decode_result(raw: bytes) -> Any:
    """What :func:`encode_result` carried."""
    return json.loads(raw)[_RESULT]


@dataclass(frozen=True)
class PartitionAppend:
    """What one produced batch became: its partition, first offset, count, and if a duplicate."""

    partition: int
    base_offset: int
    record_count: int
    duplicate: bool


def encode_produce_reply(appends: list[PartitionAppend]) -> bytes:
    """DoPut's reply: one entry per produced batch, in order."""
    return json.dumps({_RESULTS: [a.__dict__ for a in appends]}).encode()


def decode_produce_reply(raw: bytes) -> list[PartitionAppend]:
    """What :func:`encode_produce_reply` carried."""
    return [PartitionAppend(**entry) for entry in json.loads(raw)[_RESULTS]]


def encode_fetch_meta(high_watermark: int, log_start_offset: int) -> bytes:
    """The app_metadata of every batch DoGet sends."""
    return json.dumps(
        {_HIGH_WATERMARK: high_watermark, _LOG_START_OFFSET: log_start_offset}
    ).encode()


def decode_fetch_meta(raw: bytes | None) -> tuple[int, int]:
    """``(high_watermark, log_start_offset)`` of :func:`encode_fetch_meta` (-1 when absent)."""
    meta = json.loads(raw) if raw else {}
    return int(meta.get(_HIGH_WATERMARK, -1)), int(meta.get(_LOG_START_OFFSET, -1))


_JOIN_FIELDS = ("generation", "member_id", "leader_id", "members", "protocol")


class JoinFields(Protocol):
    """What join_group's reply carries of a join's result (``groups.coordinator.JoinResult``
    has these, read-only; the wire format names them without importing the groups package)."""

    @property
    def generation(self) -> int: ...

    @property
    def member_id(self) -> str: ...

    @property
    def leader_id(self) -> str: ...

    @property
    def members(self) -> dict[str, list[str]]: ...

    @property
    def protocol(self) -> str: ...


def encode_join_result(result: JoinFields) -> dict[str, Any]:
    """join_group's result (Kafka clients' opaque member metadata stays in the broker)."""
    return {name: getattr(result, name) for name in _JOIN_FIELDS}


def decode_join_result(raw: Mapping[str, Any]) -> dict[str, Any]:
    """What :func:`encode_join_result` carried: ``JoinResult``'s keywords (the client builds it)."""
    return {name: raw[name] for name in _JOIN_FIELDS}


def encode_partition_errors(
    result: Mapping[TopicPartition, SparklogError | None],
) -> list[list[Any]]:
    """Per-partition outcomes (e.g. delete_offsets'): ``[topic, partition, None or error]``."""
    return [
        [topic, partition, None if err is None else encode(err)]
        for (topic, partition), err in sorted(result.items())
    ]


def decode_partition_errors(raw: list[list[Any]]) -> dict[TopicPartition, SparklogError | None]:
    """What :func:`encode_partition_errors` carried."""
    return {
        TopicPartition(str(topic), int(partition)): None if err is None else decode(str(err))
        for topic, partition, err in raw
    }


# -- errors ----------------------------------------------------------------
#: the most characters of a message that cross the wire (user input echoed in errors is capped)
MESSAGE_CHARS_MAX = 2_000
WIRE_PREFIX = "SPARKLOG_ERROR "
_WIRE_RE = re.compile(r"SPARKLOG_ERROR (\{.*\})", re.DOTALL)


def make_error(
    name: str, message: str, details: dict[str, Any] | None = None, retriable: bool | None = None
) -> SparklogError:
    """Rebuild an error from its wire form (class name, message, details)."""
    err = error_class(name)(message, **(details or {}))
    if retriable is not None:
        err.retriable = retriable
    return err


def encode(err: SparklogError) -> str:
    """The text a FlightError carries: a prefix plus the error as one JSON object.

    The object holds the error's class name, Kafka's ``errno`` and ``code``, its
    message (capped), details and ``retriable``; the receiver rebuilds the same
    class by name (:func:`sparklog.errors.error_class`).
    """
    message = err.message
    if len(message) > MESSAGE_CHARS_MAX:
        message = message[:MESSAGE_CHARS_MAX] + f"... ({len(err.message)} characters)"
    encoded = {
        "error": type(err).__name__,
        "errno": err.errno,
        "code": err.code,
        "message": message,
        "details": err.details,
        "retriable": err.retriable,
    }
    return WIRE_PREFIX + json.dumps(encoded, separators=(",", ":"), default=str)


def decode(text: str) -> SparklogError | None:
    """The error encoded in a FlightError's message, or None if it carries none."""
    match = _WIRE_RE.search(text)
    if not match:
        return None
    raw = match.group(1)
    # gRPC may append its own detail after our JSON; find the longest valid prefix.
    for end in range(len(raw), 0, -1):
        if raw[end - 1] != "}":
            continue
        try:
            decoded = json.loads(raw[:end])
        except ValueError:
            continue
        if isinstance(decoded, dict) and "error" in decoded:
            return make_error(
                str(decoded["error"]),
                str(decoded.get("message", "")),
                decoded.get("details") or {},
                decoded.get("retriable"),
            )
    return None
