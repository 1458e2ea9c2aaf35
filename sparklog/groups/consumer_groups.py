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
come back.  Classic and consumer members never share a group (Kafka's
``group.consumer.migration.policy=disabled``): a heartbeat to a classic group
with members is GROUP_ID_NOT_FOUND, a JoinGroup to a consumer group with members
INCONSISTENT_GROUP_PROTOCOL; an empty group of either type becomes the other.
"""

from __future__ import annotations

import re
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sparklog.clock import now_ms
from sparklog.errors import (
    FencedInstanceIdError,
    FencedMemberEpochError,
    GroupIdNotFoundError,
    InconsistentGroupProtocolError,
    InvalidRegularExpressionError,
    InvalidRequestError,
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


@dataclass(frozen=True)
class HeartbeatAnswer:
    """What the member is told: its id and epoch, and (None: unchanged) its partitions."""

    member_id: str
    member_epoch: int
    heartbeat_interval_ms: int
    assignment: list[tuple[str, int]] | None = field(default=None)


def is_consumer_group(doc: dict[str, Any]) -> bool:
    return doc.get("type") == CONSUMER_TYPE


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
    ) -> None:
        self.coordinator = coordinator
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms

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
            self._adopt(doc)
            self.maintain(request.group, doc, now)
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
        """Make ``doc`` a consumer group (it may be an empty classic one), or refuse."""
        if is_consumer_group(doc):
            return
        if doc["members"]:
            raise GroupIdNotFoundError(f"Group {doc['group']} is not a consumer group.")
        doc["type"] = CONSUMER_TYPE
        doc["consumer"] = _empty_state()
        doc["state"] = EMPTY

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
                entry = {
                    "member_epoch": 0,
                    "previous_member_epoch": 0,
                    "assigned": [],
                    "revoking": [],
                    "revoke_deadline_ms": 0,
                    "topic_names": [],
                    "topic_regex": None,
                    "assignor": None,
                }
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
            names.update(t for t in topics if pattern.fullmatch(t))
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
        group = doc["consumer"]
        for member in gone:
            group["members"].pop(member, None)
            group["target"].pop(member, None)
            self.coordinator.forget_heartbeat(doc["group"], member)
        if gone:
            self._refresh_target(doc, changed=True)

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
            if now - beats.get(m, 0) > self.session_timeout_ms
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

    # -- offsets and describe ----------------------------------------------------
    def check_member(self, doc: dict[str, Any], member: str, epoch: int) -> None:
        """An offset commit's or fetch's member id and epoch (OffsetCommit/OffsetFetch v9)."""
        entry = doc["consumer"]["members"].get(member)
        if entry is None:
            raise UnknownMemberIdError(f"Member {member} is not a member of group {doc['group']}.")
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
                }
                for m, e in sorted(group["members"].items())
            },
        }


def refuse_classic_join(doc: dict[str, Any]) -> None:
    """A JoinGroup into a consumer group: refused while it has members; an empty one
    becomes a classic group again."""
    if not is_consumer_group(doc):
        return
    if doc["consumer"]["members"]:
        raise InconsistentGroupProtocolError(
            f"Group {doc['group']} is a consumer group (KIP-848, group.protocol=consumer) "
            "with members; a classic member cannot join it"
        )
    for key in ("type", "consumer"):
        doc.pop(key, None)
    doc["state"] = "Empty"
