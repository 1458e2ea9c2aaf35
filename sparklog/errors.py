"""The one error hierarchy of sparklog: storage, broker, wire protocols, clients and Spark.

Modelled on kafka-python's and aiokafka's errors: a root :class:`SparklogError`
and subclasses named after Kafka's error codes, each with

* ``errno``: Kafka's numeric error code (what the Kafka listener sends; ``-1``
  where Kafka has none and the error is sparklog's own),
* ``code``: Kafka's error name (``NOT_LEADER_OR_FOLLOWER``) or sparklog's own,
* ``retriable``: whether repeating the same call may succeed,
* ``invalid_metadata``: whether the caller should refresh metadata first.

Every layer raises these classes; nothing is translated by module name or by
message text. The Flight listener carries an error as its class name plus
``errno``, message and details (:func:`error_class` finds the class again).

Two rules (docs/architecture.md, "Layers") live here:

* a write whose outcome is unknown (the request was sent, the answer lost) is
  :class:`CommitStateUnknownError`: resolve it by re-reading, never by a blind
  retry, so ``retriable`` is false;
* programming errors are not outages: only the classes below are ever retried,
  an ``AttributeError`` or ``TypeError`` propagates as itself.
"""

from __future__ import annotations

from typing import Any, ClassVar

_BY_NAME: dict[str, type[SparklogError]] = {}
_BY_ERRNO: dict[int, type[SparklogError]] = {}


class SparklogError(Exception):
    """Root of every sparklog error."""

    errno: ClassVar[int] = -1
    code: ClassVar[str] = "UNKNOWN_SERVER_ERROR"
    retriable: bool = False
    invalid_metadata: ClassVar[bool] = False
    #: the class :func:`error_for_errno` returns for this ``errno`` (one per code)
    canonical: ClassVar[bool] = False

    def __init__(self, message: str = "", **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details: dict[str, Any] = details

    def __init_subclass__(
        cls,
        *,
        errno: int | None = None,
        code: str | None = None,
        retriable: bool | None = None,
        invalid_metadata: bool | None = None,
        canonical: bool = False,
        **kwargs: Any,
    ) -> None:
        """Declare a subclass's Kafka attributes in its class line; register it by name.

        ``canonical`` marks the class :func:`error_for_errno` returns for its ``errno``.
        """
        super().__init_subclass__(**kwargs)
        if errno is not None:
            cls.errno = errno
        if code is not None:
            cls.code = code
        if retriable is not None:
            cls.retriable = retriable
        if invalid_metadata is not None:
            cls.invalid_metadata = invalid_metadata
        cls.canonical = canonical
        _BY_NAME[cls.__name__] = cls
        if canonical:
            _BY_ERRNO[cls.errno] = cls

    def __str__(self) -> str:
        return self.message or self.code

    def __reduce__(self) -> tuple[Any, ...]:
        # Spark pickles errors between driver and workers: keep message and details.
        return (_rebuild, (type(self).__name__, self.message, self.details, self.retriable))


def _rebuild(name: str, message: str, details: dict[str, Any], retriable: bool) -> SparklogError:
    err = error_class(name)(message, **details)
    err.retriable = retriable
    return err


_BY_NAME["SparklogError"] = SparklogError


def error_class(name: str) -> type[SparklogError]:
    """The class called ``name`` (from a wire message); :class:`SparklogError` if unknown."""
    return _BY_NAME.get(name, SparklogError)


def error_for_errno(errno: int) -> type[SparklogError]:
    """The class of Kafka's numeric error code; :class:`UnknownServerError` if unknown."""
    return _BY_ERRNO.get(errno, UnknownServerError)


class UnknownServerError(SparklogError, errno=-1, code="UNKNOWN_SERVER_ERROR", canonical=True):
    """An unexpected failure on the server (a bug): not retried."""


# -- reachability and outcome ----------------------------------------------------------------


class UnavailableError(SparklogError, code="UNAVAILABLE", retriable=True):
    """Storage or a broker could not be reached or could not finish: try again later."""


class KafkaStorageError(UnavailableError, errno=56, code="KAFKA_STORAGE_ERROR", canonical=True):
    """The storage root failed the request (Kafka's KAFKA_STORAGE_ERROR)."""


class StoreUnavailableError(KafkaStorageError):
    """The object store could not be reached or refused the request."""


class StoreAccessError(SparklogError, code="STORE_ACCESS_DENIED"):
    """The object store refused the root's credentials, or its bucket does not exist.

    Not retriable: waiting does not fix a credential or a bucket name (Kafka
    clients see UNKNOWN_SERVER_ERROR, and the broker's log names the cause).
    """


class CommitConflictError(KafkaStorageError):
    """An optimistic commit kept losing its race to other writers; try again."""


class BrokerNotAvailableError(
    UnavailableError, errno=8, code="BROKER_NOT_AVAILABLE", canonical=True
):
    """No broker could be reached (or the one asked is shutting down or starting)."""


class LeaderNotAvailableError(
    UnavailableError, errno=5, code="LEADER_NOT_AVAILABLE", invalid_metadata=True, canonical=True
):
    """The partition has no leader at the moment (an election is under way)."""


class NotLeaderOrFollowerError(
    UnavailableError, errno=6, code="NOT_LEADER_OR_FOLLOWER", invalid_metadata=True, canonical=True
):
    """This broker does not lead the partition; ``details['leader_location']`` may name who does."""


class CoordinatorNotAvailableError(
    UnavailableError, errno=15, code="COORDINATOR_NOT_AVAILABLE", canonical=True
):
    pass


class NotCoordinatorError(UnavailableError, errno=16, code="NOT_COORDINATOR", canonical=True):
    pass


class KafkaTimeoutError(UnavailableError, errno=7, code="REQUEST_TIMED_OUT", canonical=True):
    """An operation did not finish within its timeout (``delivery_timeout_ms``...)."""


class ThrottlingQuotaExceededError(
    UnavailableError, errno=89, code="THROTTLING_QUOTA_EXCEEDED", canonical=True
):
    """The broker is at a resource limit (memory for requests, calls): retry after a backoff."""


class CommitStateUnknownError(SparklogError, errno=7, code="COMMIT_STATE_UNKNOWN"):
    """A write was sent but its answer was lost: it may or may not have been applied.

    Not retriable: re-read the log (or rely on an idempotent producer's sequence
    numbers) to learn the outcome; a blind retry can append twice.
    """


class IllegalStateError(SparklogError, code="ILLEGAL_STATE"):
    """A call the object's state does not allow, such as using a closed producer, consumer
    or broker client (Kafka's clients raise ``IllegalStateException``).  A programming
    error, never retried."""


class StagedObjectExpiredError(SparklogError, code="STAGED_OBJECT_EXPIRED"):
    """A staged object is older than the staged-object limit when its commit comes: the
    garbage collector may already have deleted it, so it is never committed.  Not
    retriable as it is: write the records again (a new object) and commit that."""


# -- the user's request ----------------------------------------------------------------------


class InvalidConfigurationError(
    SparklogError, ValueError, errno=40, code="INVALID_CONFIG", canonical=True
):
    """A bad address, option, config key or value: the message names it and what is accepted."""


class InvalidRequestError(SparklogError, errno=42, code="INVALID_REQUEST", canonical=True):
    """A malformed request: bad JSON, missing field, unknown action, garbage bytes."""


class UnsupportedVersionError(SparklogError, errno=35, code="UNSUPPORTED_VERSION", canonical=True):
    pass


class SecurityDisabledError(SparklogError, errno=54, code="SECURITY_DISABLED", canonical=True):
    """ACL requests: no authorizer is configured (``authorizer = ""``)."""


# -- authentication and authorisation (docs/security.md) ----------------------------------
class AuthorizationError(SparklogError, code="AUTHORIZATION_FAILED"):
    """The principal may not do this; the subclass names the resource type."""


class TopicAuthorizationFailedError(
    AuthorizationError, errno=29, code="TOPIC_AUTHORIZATION_FAILED", canonical=True
):
    pass


class GroupAuthorizationFailedError(
    AuthorizationError, errno=30, code="GROUP_AUTHORIZATION_FAILED", canonical=True
):
    pass


class ClusterAuthorizationFailedError(
    AuthorizationError, errno=31, code="CLUSTER_AUTHORIZATION_FAILED", canonical=True
):
    pass


class TransactionalIdAuthorizationFailedError(
    AuthorizationError, errno=53, code="TRANSACTIONAL_ID_AUTHORIZATION_FAILED", canonical=True
):
    pass


class UnsupportedSaslMechanismError(
    SparklogError, errno=33, code="UNSUPPORTED_SASL_MECHANISM", canonical=True
):
    pass


class IllegalSaslStateError(SparklogError, errno=34, code="ILLEGAL_SASL_STATE", canonical=True):
    pass


class SaslAuthenticationFailedError(
    SparklogError, errno=58, code="SASL_AUTHENTICATION_FAILED", canonical=True
):
    """Wrong user or password, or a broken SASL exchange (never names the password)."""


class SslAuthenticationFailedError(
    SparklogError, errno=57, code="SSL_AUTHENTICATION_FAILED", canonical=True
):
    """A TLS peer whose certificate cannot be read as a principal (the connection is closed)."""


class ResourceNotFoundError(SparklogError, errno=91, code="RESOURCE_NOT_FOUND", canonical=True):
    pass


class UnacceptableCredentialError(
    SparklogError, errno=93, code="UNACCEPTABLE_CREDENTIAL", canonical=True
):
    pass


class PolicyViolationError(SparklogError, errno=44, code="POLICY_VIOLATION", canonical=True):
    pass


class UnknownTopicOrPartitionError(SparklogError, KeyError):
    """The topic or partition does not exist (definitive on a storage root: not retried)."""

    errno = 3
    code = "UNKNOWN_TOPIC_OR_PARTITION"
    canonical = True

    def __str__(self) -> str:  # KeyError would quote the message
        return self.message or "unknown topic or partition"


class UnknownTopicIdError(
    UnknownTopicOrPartitionError, errno=100, code="UNKNOWN_TOPIC_ID", canonical=True
):
    """No topic has the id a Kafka request names (requests that address topics by id)."""


class TopicAlreadyExistsError(SparklogError, errno=36, code="TOPIC_ALREADY_EXISTS", canonical=True):
    pass


class InvalidTopicError(
    InvalidConfigurationError, errno=17, code="INVALID_TOPIC_EXCEPTION", canonical=True
):
    """A topic name that is not accepted."""


class InvalidPartitionsError(
    InvalidConfigurationError, errno=37, code="INVALID_PARTITIONS", canonical=True
):
    pass


class OffsetOutOfRangeError(SparklogError):
    """An offset outside the partition's ``[log_start_offset, high_watermark]``."""

    errno = 1
    code = "OFFSET_OUT_OF_RANGE"
    canonical = True

    def __init__(
        self,
        message: str = "",
        log_start_offset: int = -1,
        high_watermark: int = -1,
        **details: Any,
    ) -> None:
        details.setdefault("log_start_offset", log_start_offset)
        details.setdefault("high_watermark", high_watermark)
        super().__init__(message, **details)

    @property
    def log_start_offset(self) -> int:
        return int(self.details.get("log_start_offset", -1))

    @property
    def high_watermark(self) -> int:
        return int(self.details.get("high_watermark", -1))


class InvalidRecordError(SparklogError, errno=87, code="INVALID_RECORD", canonical=True):
    """A record the topic refuses: wrong schema, wrong type, bad timestamp."""


class MessageSizeTooLargeError(
    InvalidRecordError, errno=10, code="MESSAGE_TOO_LARGE", canonical=True
):
    """A record (or batch) over ``max.message.bytes``."""


class InvalidTimestampError(InvalidRecordError, errno=32, code="INVALID_TIMESTAMP", canonical=True):
    """A CreateTime record whose timestamp lies outside the topic's window
    (``message.timestamp.before.max.ms`` / ``message.timestamp.after.max.ms``)."""


class CorruptRecordError(SparklogError, errno=2, code="CORRUPT_MESSAGE", canonical=True):
    """Stored bytes fail their checksum or cannot be decoded; the message names the file.

    Never retriable and never the user's fault: the stored file needs repair.
    """


class CorruptMessageError(SparklogError, errno=2, code="CORRUPT_MESSAGE"):
    """A record batch received on the wire fails its CRC or cannot be parsed."""


class UnsupportedForMessageFormatError(
    SparklogError, errno=43, code="UNSUPPORTED_FOR_MESSAGE_FORMAT", canonical=True
):
    """A record batch of an old message format (magic 0 or 1): only magic 2 is accepted."""


class UnsupportedCompressionTypeError(
    SparklogError, errno=76, code="UNSUPPORTED_COMPRESSION_TYPE", canonical=True
):
    """A record batch compressed with a codec the broker does not know."""


class InvalidRequiredAcksError(
    SparklogError, errno=21, code="INVALID_REQUIRED_ACKS", canonical=True
):
    """Produce ``acks`` other than 0, 1 or -1 (all)."""


class InvalidReplicationFactorError(
    InvalidConfigurationError, errno=38, code="INVALID_REPLICATION_FACTOR", canonical=True
):
    """CreateTopics with a replication factor sparklog cannot honour (the data is shared)."""


# -- fencing and idempotent producers --------------------------------------------------------


class FencedError(SparklogError, code="FENCED"):
    """A newer leader or producer took over; this one must stop."""


class FencedLeaderEpochError(FencedError, errno=74, code="FENCED_LEADER_EPOCH", canonical=True):
    """A leader epoch that a newer leader has replaced."""


class UnknownLeaderEpochError(
    FencedError, errno=76, code="UNKNOWN_LEADER_EPOCH", retriable=True, canonical=True
):
    """A client's leader epoch is newer than the broker's (its metadata is ahead): retry."""


class ProducerFencedError(FencedError, errno=90, code="PRODUCER_FENCED", canonical=True):
    """A producer epoch that a newer instance of the producer has replaced."""


class OutOfOrderSequenceNumberError(
    SparklogError, errno=45, code="OUT_OF_ORDER_SEQUENCE_NUMBER", canonical=True
):
    """An idempotent producer's sequence number skipped or went back."""


class UnknownProducerIdError(SparklogError, errno=59, code="UNKNOWN_PRODUCER_ID", canonical=True):
    """The producer id expired (``producer.id.expiration.ms``): obtain a new one."""


# -- transactions ----------------------------------------------------------------------------


class InvalidProducerEpochError(
    SparklogError, errno=47, code="INVALID_PRODUCER_EPOCH", canonical=True
):
    """A transactional write with an epoch the coordinator has replaced (a zombie)."""


class InvalidTxnStateError(SparklogError, errno=48, code="INVALID_TXN_STATE", canonical=True):
    """The call does not fit the transaction's state (e.g. records to a partition not added)."""


class UnstableOffsetCommitError(
    SparklogError, errno=88, code="UNSTABLE_OFFSET_COMMIT", retriable=True, canonical=True
):
    """An open transaction holds offsets of the partition: ask again once it ends."""


class InvalidProducerIdMappingError(
    SparklogError, errno=49, code="INVALID_PRODUCER_ID_MAPPING", canonical=True
):
    """The producer id is not the one the transactional id holds."""


class InvalidTransactionTimeoutError(
    SparklogError, errno=50, code="INVALID_TRANSACTION_TIMEOUT", canonical=True
):
    """transaction.timeout.ms above the broker's transaction_max_timeout_ms (or below 1)."""


class ConcurrentTransactionsError(
    UnavailableError, errno=51, code="CONCURRENT_TRANSACTIONS", retriable=True, canonical=True
):
    """The previous transaction of this transactional id is still being completed: retry."""


class TransactionalIdNotFoundError(
    SparklogError, errno=105, code="TRANSACTIONAL_ID_NOT_FOUND", canonical=True
):
    """No transaction state for this transactional id."""


# -- consumer groups -------------------------------------------------------------------------


class GroupError(SparklogError, code="GROUP_ERROR"):
    """A consumer-group call the coordinator refused; the subclass says what to do."""


class RebalanceInProgressError(
    GroupError, errno=27, code="REBALANCE_IN_PROGRESS", retriable=True, canonical=True
):
    """The group is rebalancing: join again, then retry."""


class CommitFailedError(GroupError, code="COMMIT_FAILED"):
    """An offset commit from a stale generation or an unknown member was rejected."""


class IllegalGenerationError(
    CommitFailedError, errno=22, code="ILLEGAL_GENERATION", canonical=True
):
    """The member's generation is not the group's current one (a zombie member)."""


class UnknownMemberIdError(CommitFailedError, errno=25, code="UNKNOWN_MEMBER_ID", canonical=True):
    """The member id is not (or no longer) in the group: join with an empty id."""


class FencedInstanceIdError(GroupError, errno=82, code="FENCED_INSTANCE_ID", canonical=True):
    """Another member joined with this member's ``group.instance.id`` (KIP-345): this one
    is fenced for good (a restarted or duplicate static member took its place)."""


class InconsistentGroupProtocolError(
    GroupError, errno=23, code="INCONSISTENT_GROUP_PROTOCOL", canonical=True
):
    """The member's assignment strategy is not one the group's members share."""


class InvalidGroupIdError(
    GroupError, InvalidConfigurationError, errno=24, code="INVALID_GROUP_ID", canonical=True
):
    pass


class GroupIdNotFoundError(GroupError, errno=69, code="GROUP_ID_NOT_FOUND", canonical=True):
    pass


class NonEmptyGroupError(GroupError, errno=68, code="NON_EMPTY_GROUP", canonical=True):
    pass


class GroupSubscribedToTopicError(
    GroupError, errno=86, code="GROUP_SUBSCRIBED_TO_TOPIC", canonical=True
):
    """Offsets of a topic that active members of the group consume cannot be deleted."""


# KIP-848 (the consumer group protocol, ConsumerGroupHeartbeat)
class FencedMemberEpochError(GroupError, errno=110, code="FENCED_MEMBER_EPOCH", canonical=True):
    """A KIP-848 member's epoch is not the coordinator's: it must rejoin with epoch 0."""


class UnreleasedInstanceIdError(
    GroupError, errno=111, code="UNRELEASED_INSTANCE_ID", canonical=True
):
    """A KIP-848 static member joins with an instance id a live member still holds."""


class UnsupportedAssignorError(GroupError, errno=112, code="UNSUPPORTED_ASSIGNOR", canonical=True):
    """A KIP-848 member asks for a server-side assignor the coordinator does not have."""


class StaleMemberEpochError(
    CommitFailedError, errno=113, code="STALE_MEMBER_EPOCH", canonical=True
):
    """An offset commit or fetch carries an epoch that is not the KIP-848 member's current one."""


class InvalidRegularExpressionError(
    GroupError,
    InvalidConfigurationError,
    errno=128,
    code="INVALID_REGULAR_EXPRESSION",
    canonical=True,
):
    """A KIP-848 subscription regex the coordinator cannot compile."""


# -- the Spark data source (format("sparklog")) ----------------------------------------------
# Spark wraps these in its own exceptions, keeping the message; so every message names the
# offending option, column or range and what is accepted.


class SparkSourceError(SparklogError, code="SPARK_SOURCE"):
    """A Spark read or write through format("sparklog") cannot go on."""


class SparkOptionError(SparkSourceError, InvalidConfigurationError):
    """An option that is missing, unknown or has a value that is not accepted."""


class SinkColumnError(SparkSourceError, InvalidRecordError):
    """A DataFrame written to sparklog lacks ``value`` or has a column of a wrong type."""


class DataLossError(SparkSourceError, code="DATA_LOSS"):
    """Offsets the query needs are gone (retention, deleted topic) and failOnDataLoss=true."""


# -- mirror links (sparklog.mirror: links in the destination's cluster metadata log) ----------
# Here, not in sparklog.mirror, so a Flight client decodes them by name without importing the
# mirroring application.


class UnknownMirrorLinkError(SparklogError, code="UNKNOWN_MIRROR_LINK"):
    """No mirror link of that name in the destination's metadata log."""


class MirrorLinkExistsError(SparklogError, code="MIRROR_LINK_EXISTS"):
    """A mirror link of that name exists already."""


# -- connectors (sparklog.connect: topic -> Delta table, PostgreSQL -> topic) ------------------


class ConnectorError(SparklogError, code="CONNECTOR"):
    """A connector cannot go on: its source or target refused, or its state is inconsistent."""


class ConnectorConfigError(ConnectorError, InvalidConfigurationError):
    """A connector setting is missing or wrong (an unreachable host, an unknown table)."""


# Shorter names the clients have always used (one class each, not a second declaration).
ConfigError = InvalidConfigurationError
InvalidConfigError = InvalidConfigurationError
UnknownTopicError = UnknownTopicOrPartitionError
TopicExistsError = TopicAlreadyExistsError
CorruptionError = CorruptRecordError
NotLeaderError = NotLeaderOrFollowerError
UnknownMemberError = UnknownMemberIdError
OutOfOrderSequenceError = OutOfOrderSequenceNumberError
ProducerSequenceError = OutOfOrderSequenceNumberError
RequestTimedOutError = KafkaTimeoutError
