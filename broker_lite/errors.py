"""Errors of the broker and its client, each with a stable wire code.

Every error derives from :class:`BrokerError`; ``code`` is the string that
crosses the wire (Kafka's error names) and ``retriable`` tells a client whether
repeating the call (after refreshing metadata) may succeed.  Storage errors are
translated by :func:`from_storage` so a client sees one family of errors.
"""

from __future__ import annotations

import json
import re
from typing import Any

from storage import errors as storage_errors


class BrokerError(Exception):
    """Root of every broker_lite error."""

    retriable: bool = False
    code: str = "UNKNOWN_SERVER_ERROR"

    def __init__(self, message: str = "", **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details: dict[str, Any] = details

    def __str__(self) -> str:
        return self.message or self.code

    def to_wire(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "details": self.details}


class NotLeaderError(BrokerError):
    """This broker does not lead the partition; ``details['leader_location']`` does."""

    retriable = True
    code = "NOT_LEADER"


class BrokerUnavailableError(BrokerError):
    """No broker could be reached, or the storage root is unreachable."""

    retriable = True
    code = "BROKER_UNAVAILABLE"


class UnknownTopicError(BrokerError):
    """The topic or partition does not exist."""

    code = "UNKNOWN_TOPIC"


class TopicExistsError(BrokerError):
    code = "TOPIC_EXISTS"


class InvalidRequestError(BrokerError):
    """A malformed request: bad JSON, missing field, unknown action, garbage bytes."""

    code = "INVALID_REQUEST"


class InvalidConfigError(BrokerError, ValueError):
    """A config key or value that is not accepted (broker or topic config)."""

    code = "INVALID_CONFIG"


class InvalidRecordError(BrokerError):
    """A record the topic refuses: too large, wrong schema."""

    code = "INVALID_RECORD"


class OffsetOutOfRangeError(BrokerError):
    """A fetch outside ``[log_start_offset, high_watermark]``; the range is in details."""

    code = "OFFSET_OUT_OF_RANGE"

    @property
    def log_start_offset(self) -> int:
        return int(self.details.get("log_start_offset", 0))

    @property
    def high_watermark(self) -> int:
        return int(self.details.get("high_watermark", 0))


class FencedError(BrokerError):
    """A leader or producer epoch that a newer one has replaced."""

    code = "FENCED"


class OutOfOrderSequenceError(BrokerError):
    """An idempotent producer's sequence number skipped or went back."""

    code = "OUT_OF_ORDER_SEQUENCE"


class GroupError(BrokerError):
    """Consumer group protocol errors; the subclass says what the member must do."""

    code = "GROUP_ERROR"


class RebalanceInProgressError(GroupError):
    """The group is rebalancing: the member must join again."""

    retriable = True
    code = "REBALANCE_IN_PROGRESS"


class IllegalGenerationError(GroupError):
    """The member's generation is not the group's current one (a stale member)."""

    code = "ILLEGAL_GENERATION"


class UnknownMemberError(GroupError):
    """The member id is not (or no longer) in the group: join with an empty id."""

    code = "UNKNOWN_MEMBER"


class InconsistentGroupProtocolError(GroupError):
    """The member's assignment strategy is not one the group's members share."""

    code = "INCONSISTENT_GROUP_PROTOCOL"


class RetriableStorageError(BrokerError):
    """The storage root refused or lost a race; repeat the call."""

    retriable = True
    code = "STORE_UNAVAILABLE"


# Short aliases in Kafka's naming, as the client contract names them.
NotLeader = NotLeaderError
UnknownTopic = UnknownTopicError
OffsetOutOfRange = OffsetOutOfRangeError
RebalanceInProgress = RebalanceInProgressError
IllegalGeneration = IllegalGenerationError
UnknownMember = UnknownMemberError

_BY_CODE: dict[str, type[BrokerError]] = {
    cls.code: cls
    for cls in (
        BrokerError,
        NotLeaderError,
        BrokerUnavailableError,
        UnknownTopicError,
        TopicExistsError,
        InvalidRequestError,
        InvalidConfigError,
        InvalidRecordError,
        OffsetOutOfRangeError,
        FencedError,
        OutOfOrderSequenceError,
        RebalanceInProgressError,
        IllegalGenerationError,
        UnknownMemberError,
        InconsistentGroupProtocolError,
        RetriableStorageError,
    )
}
#: Wire codes with their own class; any other code arrives as a plain BrokerError.
WIRE_CODES = tuple(sorted(_BY_CODE))

_STORAGE_MAP: dict[type[storage_errors.StorageError], type[BrokerError]] = {
    storage_errors.InvalidConfigError: InvalidConfigError,
    storage_errors.UnknownTopicError: UnknownTopicError,
    storage_errors.TopicExistsError: TopicExistsError,
    storage_errors.OffsetOutOfRangeError: OffsetOutOfRangeError,
    storage_errors.InvalidRecordError: InvalidRecordError,
    storage_errors.FencedError: FencedError,
    storage_errors.ProducerSequenceError: OutOfOrderSequenceError,
    storage_errors.CommitConflictError: RetriableStorageError,
    storage_errors.StoreUnavailableError: RetriableStorageError,
}


def from_storage(exc: storage_errors.StorageError) -> BrokerError:
    """The broker error a storage error becomes (keeping its message and range)."""
    for storage_cls, broker_cls in _STORAGE_MAP.items():
        if isinstance(exc, storage_cls):
            details: dict[str, Any] = {}
            if isinstance(exc, storage_errors.OffsetOutOfRangeError):
                details = {
                    "log_start_offset": exc.log_start_offset,
                    "high_watermark": exc.high_watermark,
                }
            err = broker_cls(str(exc), **details)
            if broker_cls is RetriableStorageError:
                err.code = exc.code  # COMMIT_CONFLICT or STORE_UNAVAILABLE
            return err
    err = BrokerError(str(exc))
    err.code = exc.code
    err.retriable = exc.retriable
    return err


def make_error(
    code: str, message: str, details: dict[str, Any] | None = None, retriable: bool | None = None
) -> BrokerError:
    """Rebuild an error from its wire form."""
    cls = _BY_CODE.get(code, BrokerError)
    err = cls(message, **(details or {}))
    if cls is BrokerError or cls is RetriableStorageError:
        err.code = code
    if retriable is not None:
        err.retriable = retriable
    return err


WIRE_PREFIX = "SPARKLOG_ERROR "
_WIRE_RE = re.compile(r"SPARKLOG_ERROR (\{.*\})", re.DOTALL)


def encode(err: BrokerError) -> str:
    """The text a FlightError carries: a prefix plus the error as one JSON object."""
    body = {**err.to_wire(), "retriable": err.retriable}
    return WIRE_PREFIX + json.dumps(body, separators=(",", ":"), default=str)


def decode(text: str) -> BrokerError | None:
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
        if isinstance(body, dict) and "code" in body:
            return make_error(
                str(body["code"]),
                str(body.get("message", "")),
                body.get("details") or {},
                body.get("retriable"),
            )
    return None
