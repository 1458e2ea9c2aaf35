"""The broker's errors are :mod:`sparklog.errors`; this module holds how they cross Flight.

A Flight error's message carries ``SPARKLOG_ERROR {json}``: the error's class
name, Kafka's ``errno``, its message (capped), details and ``retriable``. The
receiving side rebuilds the same class by name (:func:`sparklog.errors.error_class`).
"""

from __future__ import annotations

import json
import re
from typing import Any

from sparklog.errors import (
    BrokerNotAvailableError,
    CommitConflictError,
    FencedError,
    GroupError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    InvalidConfigError,
    InvalidRecordError,
    InvalidRequestError,
    KafkaStorageError,
    NotLeaderError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    RebalanceInProgressError,
    SparklogError,
    StoreUnavailableError,
    TopicExistsError,
    UnknownMemberError,
    UnknownTopicError,
    error_class,
)

BrokerError = SparklogError
BrokerUnavailableError = BrokerNotAvailableError
RetriableStorageError = KafkaStorageError

#: the most characters of a message that cross the wire (user input echoed in errors is capped)
MESSAGE_CHARS_MAX = 2_000


def from_storage(exc: SparklogError) -> SparklogError:
    """Storage errors are the broker's errors already; kept for callers not yet simplified."""
    return exc


def make_error(
    name: str, message: str, details: dict[str, Any] | None = None, retriable: bool | None = None
) -> SparklogError:
    """Rebuild an error from its wire form (class name, message, details)."""
    err = error_class(name)(message, **(details or {}))
    if retriable is not None:
        err.retriable = retriable
    return err


WIRE_PREFIX = "SPARKLOG_ERROR "
_WIRE_RE = re.compile(r"SPARKLOG_ERROR (\{.*\})", re.DOTALL)


def encode(err: SparklogError) -> str:
    """The text a FlightError carries: a prefix plus the error as one JSON object."""
    message = err.message
    if len(message) > MESSAGE_CHARS_MAX:
        message = message[:MESSAGE_CHARS_MAX] + f"... ({len(err.message)} characters)"
    body = {
        "error": type(err).__name__,
        "errno": err.errno,
        "code": err.code,
        "message": message,
        "details": err.details,
        "retriable": err.retriable,
    }
    return WIRE_PREFIX + json.dumps(body, separators=(",", ":"), default=str)


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
            body = json.loads(raw[:end])
        except ValueError:
            continue
        if isinstance(body, dict) and "error" in body:
            return make_error(
                str(body["error"]),
                str(body.get("message", "")),
                body.get("details") or {},
                body.get("retriable"),
            )
    return None


__all__ = [
    "BrokerError",
    "BrokerUnavailableError",
    "CommitConflictError",
    "FencedError",
    "GroupError",
    "IllegalGenerationError",
    "InconsistentGroupProtocolError",
    "InvalidConfigError",
    "InvalidRecordError",
    "InvalidRequestError",
    "NotLeaderError",
    "OffsetOutOfRangeError",
    "OutOfOrderSequenceError",
    "RebalanceInProgressError",
    "RetriableStorageError",
    "StoreUnavailableError",
    "TopicExistsError",
    "UnknownMemberError",
    "UnknownTopicError",
    "decode",
    "encode",
    "make_error",
]
