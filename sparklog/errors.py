"""Errors of the sparklog client, one root and a few subclasses.

Every error says whether repeating the call may succeed (``retriable``), as
Kafka's clients do, and carries a stable ``code``.  Errors from the storage
engine and from brokers are translated into these by :func:`translate` so an
application catches one family whichever address it uses.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


class SparklogError(Exception):
    """Root of every client error."""

    retriable: bool = False
    code: str = "SPARKLOG_ERROR"


class ConfigError(SparklogError, ValueError):
    """A bad address, option, config key or value: the message names it and what is accepted."""

    code = "INVALID_CONFIG"


class UnknownTopicError(SparklogError, KeyError):
    """The topic or partition does not exist."""

    code = "UNKNOWN_TOPIC"

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else "unknown topic"


class TopicExistsError(SparklogError):
    code = "TOPIC_EXISTS"


class OffsetOutOfRangeError(SparklogError):
    """An offset outside the partition's ``[log_start_offset, high_watermark]``."""

    code = "OFFSET_OUT_OF_RANGE"

    def __init__(self, message: str, log_start_offset: int = -1, high_watermark: int = -1):
        super().__init__(message)
        self.log_start_offset = log_start_offset
        self.high_watermark = high_watermark


class InvalidRecordError(SparklogError):
    """A record the topic refuses (too large, wrong schema)."""

    code = "INVALID_RECORD"


class FencedError(SparklogError):
    """A newer producer or leader took over; this one must stop."""

    code = "FENCED"


class GroupError(SparklogError):
    """A consumer-group call the coordinator refused (stale generation, unknown member...)."""

    code = "GROUP_ERROR"


class RebalanceInProgressError(GroupError):
    """The group is rebalancing: re-join, then retry."""

    retriable = True
    code = "REBALANCE_IN_PROGRESS"


class CommitFailedError(GroupError):
    """An offset commit from a stale generation or an unknown member was rejected."""

    code = "ILLEGAL_GENERATION"


class UnavailableError(SparklogError):
    """Storage or broker could not be reached, or a retriable failure persisted."""

    retriable = True
    code = "UNAVAILABLE"


class KafkaTimeoutError(SparklogError):
    """An operation did not finish within its timeout (delivery.timeout.ms, max.block.ms...)."""

    retriable = True
    code = "TIMEOUT"


_BY_CODE: dict[str, type[SparklogError]] = {
    "INVALID_CONFIG": ConfigError,
    "UNKNOWN_TOPIC": UnknownTopicError,
    "UNKNOWN_TOPIC_OR_PARTITION": UnknownTopicError,
    "TOPIC_EXISTS": TopicExistsError,
    "TOPIC_ALREADY_EXISTS": TopicExistsError,
    "OFFSET_OUT_OF_RANGE": OffsetOutOfRangeError,
    "INVALID_RECORD": InvalidRecordError,
    "FENCED": FencedError,
    "REBALANCE_IN_PROGRESS": RebalanceInProgressError,
    "ILLEGAL_GENERATION": CommitFailedError,
    "UNKNOWN_MEMBER": CommitFailedError,
    "UNKNOWN_MEMBER_ID": CommitFailedError,
    "INCONSISTENT_GROUP_PROTOCOL": GroupError,
    "BROKER_UNAVAILABLE": UnavailableError,
    "OUT_OF_ORDER_SEQUENCE": SparklogError,
    "STORE_UNAVAILABLE": UnavailableError,
    "UNAVAILABLE": UnavailableError,
    "NOT_LEADER": UnavailableError,
    "COMMIT_CONFLICT": UnavailableError,
    "TIMEOUT": KafkaTimeoutError,
}


def from_foreign(exc: BaseException) -> SparklogError:
    """The client error for a storage or broker error (matched by its ``code``)."""
    if isinstance(exc, SparklogError):
        return exc
    code = str(getattr(exc, "code", "") or "")
    cls = _BY_CODE.get(code)
    if cls is None:
        cls = UnavailableError if getattr(exc, "retriable", False) else SparklogError
    if cls is OffsetOutOfRangeError:
        out: SparklogError = OffsetOutOfRangeError(
            str(exc),
            int(getattr(exc, "log_start_offset", -1)),
            int(getattr(exc, "high_watermark", -1)),
        )
    else:
        out = cls(str(exc))
    if getattr(exc, "retriable", None) is not None and cls in (SparklogError, GroupError):
        out.retriable = bool(exc.retriable)  # type: ignore[attr-defined]
    if code and cls is SparklogError:
        out.code = code
    return out


def _is_foreign(exc: BaseException) -> bool:
    module = type(exc).__module__
    return module.startswith(("storage.", "broker_lite.")) and hasattr(exc, "code")


@contextmanager
def translate() -> Iterator[None]:
    """Re-raise storage and broker errors as sparklog errors (keeping the cause)."""
    try:
        yield
    except SparklogError:
        raise
    except Exception as exc:
        if _is_foreign(exc):
            raise from_foreign(exc) from exc
        raise


__all__ = [
    "CommitFailedError",
    "ConfigError",
    "FencedError",
    "GroupError",
    "InvalidRecordError",
    "KafkaTimeoutError",
    "OffsetOutOfRangeError",
    "RebalanceInProgressError",
    "SparklogError",
    "TopicExistsError",
    "UnavailableError",
    "UnknownTopicError",
    "from_foreign",
    "translate",
]


# -- the Spark data source (format("sparklog")) ---------------------------------------------
# Spark wraps these in its own exceptions, keeping the message; so every message names the
# offending option, column or range and what is accepted.


class SparkSourceError(SparklogError):
    """A Spark read or write through format("sparklog") cannot go on."""

    code = "SPARK_SOURCE"


class SparkOptionError(SparkSourceError, ValueError):
    """An option that is missing, unknown or has a value that is not accepted."""

    code = "INVALID_CONFIG"


class SinkColumnError(SparkSourceError, ValueError):
    """A DataFrame written to sparklog lacks ``value`` or has a column of a wrong type."""

    code = "INVALID_RECORD"


class DataLossError(SparkSourceError):
    """Offsets the query needs are gone (retention, deleted topic) and failOnDataLoss=true."""

    code = "DATA_LOSS"
