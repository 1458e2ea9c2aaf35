"""A KIP-848 consumer group's state, typed: the ``consumer`` part of a group's state document.

A consumer group's document (:class:`~sparklog.groups.classic_group.GroupDoc`, marked
``type = "consumer"``) keeps its own state in ``consumer`` (:class:`ConsumerState`):
the group epoch, the epoch of the last target assignment and the assignor that made
it, each member (:class:`ConsumerMemberDoc`: its epochs, the partitions it owns and
is revoking, its subscription; a member speaking the classic protocol also its
:class:`ClassicBridgeDoc`), the target assignment and the subscribed topics'
partition counts.  The decoded requests and answers of the protocol are here too.
Types, constructors and helpers only: no I/O, no clock; the transitions are in
:mod:`~sparklog.groups.consumer_reconcile` (assignment and reconciliation),
:mod:`~sparklog.groups.consumer_classic` (classic members and the migrations) and
:mod:`~sparklog.groups.consumer_groups` (the heartbeat, leaving, expiry).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict

#: the group type a document is marked with (a classic group has no ``type``)
CONSUMER_TYPE = "consumer"
#: KIP-848's group states
EMPTY, ASSIGNING, RECONCILING, STABLE = "Empty", "Assigning", "Reconciling", "Stable"
#: member epochs a heartbeat sends to leave: for good, or (a static member) to come back
LEAVE_EPOCH, STATIC_LEAVE_EPOCH = -1, -2
#: the protocol type of Kafka's consumers (JoinGroup's protocol_type)
CONSUMER_PROTOCOL_TYPE = "consumer"
#: the classic group state whose assignment is the members' (else the previous one is)
CLASSIC_STABLE = "Stable"

#: ``[[topic, partition], ...]``, sorted: partitions as the JSON document holds them
Partitions = list[list[Any]]


class ClassicBridgeDoc(TypedDict):
    """A consumer group's member speaking the classic protocol (JoinGroup/SyncGroup): its
    JoinGroup's session timeout and its protocols' base64 metadata, in preference order."""

    session_timeout_ms: int
    protocols: dict[str, str]


class _MemberRequired(TypedDict):
    member_epoch: int
    previous_member_epoch: int
    assigned: Partitions
    revoking: Partitions
    revoke_deadline_ms: int
    topic_names: list[str]
    topic_regex: str | None
    assignor: str | None


class ConsumerMemberDoc(_MemberRequired, total=False):
    """One member of :class:`ConsumerState` (see :func:`new_member`): its epoch and the one
    before, the partitions it owns (``assigned``) and must give up (``revoking``, until
    ``revoke_deadline_ms``), its subscription (names and regex) and assignor.  The optional
    fields are set on a join and read with ``.get``."""

    instance_id: str | None
    rack_id: str | None
    rebalance_timeout_ms: int
    client_id: str
    client_host: str
    #: a classic member's JoinGroup (None or absent: a KIP-848 member)
    classic: ClassicBridgeDoc | None
    #: the principal and host its regex is resolved for (ACLs, KAFKA-18813)
    principal: str
    principal_host: str


class ConsumerState(TypedDict):
    """The ``consumer`` part of a consumer group's document (see :func:`empty_state`)."""

    group_epoch: int
    #: the group epoch the current target assignment was computed at
    assignment_epoch: int
    assignor: str
    members: dict[str, ConsumerMemberDoc]
    #: member -> the partitions the assignor gave it
    target: dict[str, Partitions]
    #: subscribed topic -> its partition count, at the group epoch
    topics: dict[str, int]


def empty_state() -> ConsumerState:
    return {
        "group_epoch": 0,
        "assignment_epoch": 0,
        "assignor": "",
        "members": {},
        "target": {},
        "topics": {},
    }


def new_member() -> ConsumerMemberDoc:
    """A member that has just joined: epoch 0, owning nothing."""
    return {
        "member_epoch": 0,
        "previous_member_epoch": 0,
        "assigned": [],
        "revoking": [],
        "revoke_deadline_ms": 0,
        "topic_names": [],
        "topic_regex": None,
        "assignor": None,
    }


def is_consumer_group(doc: Mapping[str, object]) -> bool:
    return doc.get("type") == CONSUMER_TYPE


def has_members(doc: Mapping[str, Any]) -> bool:
    """Whether a group document of either type has members."""
    return bool(doc["members"]) or bool(doc.get("consumer", {}).get("members"))


def uses_classic_protocol(entry: ConsumerMemberDoc) -> bool:
    """Whether a consumer group's member speaks the classic protocol (JoinGroup/SyncGroup)."""
    return entry.get("classic") is not None


def classic_of(entry: ConsumerMemberDoc) -> ClassicBridgeDoc:
    """A classic member's JoinGroup part (the caller checked :func:`uses_classic_protocol`)."""
    classic = entry.get("classic")
    assert classic is not None, "a KIP-848 member has no classic part"
    return classic


def sorted_pairs(tps: Iterable[Sequence[Any]]) -> Partitions:
    """Partitions as the document holds them: ``[[topic, partition], ...]``, sorted, once each."""
    return [[str(t), int(p)] for t, p in sorted({(str(t), int(p)) for t, p in tps})]


def pair_set(tps: Iterable[Sequence[Any]]) -> set[tuple[str, int]]:
    return {(str(t), int(p)) for t, p in tps}


@dataclass(frozen=True)
class Heartbeat:
    """One ConsumerGroupHeartbeat, decoded (topic names, not ids); None = unchanged."""

    group: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    topic_names: Sequence[str] | None = None
    topic_regex: str | None = None
    assignor: str | None = None
    owned: Sequence[tuple[str, int]] | None = None
    client_id: str = ""
    client_host: str = ""
    #: the member's principal (``User:bob``) and address where a broker checks ACLs: its
    #: regex is resolved to the topics it may describe (``ConsumerGroupProtocol.may_describe``)
    principal: str | None = None
    principal_host: str = "*"


@dataclass(frozen=True)
class ClassicJoin:
    """A classic JoinGroup to a consumer group: the member's subscription and protocols.

    ``protocols`` maps each protocol (assignor) name to its base64 metadata, in the
    member's order of preference; ``owned`` is ConsumerProtocolSubscription v1+'s owned
    partitions (None for v0: nothing owned).
    """

    member_id: str
    new: bool
    topics: Sequence[str]
    protocols: dict[str, str]
    protocol_type: str | None
    session_timeout_ms: int
    rebalance_timeout_ms: int
    instance_id: str | None = None
    owned: Sequence[tuple[str, int]] | None = None


@dataclass(frozen=True)
class HeartbeatAnswer:
    """What the member is told: its id and epoch, and (None: unchanged) its partitions."""

    member_id: str
    member_epoch: int
    heartbeat_interval_ms: int
    assignment: list[tuple[str, int]] | None = field(default=None)
