"""KIP-848's consumer group protocol: server-side assignment, member epochs, reconciliation.

A member heartbeats (ConsumerGroupHeartbeat) with its subscription and the
partitions it owns; the coordinator answers with its member epoch and the
partitions it may own now.  The group has an epoch, bumped by every change of
membership, subscriptions or the subscribed topics' partitions; a bumped epoch
makes the group's assignor compute a new *target assignment*.  Each member then
converges on its target one heartbeat at a time (Kafka's CurrentAssignmentBuilder):

* partitions it owns and must give up are revoked first (the answer leaves them
  out); the member stays at its old epoch until a heartbeat shows it no longer
  owns them;
* then it moves to the target's epoch and gets its new partitions, but only
  those no other member still owns (revoked and not yet acknowledged): a
  partition is never owned by two members at once.

The state is the ``consumer`` part of the group's state document, changed
through :meth:`GroupCoordinator.state_doc(group).update` like a classic group's, so
an in-memory coordinator writes each change (rare: joins, leaves, epochs) to the
root and a new coordinator restores it; heartbeat times stay in memory
(``GroupCoordinator.touch``), and restored members get one session timeout to
come back.

Classic and consumer members may share a group, as Kafka 4's
``group.consumer.migration.policy`` (broker key ``group_consumer_migration_policy``)
allows: a member's first heartbeat to a classic group of Kafka consumers
converts it (*online upgrade*, :meth:`ConsumerGroupProtocol._upgrade`: each classic
member becomes a member at the classic generation owning its classic assignment,
subscribed to its JoinGroup topics); classic members of a consumer group are served
from its state (:meth:`ConsumerGroupProtocol.classic_join` and the sync, heartbeat and
leave next to it: the JoinGroup reconciles them, the SyncGroup hands out what they
may own, a heartbeat says REBALANCE_IN_PROGRESS when they must rejoin); when the last
consumer-protocol member leaves and classic members remain, the group becomes a
classic group again and rebalances (*online downgrade*, :meth:`_downgrade`).  With the
policy ``disabled`` the two never share a group: a heartbeat to a classic group with
members is GROUP_ID_NOT_FOUND, a JoinGroup to a consumer group with members
INCONSISTENT_GROUP_PROTOCOL; an empty group of either type becomes the other.
"""

from __future__ import annotations

import re
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sparklog.clock import now_ms
from sparklog.errors import (
    FencedInstanceIdError,
    FencedMemberEpochError,
    GroupIdNotFoundError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    InvalidRegularExpressionError,
    InvalidRequestError,
    RebalanceInProgressError,
    StaleMemberEpochError,
    UnknownMemberIdError,
    UnreleasedInstanceIdError,
    UnsupportedAssignorError,
)
from sparklog.groups.assignors import range_assign, sticky_assign
from sparklog.topic_partition import TopicPartition

if TYPE_CHECKING:
    from sparklog.groups.coordinator import GroupCoordinator

#: the group type a document is marked with (a classic group has no ``type``)
CONSUMER_TYPE = "consumer"
#: KIP-848's group states
EMPTY, ASSIGNING, RECONCILING, STABLE = "Empty", "Assigning", "Reconciling", "Stable"
#: member epochs a heartbeat sends to leave: for good, or (a static member) to come back
LEAVE_EPOCH, STATIC_LEAVE_EPOCH = -1, -2
#: Kafka's server-side assignors: ``uniform`` (balanced and sticky) is the default
ASSIGNORS = {"uniform": sticky_assign, "range": range_assign}
DEFAULT_ASSIGNOR = "uniform"
#: Kafka's group.consumer.migration.policy values; ``bidirectional`` is Kafka 4's default
MIGRATION_POLICIES = ("bidirectional", "upgrade", "downgrade", "disabled")
UPGRADE_POLICIES = ("bidirectional", "upgrade")
DOWNGRADE_POLICIES = ("bidirectional", "downgrade")
#: the protocol type of Kafka's consumers (JoinGroup's protocol_type)
CONSUMER_PROTOCOL_TYPE = "consumer"
#: the classic group state whose assignment is the members' (else the previous one is)
CLASSIC_STABLE = "Stable"

Partitions = list[list[Any]]  # [[topic, partition], ...], sorted (JSON-friendly)


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


def is_consumer_group(doc: dict[str, Any]) -> bool:
    return doc.get("type") == CONSUMER_TYPE


def uses_classic_protocol(entry: dict[str, Any]) -> bool:
    """Whether a consumer group's member speaks the classic protocol (JoinGroup/SyncGroup)."""
    return entry.get("classic") is not None


def has_members(doc: dict[str, Any]) -> bool:
    """Whether a group document of either type has members."""
    return bool(doc["members"]) or bool(doc.get("consumer", {}).get("members"))


def compile_regex(pattern: str) -> re.Pattern[str]:
    """A subscription regex (Java's syntax; the common subset Python's ``re`` shares).

    Kafka matches the whole topic name (RE2J); constructs Python lacks
    (``\\p{L}``, ``(?<name>...)`` is accepted by both) are refused with
    INVALID_REGULAR_EXPRESSION naming the pattern.
    """
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise InvalidRegularExpressionError(
            f"subscribed_topic_regex {pattern!r} is not accepted ({exc}); accepted: the "
            "regular expressions Java and Python share (classes, groups, alternation, "
            "quantifiers)"
        ) from None


def _empty_state() -> dict[str, Any]:
    return {
        "group_epoch": 0,
        "assignment_epoch": 0,
        "assignor": "",
        "members": {},
        "target": {},
        "topics": {},
    }


def _new_entry() -> dict[str, Any]:
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


def _sorted(tps: Any) -> Partitions:
    return [[str(t), int(p)] for t, p in sorted({(str(t), int(p)) for t, p in tps})]


def _set(tps: Any) -> set[tuple[str, int]]:
    return {(str(t), int(p)) for t, p in tps}


class ConsumerGroupProtocol:
    """KIP-848 for one coordinator: heartbeats, describe, expiry, offset-commit checks."""

    def __init__(
        self,
        coordinator: GroupCoordinator,
        *,
        session_timeout_ms: int = 45_000,
        heartbeat_interval_ms: int = 5_000,
        migration_policy: str = "bidirectional",
    ) -> None:
        if migration_policy not in MIGRATION_POLICIES:
            raise InvalidRequestError(
                f"group_consumer_migration_policy {migration_policy!r} is not accepted; "
                f"accepted: {', '.join(MIGRATION_POLICIES)}"
            )
        self.coordinator = coordinator
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.migration_policy = migration_policy
        #: (principal, host, topic) -> whether that member may describe the topic; set by
        #: a broker with an authorizer, so a regex subscription is resolved to the topics
        #: its member may see, as Kafka's (KAFKA-18813). None: every topic (embedded use)
        self.may_describe: Callable[[str, str, str], bool] | None = None

    # -- the heartbeat -------------------------------------------------------
    def heartbeat(self, request: Heartbeat) -> HeartbeatAnswer:
        """Apply one heartbeat to the group and answer it (see the module's docstring)."""
        self._validate(request)
        member = request.member_id or uuid.uuid4().hex  # v0 lets the coordinator name it
        state = self.coordinator.state_doc(request.group)
        answer: list[HeartbeatAnswer] = []

        def change(doc: dict[str, Any]) -> dict[str, Any]:
            answer.clear()
            now = now_ms()
            # expire first (either type): a group may change type in that step
            self.coordinator.maintain_doc(request.group, doc, now)
            self._adopt(doc)
            group = doc["consumer"]
            if request.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
                self._leave(doc, member, request)
                answer.append(HeartbeatAnswer(member, request.member_epoch, 0))
                return doc
            entry, sent_full, new = self._member(group, member, request)
            self._refresh_target(doc, changed=self._subscribe(entry, request) or new)
            before = (entry["member_epoch"], entry["assigned"])
            self._reconcile(group, member, entry, request.owned)
            owned = _set(request.owned) if request.owned is not None else None
            changed = before != (entry["member_epoch"], entry["assigned"])
            tell = sent_full or changed or (owned is not None and owned != _set(entry["assigned"]))
            self._set_state(doc)
            answer.append(
                HeartbeatAnswer(
                    member,
                    entry["member_epoch"],
                    self.heartbeat_interval_ms,
                    [(t, p) for t, p in entry["assigned"]] if tell else None,
                )
            )
            return doc

        if request.member_epoch >= 0:
            self.coordinator.touch(request.group, member)  # before: a sweep must not expire it
        try:
            state.update(change)
        except (UnknownMemberIdError, GroupIdNotFoundError):
            # not a member: keep no heartbeat time for it
            self.coordinator.forget_heartbeat(request.group, member)
            raise
        return answer[0]

    def _validate(self, request: Heartbeat) -> None:
        if not request.group:
            raise InvalidRequestError("GroupId can't be empty.")
        if request.member_epoch == 0:
            if request.rebalance_timeout_ms < 0:
                raise InvalidRequestError("RebalanceTimeoutMs must be provided in first request.")
            if request.owned is None:
                raise InvalidRequestError("TopicPartitions must be empty when (re-)joining.")
            if request.topic_names is None and request.topic_regex is None:
                raise InvalidRequestError(
                    "SubscribedTopicNames or SubscribedTopicRegex must be set in first request."
                )
        if request.member_epoch == STATIC_LEAVE_EPOCH and not request.instance_id:
            raise InvalidRequestError("InstanceId can't be null when MemberEpoch is -2.")
        if request.member_epoch < STATIC_LEAVE_EPOCH:
            raise InvalidRequestError(f"MemberEpoch {request.member_epoch} is not accepted.")
        if request.member_epoch != 0 and not request.member_id:
            raise InvalidRequestError("MemberId can't be empty.")
        if request.assignor is not None and request.assignor not in ASSIGNORS:
            raise UnsupportedAssignorError(
                f"ServerAssignor {request.assignor!r} is not supported; supported assignors: "
                f"{', '.join(ASSIGNORS)}."
            )
        if request.topic_regex:
            compile_regex(request.topic_regex)

    def _adopt(self, doc: dict[str, Any]) -> None:
        """Make ``doc`` a consumer group (an empty classic one, or one upgraded), or refuse."""
        if is_consumer_group(doc):
            return
        if doc["members"]:
            self._upgrade(doc)
            return
        doc["type"] = CONSUMER_TYPE
        doc["consumer"] = _empty_state()
        doc["state"] = EMPTY

    def _refuse_upgrade(self, doc: dict[str, Any]) -> str | None:
        """Why the classic group ``doc`` cannot become a consumer group (None: it can).

        Kafka's validateOnlineUpgrade: the policy allows it and every member is a Kafka
        consumer (protocol type ``consumer``, a decodable subscription).  Any state will
        do, as in Kafka: a rebalance in progress is abandoned (see :meth:`_upgrade`).
        """
        if self.migration_policy not in UPGRADE_POLICIES:
            return (
                f"group_consumer_migration_policy = {self.migration_policy!r} allows no "
                "online upgrade of a classic group with members"
            )
        foreign = sorted(
            m
            for m, e in doc["members"].items()
            if e.get("metadata") is None
            or e.get("protocol_type") != CONSUMER_PROTOCOL_TYPE
            or not e["topics"]
        )
        if foreign:
            return (
                f"its members {foreign} are not Kafka consumers (protocol type "
                f"{CONSUMER_PROTOCOL_TYPE!r} with a consumer protocol subscription)"
            )
        return None

    def _upgrade(self, doc: dict[str, Any]) -> None:
        """Convert a classic group with members into a consumer group (Kafka's online
        upgrade): each member keeps its classic assignment and generation as its owned
        partitions, target and member epoch, and goes on with the classic protocol.

        A group mid-rebalance is converted too, as Kafka does: its members own what the
        last completed rebalance gave them (``previous_assignment``), and their pending
        joins and syncs answer REBALANCE_IN_PROGRESS (the new member moved the group's
        epoch on), so they rejoin the consumer group.
        """
        why = self._refuse_upgrade(doc)
        if why is not None:
            raise GroupIdNotFoundError(f"Group {doc['group']} is not a consumer group: {why}.")
        generation = int(doc["generation"])
        state = _empty_state()
        state.update(group_epoch=generation, assignment_epoch=generation)
        stable = doc["state"] == CLASSIC_STABLE
        last = doc["assignment"] if stable else doc.get("previous_assignment", {})
        for member, classic in doc["members"].items():
            owned = _sorted(last.get(member, []))
            entry = _new_entry()
            entry.update(
                member_epoch=generation,
                previous_member_epoch=generation,
                assigned=owned,
                topic_names=sorted(set(classic["topics"])),
                instance_id=classic.get("instance_id"),
                rack_id=None,
                rebalance_timeout_ms=classic["rebalance_timeout_ms"],
                client_id=member,
                client_host="",
                classic={
                    "session_timeout_ms": classic["session_timeout_ms"],
                    "protocols": dict(classic["metadata"]),
                },
            )
            state["members"][member] = entry
            state["target"][member] = owned
        wanted = {t for e in state["members"].values() for t in e["topic_names"]}
        state["topics"] = {t: n for t, n in self.coordinator.partition_counts(wanted).items() if n}
        doc.update(
            type=CONSUMER_TYPE,
            consumer=state,
            members={},
            assignment={},
            opaque_assignment={},
            previous_assignment={},
            leader="",
            protocol="",
        )
        self._set_state(doc)

    def _member(
        self, group: dict[str, Any], member: str, request: Heartbeat
    ) -> tuple[dict[str, Any], bool, bool]:
        """The heartbeating member's entry (created on a join), whether it (re)joined and
        whether it is new to the group (the group's epoch moves on)."""
        members = group["members"]
        entry = members.get(member)
        if request.member_epoch == 0:
            if request.instance_id:
                holder = next(
                    (
                        m
                        for m, e in members.items()
                        if e.get("instance_id") == request.instance_id and m != member
                    ),
                    None,
                )
                if holder is not None:
                    if members[holder]["member_epoch"] != STATIC_LEAVE_EPOCH:
                        raise UnreleasedInstanceIdError(
                            f"Static member {holder} with instance id {request.instance_id} "
                            "cannot be replaced because it has not left the group."
                        )
                    # KIP-848 static membership: the returning instance takes the old
                    # member's place and partitions, at the epoch it had
                    entry = members.pop(holder)
                    entry["member_epoch"] = entry["previous_member_epoch"]
                    members[member] = entry
                    if holder in group["target"]:
                        group["target"][member] = group["target"].pop(holder)
                    self.coordinator.forget_heartbeat(request.group, holder)
                    return entry, True, False
            new = entry is None or entry["member_epoch"] != 0
            if new:
                if entry is not None:  # a rejoin of a known id: it owns nothing now
                    self._release(entry)
                entry = _new_entry()
                members[member] = entry
            entry.update(
                instance_id=request.instance_id,
                rack_id=request.rack_id,
                rebalance_timeout_ms=request.rebalance_timeout_ms,
                client_id=request.client_id,
                client_host=request.client_host,
            )
            return entry, True, new
        if entry is None:
            raise UnknownMemberIdError(f"Member {member} is not a member of group {request.group}.")
        if request.instance_id and entry.get("instance_id") not in (None, request.instance_id):
            raise FencedInstanceIdError(
                f"Member {member} has instance id {entry.get('instance_id')}, not "
                f"{request.instance_id}."
            )
        if request.member_epoch != entry["member_epoch"]:
            owned = _set(request.owned or ())
            lost_answer = request.member_epoch == entry["previous_member_epoch"] and owned <= _set(
                entry["assigned"]
            )
            if not lost_answer:
                raise FencedMemberEpochError(
                    f"The consumer group member has a member epoch ({request.member_epoch}) "
                    f"which does not match the coordinator's ({entry['member_epoch']}); it "
                    "must rejoin the group."
                )
        if request.rebalance_timeout_ms >= 0:
            entry["rebalance_timeout_ms"] = request.rebalance_timeout_ms
        return entry, False, False

    def _subscribe(self, entry: dict[str, Any], request: Heartbeat) -> bool:
        """Take the heartbeat's subscription and assignor; True if they changed."""
        before = (entry["topic_names"], entry["topic_regex"], entry["assignor"])
        if request.principal is not None:
            entry["principal"] = request.principal
            entry["principal_host"] = request.principal_host
        if request.topic_names is not None:
            entry["topic_names"] = sorted(set(request.topic_names))
        if request.topic_regex is not None:
            entry["topic_regex"] = request.topic_regex or None
        if request.assignor is not None:
            entry["assignor"] = request.assignor
        return before != (entry["topic_names"], entry["topic_regex"], entry["assignor"])

    # -- assignment ----------------------------------------------------------
    def _subscribed_topics(self, entry: dict[str, Any], topics: Sequence[str]) -> list[str]:
        names = set(entry["topic_names"])
        if entry["topic_regex"]:
            pattern = compile_regex(entry["topic_regex"])
            matched = [t for t in topics if pattern.fullmatch(t)]
            principal, may = entry.get("principal"), self.may_describe
            if principal is not None and may is not None:
                host = entry.get("principal_host") or "*"
                matched = [t for t in matched if may(principal, host, t)]
            names.update(matched)
        return sorted(names)

    def _refresh_target(self, doc: dict[str, Any], changed: bool) -> None:
        """Bump the group epoch (once) if members or subscriptions ``changed`` or the
        subscribed topics' partitions did, and compute the new target assignment."""
        group = doc["consumer"]
        members = group["members"]  # a static member that left keeps its partitions
        regex = any(e["topic_regex"] for e in members.values())
        existing = list(self.coordinator.root.list_topics()) if regex else []
        subscriptions = {m: self._subscribed_topics(e, existing) for m, e in members.items()}
        wanted = {t for ts in subscriptions.values() for t in ts}
        counts = {t: n for t, n in self.coordinator.partition_counts(wanted).items() if n}
        if changed or counts != group["topics"]:
            group["topics"] = counts
            group["group_epoch"] += 1
        if group["assignment_epoch"] >= group["group_epoch"]:
            return
        chosen = Counter(e["assignor"] for e in members.values() if e["assignor"])
        name = chosen.most_common(1)[0][0] if chosen else DEFAULT_ASSIGNOR
        previous = {
            m: [TopicPartition(str(t), int(p)) for t, p in tps]
            for m, tps in group["target"].items()
        }
        result = ASSIGNORS[name](subscriptions, counts, previous) if members else {}
        group["target"] = {m: _sorted(result.get(m, [])) for m in members}
        group["assignor"] = name
        group["assignment_epoch"] = group["group_epoch"]

    def _owned_by_others(self, group: dict[str, Any], member: str) -> set[tuple[str, int]]:
        return {
            tp
            for m, e in group["members"].items()
            if m != member
            for tp in _set(e["assigned"]) | _set(e["revoking"])
        }

    def _reconcile(
        self,
        group: dict[str, Any],
        member: str,
        entry: dict[str, Any],
        owned: Sequence[tuple[str, int]] | None,
    ) -> None:
        """Move ``entry`` one step towards its target (revoke first, then assign free ones)."""
        if entry["revoking"]:
            if owned is None or _set(owned) & _set(entry["revoking"]):
                return  # not acknowledged yet
            entry["revoking"] = []
            entry["revoke_deadline_ms"] = 0
        target = _set(group["target"].get(member, []))
        assigned = _set(entry["assigned"])
        if entry["member_epoch"] == group["assignment_epoch"] and assigned == target:
            return
        revoke = assigned - target
        if revoke:
            entry["assigned"] = _sorted(assigned & target)
            entry["revoking"] = _sorted(revoke)
            entry["revoke_deadline_ms"] = now_ms() + int(
                entry.get("rebalance_timeout_ms") or self.session_timeout_ms
            )
            return
        free = target - self._owned_by_others(group, member)
        if entry["member_epoch"] != group["assignment_epoch"]:
            entry["previous_member_epoch"] = entry["member_epoch"]
            entry["member_epoch"] = group["assignment_epoch"]
        entry["assigned"] = _sorted(assigned | free)

    def _release(self, entry: dict[str, Any]) -> None:
        entry["assigned"] = []
        entry["revoking"] = []

    def _set_state(self, doc: dict[str, Any]) -> None:
        if not is_consumer_group(doc):
            return  # downgraded to a classic group: its own states apply
        group = doc["consumer"]
        members = group["members"].values()
        if not group["members"]:
            doc["state"] = EMPTY
        elif group["assignment_epoch"] < group["group_epoch"]:
            doc["state"] = ASSIGNING
        elif any(
            e["member_epoch"] != group["assignment_epoch"] or e["revoking"]
            for e in members
            if e["member_epoch"] >= 0
        ):
            doc["state"] = RECONCILING
        else:
            doc["state"] = STABLE

    # -- classic members (JoinGroup/SyncGroup/Heartbeat/LeaveGroup) -------------
    def refuse_classic_member(self, doc: dict[str, Any]) -> bool:
        """Whether a classic JoinGroup goes to the consumer group ``doc`` (True), or to the
        classic protocol (False: a classic group, or an empty consumer group, made classic
        again here); refused with INCONSISTENT_GROUP_PROTOCOL under the policy ``disabled``."""
        if not is_consumer_group(doc):
            return False
        if doc["consumer"]["members"]:
            if self.migration_policy == "disabled":
                raise InconsistentGroupProtocolError(
                    f"Group {doc['group']} is a consumer group (KIP-848, "
                    "group.protocol=consumer) with members; a classic member cannot join it "
                    "while group_consumer_migration_policy = 'disabled'"
                )
            return True
        for key in ("type", "consumer"):
            doc.pop(key, None)
        doc["state"] = EMPTY
        return False

    def classic_join(self, doc: dict[str, Any], join: ClassicJoin) -> tuple[int, str]:
        """A classic member's JoinGroup to the consumer group ``doc`` (Kafka's
        classicGroupJoinToConsumerGroup): join or update the member, move the group's
        epoch if its subscription changed, reconcile it with the partitions its
        subscription says it owns.  Answers its member epoch (the JoinGroup's
        generation) and protocol; it is never the leader, so it assigns nothing.  A new
        member id with the ``group.instance.id`` of a member already in the group takes
        that member's place, partitions and epoch (KIP-345; the old id is fenced)."""
        group = doc["consumer"]
        member = join.member_id
        self._check_classic_protocols(doc, member, join)
        entry = group["members"].get(member)
        if entry is None and join.instance_id:
            entry = self._replace_static(doc, member, join.instance_id)
        if entry is None and not join.new:
            raise UnknownMemberIdError(f"Member {member} is not a member of group {doc['group']}.")
        if entry is not None and not uses_classic_protocol(entry):
            raise UnknownMemberIdError(f"Member {member} does not use the classic protocol.")
        new = entry is None
        if entry is None:
            entry = _new_entry()
            group["members"][member] = entry
        before = entry["topic_names"]
        entry.update(
            topic_names=sorted(set(join.topics)),
            instance_id=join.instance_id,
            rebalance_timeout_ms=join.rebalance_timeout_ms,
            client_id=entry.get("client_id") or member,
            client_host=entry.get("client_host", ""),
            classic={
                "session_timeout_ms": join.session_timeout_ms,
                "protocols": dict(join.protocols),
            },
        )
        entry.setdefault("rack_id", None)
        self._refresh_target(doc, changed=new or before != entry["topic_names"])
        self._reconcile(group, member, entry, list(join.owned or ()))
        self._set_state(doc)
        return entry["member_epoch"], next(iter(join.protocols))

    def _replace_static(
        self, doc: dict[str, Any], member: str, instance_id: str
    ) -> dict[str, Any] | None:
        """Move the entry of the member holding ``instance_id`` (if any) to ``member``, with
        its target, and fence the old member id; the entry moved, or None."""
        group = doc["consumer"]
        old = self.static_member(doc, instance_id)
        if not old or old == member:
            return None
        entry: dict[str, Any] = group["members"].pop(old)
        group["members"][member] = entry
        if old in group["target"]:
            group["target"][member] = group["target"].pop(old)
        if entry["member_epoch"] == STATIC_LEAVE_EPOCH:
            entry["member_epoch"] = entry["previous_member_epoch"]
        entry["client_id"] = member
        self.coordinator.forget_heartbeat(doc["group"], old)
        self.coordinator.fence(doc, old, instance_id)
        return entry

    def _check_classic_protocols(self, doc: dict[str, Any], member: str, join: ClassicJoin) -> None:
        """Kafka's throwIfClassicProtocolIsNotSupported: a Kafka consumer (protocol type
        ``consumer``) sharing a protocol with the group's other classic members."""
        if join.protocol_type not in (None, CONSUMER_PROTOCOL_TYPE):
            raise InconsistentGroupProtocolError(
                f"Member {member}'s protocol type {join.protocol_type!r} is not supported by "
                f"consumer group {doc['group']}; accepted: {CONSUMER_PROTOCOL_TYPE!r}"
            )
        others = [
            set(e["classic"]["protocols"])
            for m, e in doc["consumer"]["members"].items()
            if m != member and uses_classic_protocol(e)
        ]
        if others and not any(all(p in o for o in others) for p in join.protocols):
            raise InconsistentGroupProtocolError(
                f"Member {member}'s protocols {list(join.protocols)} share none with the "
                f"classic members of group {doc['group']}"
            )

    def classic_member(self, doc: dict[str, Any], member: str, generation: int) -> dict[str, Any]:
        """A classic member's entry, checked: known, classic, at ``generation``."""
        entry = doc["consumer"]["members"].get(member)
        if entry is None:
            raise UnknownMemberIdError(f"Member {member} is not a member of group {doc['group']}.")
        if not uses_classic_protocol(entry):
            raise UnknownMemberIdError(f"Member {member} does not use the classic protocol.")
        if generation != entry["member_epoch"]:
            raise IllegalGenerationError(
                f"The member {member} has generation {generation}, not its member epoch "
                f"{entry['member_epoch']} in consumer group {doc['group']}; it must rejoin."
            )
        return entry

    def classic_sync(self, doc: dict[str, Any], member: str, generation: int) -> Partitions:
        """A classic member's SyncGroup: the partitions it may own now (Kafka's
        classicGroupSyncToConsumerGroup); REBALANCE_IN_PROGRESS if the group moved on
        since its join and it has nothing left to revoke."""
        entry = self.classic_member(doc, member, generation)
        group = doc["consumer"]
        if group["group_epoch"] > entry["member_epoch"] and not entry["revoking"]:
            raise RebalanceInProgressError(
                f"A new rebalance is triggered in group {doc['group']} and member {member} "
                "should rejoin to catch up."
            )
        return [list(tp) for tp in entry["assigned"]]

    def classic_heartbeat(self, doc: dict[str, Any], member: str, generation: int) -> None:
        """A classic member's Heartbeat (after its session is renewed): REBALANCE_IN_PROGRESS
        when it must rejoin: the group's epoch moved on, it has partitions to revoke, or the
        partitions it waits for are all free now (Kafka's classicGroupHeartbeatToConsumerGroup)."""
        entry = self.classic_member(doc, member, generation)
        group = doc["consumer"]
        pending = _set(group["target"].get(member, [])) - _set(entry["assigned"])
        waiting = bool(pending & self._owned_by_others(group, member))
        if (
            entry["member_epoch"] < group["group_epoch"]
            or entry["revoking"]
            or (pending and not waiting)
        ):
            raise RebalanceInProgressError(
                f"group {doc['group']!r} is rebalancing; member {member} must rejoin"
            )

    def classic_leave(self, doc: dict[str, Any], member: str) -> bool:
        """A classic member's LeaveGroup; True if it was a member (the group may be
        downgraded to classic by it)."""
        entry = doc["consumer"]["members"].get(member)
        if entry is None:
            return False
        if not uses_classic_protocol(entry):
            raise UnknownMemberIdError(f"Member {member} does not use the classic protocol.")
        self._remove(doc, [member])
        self._set_state(doc)
        return True

    def static_member(self, doc: dict[str, Any], instance_id: str) -> str:
        """The consumer group's member with ``instance_id`` ('' if none)."""
        return next(
            (
                m
                for m, e in doc["consumer"]["members"].items()
                if e.get("instance_id") == instance_id
            ),
            "",
        )

    # -- leaving and expiry ----------------------------------------------------
    def _leave(self, doc: dict[str, Any], member: str, request: Heartbeat) -> None:
        group = doc["consumer"]
        entry = group["members"].get(member)
        if entry is None and request.instance_id:
            member, entry = next(
                (
                    (m, e)
                    for m, e in group["members"].items()
                    if e.get("instance_id") == request.instance_id
                ),
                (member, None),
            )
        if entry is None:
            raise UnknownMemberIdError(f"Member {member} is not a member of group {request.group}.")
        if request.member_epoch == STATIC_LEAVE_EPOCH:
            # the static member comes back within its session: keep its place and partitions
            entry["previous_member_epoch"] = entry["member_epoch"]
            entry["member_epoch"] = STATIC_LEAVE_EPOCH
        else:
            self._remove(doc, [member])
        self._set_state(doc)

    def _remove(self, doc: dict[str, Any], gone: Sequence[str]) -> None:
        """Remove members; a group left with classic members only may become classic."""
        group = doc["consumer"]
        for member in gone:
            group["members"].pop(member, None)
            self.coordinator.forget_heartbeat(doc["group"], member)
        if not gone:
            return
        if self._may_downgrade(group):
            self._downgrade(doc)
            return
        for member in gone:
            group["target"].pop(member, None)
        self._refresh_target(doc, changed=True)

    def _may_downgrade(self, group: dict[str, Any]) -> bool:
        """Kafka's validateOnlineDowngrade: members remain, all of them classic, and the
        policy allows it."""
        members = group["members"].values()
        return (
            self.migration_policy in DOWNGRADE_POLICIES
            and bool(members)
            and all(uses_classic_protocol(e) for e in members)
        )

    def _downgrade(self, doc: dict[str, Any]) -> None:
        """Convert a consumer group whose members all speak the classic protocol into a
        classic group (Kafka's online downgrade) at generation = the group epoch, each
        member with its target assignment, and start a rebalance: the members' next
        heartbeats answer REBALANCE_IN_PROGRESS and their leader assigns."""
        group = doc["consumer"]
        now = now_ms()
        members: dict[str, Any] = {}
        for order, (member, entry) in enumerate(sorted(group["members"].items())):
            classic = entry["classic"]
            members[member] = {
                "topics": list(entry["topic_names"]),
                "strategies": list(classic["protocols"]),
                "session_timeout_ms": classic["session_timeout_ms"],
                "rebalance_timeout_ms": entry.get("rebalance_timeout_ms")
                or classic["session_timeout_ms"],
                "join_ms": now + order,
                "joined": False,
                "metadata": dict(classic["protocols"]),
                "instance_id": entry.get("instance_id"),
                "protocol_type": CONSUMER_PROTOCOL_TYPE,
            }
        first = next(iter(members.values()))["strategies"]
        common = [s for s in first if all(s in m["strategies"] for m in members.values())]
        assignment = {m: _sorted(group["target"].get(m, [])) for m in members}
        for key in ("type", "consumer"):
            doc.pop(key, None)
        doc.update(
            state=CLASSIC_STABLE,
            generation=max(int(doc.get("generation", 0)), int(group["group_epoch"])),
            protocol=common[0] if common else first[0],
            leader=next(iter(members)),
            members=members,
            assignment=assignment,
            opaque_assignment={},
            previous_assignment=assignment,
        )
        self.coordinator.start_rebalance(doc, now)

    def maintain(self, group_id: str, doc: dict[str, Any], now: int) -> bool:
        """Expire silent members (any state) and members that never revoked; True if changed."""
        group = doc["consumer"]
        members = list(group["members"])
        if not members:
            return False
        beats = self.coordinator.last_heartbeats(group_id, members)
        gone = [
            m
            for m in members
            if now - beats.get(m, 0) > self._session_timeout_ms(group["members"][m])
            or (
                group["members"][m]["revoking"]
                and now > group["members"][m]["revoke_deadline_ms"] > 0
            )
        ]
        if not gone:
            return False
        self._remove(doc, gone)
        self._set_state(doc)
        return True

    def _session_timeout_ms(self, entry: dict[str, Any]) -> int:
        """A member's session: a classic member's own (its JoinGroup's), else the broker's."""
        if uses_classic_protocol(entry):
            return int(entry["classic"]["session_timeout_ms"])
        return self.session_timeout_ms

    # -- offsets and describe ----------------------------------------------------
    def check_member(self, doc: dict[str, Any], member: str, epoch: int) -> None:
        """An offset commit's or fetch's member id and epoch (OffsetCommit/OffsetFetch v9);
        a classic member's generation is its member epoch (ILLEGAL_GENERATION, which
        classic clients understand, when it is not)."""
        entry = doc["consumer"]["members"].get(member)
        if entry is None:
            raise UnknownMemberIdError(f"Member {member} is not a member of group {doc['group']}.")
        if uses_classic_protocol(entry) and epoch != entry["member_epoch"]:
            raise IllegalGenerationError(
                f"generation {epoch} of classic member {member} is not its member epoch "
                f"{entry['member_epoch']} in consumer group {doc['group']}; it must rejoin"
            )
        if epoch != entry["member_epoch"]:
            raise StaleMemberEpochError(
                f"The member epoch {epoch} of member {member} is stale; the current one is "
                f"{entry['member_epoch']}."
            )

    def describe(self, doc: dict[str, Any]) -> dict[str, Any]:
        """The group as ConsumerGroupDescribe shows it (topic names; ids are the listener's)."""
        if not is_consumer_group(doc):
            raise GroupIdNotFoundError(f"Group {doc['group']} is not a consumer group.")
        group = doc["consumer"]
        return {
            "state": doc["state"],
            "group_epoch": group["group_epoch"],
            "assignment_epoch": group["assignment_epoch"],
            "assignor": group["assignor"] or DEFAULT_ASSIGNOR,
            "members": {
                m: {
                    "member_epoch": e["member_epoch"],
                    "instance_id": e.get("instance_id"),
                    "rack_id": e.get("rack_id"),
                    "client_id": e.get("client_id", ""),
                    "client_host": e.get("client_host", ""),
                    "topic_names": list(e["topic_names"]),
                    "topic_regex": e["topic_regex"],
                    "assigned": [(t, p) for t, p in e["assigned"]],
                    "target": [(t, p) for t, p in group["target"].get(m, [])],
                    "classic": uses_classic_protocol(e),
                }
                for m, e in sorted(group["members"].items())
            },
        }
