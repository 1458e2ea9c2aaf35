"""The broker's errors are :mod:`sparklog.errors`: a re-export shim, to be removed.

How errors cross Flight (``encode``/``decode``/``make_error``) lives in
:mod:`sparklog.broker_lite.flight_protocol`; re-exported here for old callers.
"""

from __future__ import annotations

from sparklog.broker_lite.flight_protocol import (
    MESSAGE_CHARS_MAX,
    WIRE_PREFIX,
    decode,
    encode,
    make_error,
)
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
)

BrokerError = SparklogError
BrokerUnavailableError = BrokerNotAvailableError
RetriableStorageError = KafkaStorageError


def from_storage(exc: SparklogError) -> SparklogError:
    """Storage errors are the broker's errors already; kept for callers not yet simplified."""
    return exc


__all__ = [
    "MESSAGE_CHARS_MAX",
    "WIRE_PREFIX",
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
