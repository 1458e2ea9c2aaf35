"""The admin actions (Flight ``DoAction``): one table, one typed record per action.

Each :class:`Action` says everything both ends need to know about one action, so that
adding one touches this table, the broker's server function and the client's ``Admin``
(docs/architecture.md, "Admin actions"):

* ``name``: the Flight action type on the wire (never renamed: old clients and brokers
  interoperate);
* ``body``: the request's JSON fields (:class:`~sparklog.protocol.flight.Field`: name,
  accepted type, default): the broker parses with it, the client builds with it;
* ``result``: turns the JSON reply into the client's type (``Action[R]`` returns ``R``);
* ``acl``: what the caller must be allowed (:class:`Acl`: Kafka's operation on a resource);
  the broker's ``flight_acls`` evaluates it, as Kafka's ``KafkaApis`` authorises each API;
* ``route``: which broker serves it (any, the group's coordinator, the partition's leader);
* ``retriable`` / ``idempotent``: whether the client retries a retriable error, and whether
  an unknown outcome may be retried too (the action repeated has no further effect);
* ``timeout_s``: the call's own deadline when it is longer than the client's default.

A generic client call (``BrokerClient.call(action, **body)``, ``Backend.call``) runs any
entry; typed wrappers exist only where ``Admin`` (or the producer/consumer) gives a richer
signature.  This module imports only :mod:`sparklog.protocol.flight` and ground modules.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

from sparklog.errors import SparklogError
from sparklog.protocol import flight as wire
from sparklog.protocol.flight import Field, Request
from sparklog.topic_partition import TopicPartition

R = TypeVar("R")

#: which broker serves an action: any broker; the group's coordinator (the body's
#: ``group``); the leader of the body's ``topic`` and ``partition``
Route = Literal["any", "group", "leader"]

#: an :class:`Acl`'s resource kinds: a Kafka resource type, or how else the call is checked
CLUSTER = "CLUSTER"
TOPIC = "TOPIC"
GROUP = "GROUP"
#: no check on the call; its result leaves out what the caller may not describe
LISTED = "LISTED"
#: a rule of the broker's ``flight_acls.RULES`` named by ``field`` (more than one resource,
#: or one resource or another, as Kafka's CreateTopics and InitProducerId are checked)
RULE = "RULE"


@dataclass(frozen=True)
class Acl:
    """What an action's caller must be allowed: Kafka's ``operation`` on a ``resource`` kind
    (:data:`CLUSTER`, :data:`TOPIC`, :data:`GROUP`) named by the body's ``field``; or
    :data:`LISTED` (a listing, filtered) or :data:`RULE` (``field`` names the rule)."""

    operation: str
    resource: str
    field: str = ""


def cluster(operation: str) -> Acl:
    """``operation`` on the cluster."""
    return Acl(operation, CLUSTER)


def topic(operation: str, field: str = "topic") -> Acl:
    """``operation`` on the topic the body's ``field`` names."""
    return Acl(operation, TOPIC, field)


def group(operation: str) -> Acl:
    """``operation`` on the body's ``group``."""
    return Acl(operation, GROUP, "group")


def rule(name: str) -> Acl:
    """The broker's rule ``name`` (``flight_acls.RULES``)."""
    return Acl("", RULE, name)


#: a listing: every caller may ask; the answer holds what it may describe
LISTING = Acl("DESCRIBE", LISTED)


@dataclass(frozen=True)
class Action(Generic[R]):
    """One admin action: its wire name and body, its result, its ACL, how it is routed
    and retried (see the module's docstring)."""

    name: str
    body: Request
    result: Callable[[Any], R]
    acl: Acl
    route: Route = "any"
    retriable: bool = True
    idempotent: bool = False
    timeout_s: float | None = None

    def build(self, **values: Any) -> bytes:
        """The request's JSON bytes (TypeError for a field the action does not have)."""
        return wire.build(self.body, **values)

    def parse(self, decoded: Mapping[str, Any]) -> dict[str, Any]:
        """The request's fields by name, checked, with defaults filled (the broker's side)."""
        return wire.parse(self.body, decoded)


# -- results -----------------------------------------------------------------------
def _none(raw: Any) -> None:
    return None


def _dict(raw: Any) -> dict[str, Any]:
    return dict(raw)


def _dicts(raw: Any) -> list[dict[str, Any]]:
    return [dict(x) for x in raw]


def _strs(raw: Any) -> list[str]:
    return [str(x) for x in raw]


def _int(raw: Any) -> int:
    return int(raw)


def _raw(raw: Any) -> Any:
    return raw


def _producer_id(raw: Any) -> tuple[int, int]:
    pid, epoch = raw
    return int(pid), int(epoch)


def _partitions(raw: Any) -> list[TopicPartition]:
    return [TopicPartition(str(t), int(p)) for t, p in raw]


def _committed(raw: Any) -> dict[TopicPartition, tuple[int, str]]:
    """fetch_offsets' rows ``[topic, partition, offset, metadata]`` (old brokers: no metadata)."""
    out: dict[TopicPartition, tuple[int, str]] = {}
    for row in raw:
        metadata = str(row[3]) if len(row) > 3 and row[3] is not None else ""
        out[TopicPartition(str(row[0]), int(row[1]))] = (int(row[2]), metadata)
    return out


def _users(raw: Any) -> dict[str, list[tuple[str, int]]]:
    return {str(u): [(str(m), int(i)) for m, i in creds] for u, creds in raw.items()}


def _transactions(raw: Any) -> dict[str, dict[str, Any]]:
    return {str(k): dict(v) for k, v in raw.items()}


def _partition_errors(raw: Any) -> dict[TopicPartition, SparklogError | None]:
    return wire.decode_partition_errors(raw)


_GROUP = Field("group", str)
_MEMBER = Field("member_id", str)
_GENERATION = Field("generation", int)
_NAME = Field("name", str)

# -- topics and the cluster --------------------------------------------------------
#: topics' partitions and leaders; ``sizes``: also each partition's watermarks and stored
#: bytes, read from the root (an explicit describe); without it the broker's memory answers
METADATA = Action(
    "metadata",
    (Field("topics", list, None), Field("sizes", bool, False)),
    _dict,
    rule("metadata"),
    idempotent=True,
)
DESCRIBE_CLUSTER = Action("describe_cluster", (), _dict, cluster("DESCRIBE"), idempotent=True)
LIST_TOPICS = Action("list_topics", (), _strs, LISTING, idempotent=True)
CREATE_TOPIC = Action(
    "create_topic",
    (
        _NAME,
        Field("partitions", int, 1),
        Field("config", dict, None),
        Field("value_schema", str, None),
        Field("replication_factor", int, 1),
    ),
    _dict,
    rule("create_topic"),  # Kafka: CREATE on the cluster, or on the topic
)
DELETE_TOPIC = Action("delete_topic", (_NAME,), _none, topic("DELETE", "name"))
ALTER_TOPIC_CONFIG = Action(
    "alter_topic_config",
    (_NAME, Field("updates", dict, {}), Field("remove", list, [])),
    _dict,
    topic("ALTER_CONFIGS", "name"),
)
ADD_PARTITIONS = Action(
    "add_partitions", (_NAME, Field("total", int)), _int, topic("ALTER", "name")
)
LIST_OFFSETS = Action(
    "list_offsets",
    (Field("topic", str), Field("partition", int), Field("spec", Any)),
    _int,
    topic("DESCRIBE"),
    idempotent=True,
)
INIT_PRODUCER_ID = Action(
    "init_producer_id",
    (),
    _producer_id,
    rule("init_producer_id"),  # Kafka (KIP-679): IDEMPOTENT_WRITE, or WRITE on any topic
)
#: Kafka's DeleteRecords, on the partition's leader (which fences it with its epoch)
DELETE_RECORDS = Action(
    "delete_records",
    (Field("topic", str), Field("partition", int), Field("offset", int)),
    _int,
    topic("DELETE"),
    route="leader",
)

# -- consumer groups (on the group's coordinator) -----------------------------------
#: result: ``wire.encode_join_result``'s fields (the client builds its JoinResult)
JOIN_GROUP = Action(
    "join_group",
    (
        _GROUP,
        Field("member_id", str, ""),
        Field("topics", list),
        Field("strategy", Any, "range"),
        Field("session_timeout_ms", int, 10_000),
        Field("rebalance_timeout_ms", int, 30_000),
    ),
    wire.decode_join_result,
    group("READ"),
    route="group",
)
#: assignment: {member_id: [[topic, partition], ...]}
SYNC_GROUP = Action(
    "sync_group",
    (_GROUP, _GENERATION, _MEMBER, Field("assignment", dict, None)),
    _partitions,
    group("READ"),
    route="group",
)
HEARTBEAT = Action("heartbeat", (_GROUP, _GENERATION, _MEMBER), _none, group("READ"), route="group")
LEAVE_GROUP = Action("leave_group", (_GROUP, _MEMBER), _none, group("READ"), route="group")
#: offsets: [[topic, partition, offset], ...]; READ on the group and on each topic
COMMIT_OFFSETS = Action(
    "commit_offsets",
    (
        _GROUP,
        Field("generation", int, -1),
        Field("member_id", str, ""),
        Field("offsets", list),
        Field("metadata", str, ""),
    ),
    _none,
    rule("commit_offsets"),
    route="group",
)
#: result: [[topic, partition, offset, metadata], ...] (any broker reads the root's)
FETCH_OFFSETS = Action("fetch_offsets", (_GROUP,), _committed, group("DESCRIBE"), idempotent=True)
LIST_GROUPS = Action("list_groups", (), _strs, LISTING, idempotent=True)
DESCRIBE_GROUP = Action(
    "describe_group", (_GROUP,), _dict, group("DESCRIBE"), route="group", idempotent=True
)
DELETE_GROUP = Action("delete_group", (_GROUP,), _none, group("DELETE"), route="group")
#: partitions: [[topic, partition], ...]; result: ``wire.encode_partition_errors``
DELETE_OFFSETS = Action(
    "delete_offsets",
    (_GROUP, Field("partitions", list)),
    _partition_errors,
    rule("delete_offsets"),
    route="group",
)

# -- transactions (Kafka's transactional ids; registered in the metadata log) ------
#: result: {transactional id: state (see broker_lite.transactions.coordinator)}
LIST_TRANSACTIONS = Action("list_transactions", (), _transactions, LISTING, idempotent=True)
#: Kafka's kafka-transactions abort writes markers (WriteTxnMarkers): a cluster action
ABORT_TRANSACTION = Action(
    "abort_transaction", (Field("transactional_id", str),), _none, cluster("ALTER")
)
#: a partition leader's question to a transactional id's coordinator (KIP-890's
#: verification, an inter-broker request): the id's state as the coordinator holds it
#: (see broker_lite.transactions.coordinator; None: no state)
TRANSACTION_STATE = Action(
    "transaction_state",
    (Field("transactional_id", str),),
    _raw,
    cluster("CLUSTER_ACTION"),
    idempotent=True,
)
#: Kafka's WriteTxnMarkers, from a transaction's coordinator to the leader of partitions of
#: one shard of ``topic`` (Kafka's inter-broker request): ``markers`` are [partition,
#: producer id, producer epoch, transaction number, committed]; the leader writes them
#: through its journal (docs/architecture.md, "Markers to the leader"); result:
#: {partition: control record offset, -1 where none was written now}.  Idempotent: the
#: same markers again write nothing.
WRITE_TXN_MARKERS = Action(
    "write_txn_markers",
    (Field("topic", str), Field("markers", list)),
    _dict,
    cluster("CLUSTER_ACTION"),
    idempotent=True,
)

#: a brokerless writer's commit of the objects it wrote (the Spark sink, an embedded
#: producer), handed to the broker whose journal leases the shards, so that the writer
#: does not revoke the leader's leases (docs/architecture.md, "Brokerless writers hand
#: their commits to the leader"); ``appends``: {partition: [staged segment, ...]} of
#: shards the broker leads (one journal commit for all), ``producers``: {partition:
#: [producer id, epoch, first sequence, records]}, ``txn``: [app id, version]; the
#: result {partition: [base offset, records, version, duplicate]}.  Trusted as a writer
#: of the root is (its segments name objects of the root)
COMMIT_STAGED = Action(
    "commit_staged",
    (
        Field("topic", str),
        Field("topic_id", str),
        Field("appends", dict),
        Field("producers", dict, {}),
        Field("txn", list, None),
    ),
    _dict,
    cluster("CLUSTER_ACTION"),
    retriable=False,
)

#: a mirror link's brokerless copy, its commit handed to the broker whose journal leases
#: the destination's shard, as ``commit_staged`` is (docs/mirroring.md): ``appends``:
#: {partition: [segment, ...]} placed at the source's offsets (``base_offset`` set) in
#: objects already copied into the root, ``link``: the link's name, ``expected``:
#: {partition: the end the copy was planned from}; journalled only while each end holds
#: (else ``MirrorPositionMovedError``, or ``duplicate`` when the copy is in place); the
#: result {partition: [base offset, records, version, duplicate]}
COMMIT_MIRRORED = Action(
    "commit_mirrored",
    (
        Field("topic", str),
        Field("topic_id", str),
        Field("appends", dict),
        Field("link", str),
        Field("expected", dict),
    ),
    _dict,
    cluster("CLUSTER_ACTION"),
    retriable=False,
)

# -- SCRAM users, as Kafka's AlterUserScramCredentials / DescribeUserScramCredentials -
#: the client sends the salt and the salted password (base64), never the password; the
#: broker derives the stored keys
SET_SCRAM_CREDENTIAL = Action(
    "set_scram_credential",
    (
        Field("user", str),
        Field("mechanism", str),
        Field("iterations", int),
        Field("salt", str),
        Field("salted_password", str),
    ),
    _none,
    cluster("ALTER"),
)
#: result: the mechanisms deleted
DELETE_SCRAM_CREDENTIAL = Action(
    "delete_scram_credential",
    (Field("user", str), Field("mechanism", str, None)),
    _strs,
    cluster("ALTER"),
)
#: result: {user: [(mechanism, iterations), ...]}
LIST_USERS = Action("list_users", (), _users, cluster("DESCRIBE"), idempotent=True)

# -- mirror links in the metadata log (results: sparklog.mirror.admin's documents) ---
# Confluent's cluster-link APIs: ALTER on the cluster to change links (and to promote a
# mirror topic), DESCRIBE to read them
CREATE_MIRROR_LINK = Action(
    "create_mirror_link",
    (
        _NAME,
        Field("source", str),
        Field("topics", str),
        Field("groups", str, ""),
        Field("prefix", str, ""),
        Field("source_options", dict, None),
    ),
    _dict,
    cluster("ALTER"),
)
LIST_MIRROR_LINKS = Action("list_mirror_links", (), _dicts, cluster("DESCRIBE"), idempotent=True)
#: the broker reads the source for the lag: a slow source takes its time
DESCRIBE_MIRROR_LINK = Action(
    "describe_mirror_link",
    (_NAME,),
    _dict,
    cluster("DESCRIBE"),
    idempotent=True,
    timeout_s=120,
)
PAUSE_MIRROR_LINK = Action(
    "pause_mirror_link", (_NAME, Field("paused", bool)), _dict, cluster("ALTER")
)
DELETE_MIRROR_LINK = Action("delete_mirror_link", (_NAME,), _none, cluster("ALTER"))
PROMOTE_MIRROR_TOPIC = Action(
    "promote_mirror_topic", (Field("topic", str),), _dict, cluster("ALTER")
)
REVERSE_MIRROR_LINK = Action(
    "reverse_mirror_link",
    (_NAME, Field("reverse_name", str, ""), Field("source_options", dict, None)),
    _dict,
    cluster("ALTER"),
    timeout_s=120,
)

#: every action by its wire name: the broker serves exactly these (a test checks it)
ACTIONS: dict[str, Action[Any]] = {
    a.name: a
    for a in (
        METADATA,
        DESCRIBE_CLUSTER,
        LIST_TOPICS,
        CREATE_TOPIC,
        DELETE_TOPIC,
        ALTER_TOPIC_CONFIG,
        ADD_PARTITIONS,
        LIST_OFFSETS,
        INIT_PRODUCER_ID,
        DELETE_RECORDS,
        JOIN_GROUP,
        SYNC_GROUP,
        HEARTBEAT,
        LEAVE_GROUP,
        COMMIT_OFFSETS,
        FETCH_OFFSETS,
        LIST_GROUPS,
        DESCRIBE_GROUP,
        DELETE_GROUP,
        DELETE_OFFSETS,
        LIST_TRANSACTIONS,
        ABORT_TRANSACTION,
        WRITE_TXN_MARKERS,
        TRANSACTION_STATE,
        COMMIT_STAGED,
        COMMIT_MIRRORED,
        SET_SCRAM_CREDENTIAL,
        DELETE_SCRAM_CREDENTIAL,
        LIST_USERS,
        CREATE_MIRROR_LINK,
        LIST_MIRROR_LINKS,
        DESCRIBE_MIRROR_LINK,
        PAUSE_MIRROR_LINK,
        DELETE_MIRROR_LINK,
        PROMOTE_MIRROR_TOPIC,
        REVERSE_MIRROR_LINK,
    )
}


def register(action: Action[R]) -> Action[R]:
    """Add ``action`` to :data:`ACTIONS` (its wire name must be new); returns it.

    The table's own entries are listed above; this is how code outside the module (a
    plugin, a test's fake action) adds one."""
    if action.name in ACTIONS:
        raise ValueError(f"action {action.name!r} is already in the table")
    ACTIONS[action.name] = action
    return action


def build(name: str, /, **values: Any) -> bytes:
    """The body of the action named ``name`` (KeyError for one the table does not have)."""
    return ACTIONS[name].build(**values)
