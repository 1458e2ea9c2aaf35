"""The storage layer's errors: the classes of :mod:`sparklog.errors`, re-exported."""

from __future__ import annotations

from sparklog.errors import (
    CommitConflictError,
    CommitStateUnknownError,
    CorruptionError,
    FencedError,
    FencedLeaderEpochError,
    InvalidConfigError,
    InvalidRecordError,
    MessageSizeTooLargeError,
    OffsetOutOfRangeError,
    ProducerFencedError,
    ProducerSequenceError,
    SparklogError,
    StoreUnavailableError,
    TopicExistsError,
    UnknownTopicError,
)

StorageError = SparklogError

__all__ = [
    "CommitConflictError",
    "CommitStateUnknownError",
    "CorruptionError",
    "FencedError",
    "FencedLeaderEpochError",
    "InvalidConfigError",
    "InvalidRecordError",
    "MessageSizeTooLargeError",
    "OffsetOutOfRangeError",
    "ProducerFencedError",
    "ProducerSequenceError",
    "StorageError",
    "StoreUnavailableError",
    "TopicExistsError",
    "UnknownTopicError",
]
