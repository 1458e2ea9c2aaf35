"""Errors raised by the storage layer.

Every error derives from :class:`StorageError`.  ``retriable`` tells a caller
whether the same call may succeed if simply repeated (as aiokafka's errors do).
User mistakes carry a message naming the offending value and what is accepted.
"""

from __future__ import annotations


class StorageError(Exception):
    """Root of every storage error."""

    retriable: bool = False
    code: str = "STORAGE_ERROR"


class InvalidConfigError(StorageError, ValueError):
    """A name, config key or config value that is not accepted."""

    code = "INVALID_CONFIG"


class UnknownTopicError(StorageError, KeyError):
    """The topic (or partition) does not exist."""

    code = "UNKNOWN_TOPIC"

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else "unknown topic"


class TopicExistsError(StorageError):
    """A topic of that name exists already."""

    code = "TOPIC_EXISTS"


class OffsetOutOfRangeError(StorageError):
    """An offset outside ``[log_start_offset, high_watermark]``."""

    code = "OFFSET_OUT_OF_RANGE"

    def __init__(self, message: str, log_start_offset: int = 0, high_watermark: int = 0):
        super().__init__(message)
        self.log_start_offset = log_start_offset
        self.high_watermark = high_watermark


class InvalidRecordError(StorageError):
    """A record the topic refuses: too large, wrong schema, wrong type."""

    code = "INVALID_RECORD"


class FencedError(StorageError):
    """A writer whose leader epoch or producer epoch is no longer current."""

    code = "FENCED"


class ProducerSequenceError(StorageError):
    """An idempotent producer's sequence number is out of order."""

    code = "OUT_OF_ORDER_SEQUENCE"


class CommitConflictError(StorageError):
    """Optimistic commit lost its race too many times; try again."""

    retriable = True
    code = "COMMIT_CONFLICT"


class StoreUnavailableError(StorageError):
    """The object store could not be reached or refused the request."""

    retriable = True
    code = "STORE_UNAVAILABLE"


class CorruptionError(StorageError):
    """Stored bytes do not match their checksum or cannot be decoded."""

    code = "CORRUPTION"
