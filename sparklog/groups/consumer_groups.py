"""KIP-848's consumer group protocol: server-side assignment, member epochs, reconciliation.

A member heartbeats (ConsumerGroupHeartbeat) with its subscription and the
partitions it owns; the coordinator answers with its member epoch and the
partitions it may own now.  The group has an epoch, bumped by every change of
membership, subscriptions or the subscribed topics' partitions; a bumped epoch
makes the group's assignor compute a new *target assignment*, and each member
converges on its target one heartbeat at a time, never owning a partition another
member still owns (:mod:`~sparklog.groups.consumer_reconcile`).

The state is the ``consumer`` part of the group's state document, typed
(:mod:`~sparklog.groups.consumer_state`), changed through the coordinator's
``state_doc(group).update`` like a classic group's, so an in-memory coordinator
writes each change (rare: joins, leaves, epochs) to the root and a new coordinator
restores it; heartbeat times stay in memory (``touch``), and restored members get
one session timeout to come back.  The coordinator is seen through
:class:`~sparklog.groups.consumer_host.ConsumerGroupHost`.

This module holds the heartbeat (joining, subscribing, leaving), expiry, the offset
checks and ConsumerGroupDescribe; classic members of consumer groups and the online
upgrade and downgrade between the two group types are the classic bridge's
(:mod:`~sparklog.groups.consumer_classic`, :attr:`ConsumerGroupProtocol.classic`).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from sparklog.clock import now_ms
from sparklog.errors import (
    FencedInstanceIdError,
    FencedMemberEpochError,
    GroupIdNotFoundError,
    IllegalGenerationError,
    InvalidRequestError,
    StaleMemberEpochError,
    UnknownMemberIdError,
    UnreleasedInstanceIdError,
    UnsupportedAssignorError,
)
from sparklog.groups.classic_group import GroupDoc, group_doc
from sparklog.groups.consumer_classic import ClassicBridge
from sparklog.groups.consumer_host import ConsumerGroupHost
from sparklog.groups.consumer_reconcile import (
    ASSIGNORS,
    DEFAULT_ASSIGNOR,
    MayDescribe,
    compile_regex,
    reconcile,
    refresh_target,
    release,
    set_state,
)
from sparklog.groups.consumer_state import (
    CONSUMER_TYPE,
    EMPTY,
    LEAVE_EPOCH,
    STATIC_LEAVE_EPOCH,
    ClassicJoin,
    ConsumerMemberDoc,
    ConsumerState,
    Heartbeat,
    HeartbeatAnswer,
    classic_of,
    empty_state,
    has_members,
    is_consumer_group,
    new_member,
    pair_set,
    uses_classic_protocol,
)

#: what the coordinator and the Kafka listener import from here
__all__ = [
    "ClassicJoin",
    "ConsumerGroupProtocol",
    "Heartbeat",
    "HeartbeatAnswer",
    "has_members",
    "is_consumer_group",
]


class ConsumerGroupProtocol:
    """KIP-848 for one coordinator: heartbeats, describe, expiry, offset-commit checks."""

    def __init__(
        self,
        coordinator: ConsumerGroupHost,
        *,
        session_timeout_ms: int = 45_000,
        heartbeat_interval_ms: int = 5_000,
        migration_policy: str = "bidirectional",
    ) -> None:
        self.coordinator = coordinator
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        #: classic members of consumer groups, the online upgrade and downgrade
        self.classic = ClassicBridge(
            coordinator,
            migration_policy=migration_policy,
            session_timeout_ms=session_timeout_ms,
            refresh_target=self._refresh_target,
            remove=self._remove,
            clock_ms=now_ms,
        )
        #: (principal, host, topic) -> whether that member may describe the topic; set by
        #: a broker with an authorizer, so a regex subscription is resolved to the topics
        #: its member may see, as Kafka's (KAFKA-18813). None: every topic (embedded use)
        self.may_describe: MayDescribe | None = None

    @property
    def migration_policy(self) -> str:
        return self.classic.migration_policy

    # -- the heartbeat -------------------------------------------------------
    def heartbeat(self, request: Heartbeat) -> HeartbeatAnswer:
        """Apply one heartbeat to the group and answer it (see the module's docstring)."""
        self._validate(request)
        member = request.member_id or uuid.uuid4().hex  # v0 lets the coordinator name it
        state = self.coordinator.state_doc(request.group)
        answer: list[HeartbeatAnswer] = []

        def change(raw: dict[str, Any]) -> dict[str, Any]:
            answer.clear()
            doc = group_doc(raw)
            now = now_ms()
            # expire first (either type): a group may change type in that step
            self.coordinator.maintain_doc(request.group, doc, now)
            self._adopt(doc)
            group = doc["consumer"]
            if request.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
                self._leave(doc, member, request)
                answer.append(HeartbeatAnswer(member, request.member_epoch, 0))
                return raw
            entry, sent_full, new = self._member(group, member, request)
            self._refresh_target(doc, self._subscribe(entry, request) or new)
            before = (entry["member_epoch"], entry["assigned"])
            reconcile(
                group,
                member,
                entry,
                request.owned,
                now_ms=now,
                session_timeout_ms=self.session_timeout_ms,
            )
            owned = pair_set(request.owned) if request.owned is not None else None
            changed = before != (entry["member_epoch"], entry["assigned"])
            tell = (
                sent_full or changed or (owned is not None and owned != pair_set(entry["assigned"]))
            )
            set_state(doc)
            answer.append(
                HeartbeatAnswer(
                    member,
                    entry["member_epoch"],
                    self.heartbeat_interval_ms,
                    [(t, p) for t, p in entry["assigned"]] if tell else None,
                )
            )
            return raw

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

    def _adopt(self, doc: GroupDoc) -> None:
        """Make ``doc`` a consumer group (an empty classic one, or one upgraded), or refuse."""
        if is_consumer_group(doc):
            return
        if doc["members"]:
            self.classic.upgrade(doc)
            return
        doc["type"] = CONSUMER_TYPE
        doc["consumer"] = empty_state()
        doc["state"] = EMPTY

    def _member(
        self, group: ConsumerState, member: str, request: Heartbeat
    ) -> tuple[ConsumerMemberDoc, bool, bool]:
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
            if entry is None or new:
                if entry is not None:  # a rejoin of a known id: it owns nothing now
                    release(entry)
                entry = new_member()
                members[member] = entry
            entry["instance_id"] = request.instance_id
            entry["rack_id"] = request.rack_id
            entry["rebalance_timeout_ms"] = request.rebalance_timeout_ms
            entry["client_id"] = request.client_id
            entry["client_host"] = request.client_host
            return entry, True, new
        if entry is None:
            raise UnknownMemberIdError(f"Member {member} is not a member of group {request.group}.")
        if request.instance_id and entry.get("instance_id") not in (None, request.instance_id):
            raise FencedInstanceIdError(
                f"Member {member} has instance id {entry.get('instance_id')}, not "
                f"{request.instance_id}."
            )
        if request.member_epoch != entry["member_epoch"]:
            owned = pair_set(request.owned or ())
            lost_answer = request.member_epoch == entry[
                "previous_member_epoch"
            ] and owned <= pair_set(entry["assigned"])
            if not lost_answer:
                raise FencedMemberEpochError(
                    f"The consumer group member has a member epoch ({request.member_epoch}) "
                    f"which does not match the coordinator's ({entry['member_epoch']}); it "
                    "must rejoin the group."
                )
        if request.rebalance_timeout_ms >= 0:
            entry["rebalance_timeout_ms"] = request.rebalance_timeout_ms
        return entry, False, False

    def _subscribe(self, entry: ConsumerMemberDoc, request: Heartbeat) -> bool:
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

    def _refresh_target(self, doc: GroupDoc, changed: bool) -> None:
        """The group's target assignment brought up to date (its epoch moved on if members,
        subscriptions or the subscribed topics' partitions ``changed``)."""
        refresh_target(
            doc["consumer"],
            changed,
            topic_names=self.coordinator.topic_names,
            partition_counts=self.coordinator.partition_counts,
            may_describe=self.may_describe,
        )

    # -- leaving and expiry ----------------------------------------------------
    def _leave(self, doc: GroupDoc, member: str, request: Heartbeat) -> None:
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
        set_state(doc)

    def _remove(self, doc: GroupDoc, gone: Sequence[str]) -> None:
        """Remove members; a group left with classic members only may become classic."""
        group = doc["consumer"]
        for member in gone:
            group["members"].pop(member, None)
            self.coordinator.forget_heartbeat(doc["group"], member)
        if not gone:
            return
        if self.classic.may_downgrade(group):
            self.classic.downgrade(doc)
            return
        for member in gone:
            group["target"].pop(member, None)
        self._refresh_target(doc, True)

    def maintain(self, group_id: str, doc: GroupDoc, now: int) -> bool:
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
        set_state(doc)
        return True

    def _session_timeout_ms(self, entry: ConsumerMemberDoc) -> int:
        """A member's session: a classic member's own (its JoinGroup's), else the broker's."""
        if uses_classic_protocol(entry):
            return int(classic_of(entry)["session_timeout_ms"])
        return self.session_timeout_ms

    # -- offsets and describe ----------------------------------------------------
    def check_member(self, doc: GroupDoc, member: str, epoch: int) -> None:
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

    def describe(self, doc: GroupDoc) -> dict[str, Any]:
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
