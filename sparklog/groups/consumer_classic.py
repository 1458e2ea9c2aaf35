"""The classic-protocol bridge of KIP-848 consumer groups: classic members and the migrations.

Classic and consumer members may share a group, as Kafka 4's
``group.consumer.migration.policy`` (broker key ``group_consumer_migration_policy``)
allows: a member's first heartbeat to a classic group of Kafka consumers
converts it (*online upgrade*, :meth:`ClassicBridge.upgrade`: each classic
member becomes a member at the classic generation owning its classic assignment,
subscribed to its JoinGroup topics); classic members of a consumer group are served
from its state (:meth:`ClassicBridge.join` and the sync, heartbeat and leave next to
it: the JoinGroup reconciles them, the SyncGroup hands out what they may own, a
heartbeat says REBALANCE_IN_PROGRESS when they must rejoin); when the last
consumer-protocol member leaves and classic members remain, the group becomes a
classic group again and rebalances (*online downgrade*, :meth:`ClassicBridge.downgrade`).
With the policy ``disabled`` the two never share a group: a heartbeat to a classic
group with members is GROUP_ID_NOT_FOUND, a JoinGroup to a consumer group with
members INCONSISTENT_GROUP_PROTOCOL; an empty group of either type becomes the other.

Kafka's names for these steps are in each method's docstring.  The bridge changes the
group's typed document in place, as :class:`~sparklog.groups.classic_group.ClassicGroup`
does; it reaches the coordinator only through :class:`ConsumerGroupHost` and the
protocol only through the two steps it is handed (the target's refresh, a member's
removal).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from sparklog.errors import (
    GroupIdNotFoundError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    InvalidRequestError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)
from sparklog.groups.classic_group import GroupDoc, MemberDoc
from sparklog.groups.consumer_host import ConsumerGroupHost
from sparklog.groups.consumer_reconcile import owned_by_others, reconcile, set_state
from sparklog.groups.consumer_state import (
    CLASSIC_STABLE,
    CONSUMER_PROTOCOL_TYPE,
    CONSUMER_TYPE,
    EMPTY,
    STATIC_LEAVE_EPOCH,
    ClassicJoin,
    ConsumerMemberDoc,
    ConsumerState,
    Partitions,
    classic_of,
    empty_state,
    is_consumer_group,
    new_member,
    pair_set,
    sorted_pairs,
    uses_classic_protocol,
)

#: Kafka's group.consumer.migration.policy values; ``bidirectional`` is Kafka 4's default
MIGRATION_POLICIES = ("bidirectional", "upgrade", "downgrade", "disabled")
UPGRADE_POLICIES = ("bidirectional", "upgrade")
DOWNGRADE_POLICIES = ("bidirectional", "downgrade")


def check_migration_policy(policy: str) -> str:
    if policy not in MIGRATION_POLICIES:
        raise InvalidRequestError(
            f"group_consumer_migration_policy {policy!r} is not accepted; "
            f"accepted: {', '.join(MIGRATION_POLICIES)}"
        )
    return policy


def consumer_state(doc: GroupDoc) -> ConsumerState:
    """The ``consumer`` part of a consumer group's document."""
    return doc["consumer"]


class ClassicBridge:
    """Classic members of consumer groups, and the migrations between the two types.

    ``refresh_target(doc, changed)`` and ``remove(doc, members)`` are the protocol's
    steps (:class:`~sparklog.groups.consumer_groups.ConsumerGroupProtocol`).
    """

    def __init__(
        self,
        host: ConsumerGroupHost,
        *,
        migration_policy: str,
        session_timeout_ms: int,
        refresh_target: Callable[[GroupDoc, bool], None],
        remove: Callable[[GroupDoc, Sequence[str]], None],
        clock_ms: Callable[[], int],
    ) -> None:
        self.host = host
        self.migration_policy = check_migration_policy(migration_policy)
        self.session_timeout_ms = session_timeout_ms
        self._refresh_target = refresh_target
        self._remove = remove
        self._clock_ms = clock_ms

    # -- online upgrade ------------------------------------------------------
    def refuse_upgrade(self, doc: GroupDoc) -> str | None:
        """Why the classic group ``doc`` cannot become a consumer group (None: it can).

        Kafka's validateOnlineUpgrade: the policy allows it and every member is a Kafka
        consumer (protocol type ``consumer``, a decodable subscription).  Any state will
        do, as in Kafka: a rebalance in progress is abandoned (see :meth:`upgrade`).
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

    def upgrade(self, doc: GroupDoc) -> None:
        """Convert a classic group with members into a consumer group (Kafka's online
        upgrade): each member keeps its classic assignment and generation as its owned
        partitions, target and member epoch, and goes on with the classic protocol.

        A group mid-rebalance is converted too, as Kafka does: its members own what the
        last completed rebalance gave them (``previous_assignment``), and their pending
        joins and syncs answer REBALANCE_IN_PROGRESS (the new member moved the group's
        epoch on), so they rejoin the consumer group.
        """
        why = self.refuse_upgrade(doc)
        if why is not None:
            raise GroupIdNotFoundError(f"Group {doc['group']} is not a consumer group: {why}.")
        generation = int(doc["generation"])
        state = empty_state()
        state["group_epoch"] = state["assignment_epoch"] = generation
        stable = doc["state"] == CLASSIC_STABLE
        last = doc["assignment"] if stable else doc.get("previous_assignment", {})
        for member, classic in doc["members"].items():
            owned = sorted_pairs(last.get(member, []))
            entry = new_member()
            entry["member_epoch"] = entry["previous_member_epoch"] = generation
            entry["assigned"] = owned
            entry["topic_names"] = sorted(set(classic["topics"]))
            entry["instance_id"] = classic.get("instance_id")
            entry["rack_id"] = None
            entry["rebalance_timeout_ms"] = classic["rebalance_timeout_ms"]
            entry["client_id"] = member
            entry["client_host"] = ""
            entry["classic"] = {
                "session_timeout_ms": classic["session_timeout_ms"],
                "protocols": dict(classic.get("metadata") or {}),
            }
            state["members"][member] = entry
            state["target"][member] = owned
        wanted = {t for e in state["members"].values() for t in e["topic_names"]}
        state["topics"] = {t: n for t, n in self.host.partition_counts(wanted).items() if n}
        doc["type"] = CONSUMER_TYPE
        doc["consumer"] = state
        doc["members"] = {}
        doc["assignment"] = {}
        doc["opaque_assignment"] = {}
        doc["previous_assignment"] = {}
        doc["leader"] = ""
        doc["protocol"] = ""
        set_state(doc)

    # -- classic members (JoinGroup/SyncGroup/Heartbeat/LeaveGroup) -------------
    def refuse_classic_member(self, doc: GroupDoc) -> bool:
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
        doc.pop("type", None)
        doc.pop("consumer", None)
        doc["state"] = EMPTY
        return False

    def join(self, doc: GroupDoc, join: ClassicJoin) -> tuple[int, str]:
        """A classic member's JoinGroup to the consumer group ``doc`` (Kafka's
        classicGroupJoinToConsumerGroup): join or update the member, move the group's
        epoch if its subscription changed, reconcile it with the partitions its
        subscription says it owns.  Answers its member epoch (the JoinGroup's
        generation) and protocol; it is never the leader, so it assigns nothing.  A new
        member id with the ``group.instance.id`` of a member already in the group takes
        that member's place, partitions and epoch (KIP-345; the old id is fenced)."""
        group = consumer_state(doc)
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
            entry = new_member()
            group["members"][member] = entry
        before = entry["topic_names"]
        entry["topic_names"] = sorted(set(join.topics))
        entry["instance_id"] = join.instance_id
        entry["rebalance_timeout_ms"] = join.rebalance_timeout_ms
        entry["client_id"] = entry.get("client_id") or member
        entry["client_host"] = entry.get("client_host", "")
        entry["classic"] = {
            "session_timeout_ms": join.session_timeout_ms,
            "protocols": dict(join.protocols),
        }
        entry.setdefault("rack_id", None)
        self._refresh_target(doc, new or before != entry["topic_names"])
        reconcile(
            group,
            member,
            entry,
            list(join.owned or ()),
            now_ms=self._clock_ms(),
            session_timeout_ms=self.session_timeout_ms,
        )
        set_state(doc)
        return entry["member_epoch"], next(iter(join.protocols))

    def _replace_static(
        self, doc: GroupDoc, member: str, instance_id: str
    ) -> ConsumerMemberDoc | None:
        """Move the entry of the member holding ``instance_id`` (if any) to ``member``, with
        its target, and fence the old member id; the entry moved, or None."""
        group = consumer_state(doc)
        old = static_member(doc, instance_id)
        if not old or old == member:
            return None
        entry = group["members"].pop(old)
        group["members"][member] = entry
        if old in group["target"]:
            group["target"][member] = group["target"].pop(old)
        if entry["member_epoch"] == STATIC_LEAVE_EPOCH:
            entry["member_epoch"] = entry["previous_member_epoch"]
        entry["client_id"] = member
        self.host.forget_heartbeat(doc["group"], old)
        self.host.fence(doc, old, instance_id)
        return entry

    def _check_classic_protocols(self, doc: GroupDoc, member: str, join: ClassicJoin) -> None:
        """Kafka's throwIfClassicProtocolIsNotSupported: a Kafka consumer (protocol type
        ``consumer``) sharing a protocol with the group's other classic members."""
        if join.protocol_type not in (None, CONSUMER_PROTOCOL_TYPE):
            raise InconsistentGroupProtocolError(
                f"Member {member}'s protocol type {join.protocol_type!r} is not supported by "
                f"consumer group {doc['group']}; accepted: {CONSUMER_PROTOCOL_TYPE!r}"
            )
        others = [
            set(classic_of(e)["protocols"])
            for m, e in consumer_state(doc)["members"].items()
            if m != member and uses_classic_protocol(e)
        ]
        if others and not any(all(p in o for o in others) for p in join.protocols):
            raise InconsistentGroupProtocolError(
                f"Member {member}'s protocols {list(join.protocols)} share none with the "
                f"classic members of group {doc['group']}"
            )

    def member(self, doc: GroupDoc, member: str, generation: int) -> ConsumerMemberDoc:
        """A classic member's entry, checked: known, classic, at ``generation``."""
        entry = consumer_state(doc)["members"].get(member)
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

    def sync(self, doc: GroupDoc, member: str, generation: int) -> Partitions:
        """A classic member's SyncGroup: the partitions it may own now (Kafka's
        classicGroupSyncToConsumerGroup); REBALANCE_IN_PROGRESS if the group moved on
        since its join and it has nothing left to revoke."""
        entry = self.member(doc, member, generation)
        group = consumer_state(doc)
        if group["group_epoch"] > entry["member_epoch"] and not entry["revoking"]:
            raise RebalanceInProgressError(
                f"A new rebalance is triggered in group {doc['group']} and member {member} "
                "should rejoin to catch up."
            )
        return [list(tp) for tp in entry["assigned"]]

    def heartbeat(self, doc: GroupDoc, member: str, generation: int) -> None:
        """A classic member's Heartbeat (after its session is renewed): REBALANCE_IN_PROGRESS
        when it must rejoin: the group's epoch moved on, it has partitions to revoke, or the
        partitions it waits for are all free now (Kafka's classicGroupHeartbeatToConsumerGroup)."""
        entry = self.member(doc, member, generation)
        group = consumer_state(doc)
        pending = pair_set(group["target"].get(member, [])) - pair_set(entry["assigned"])
        waiting = bool(pending & owned_by_others(group, member))
        if (
            entry["member_epoch"] < group["group_epoch"]
            or entry["revoking"]
            or (pending and not waiting)
        ):
            raise RebalanceInProgressError(
                f"group {doc['group']!r} is rebalancing; member {member} must rejoin"
            )

    def leave(self, doc: GroupDoc, member: str) -> bool:
        """A classic member's LeaveGroup; True if it was a member (the group may be
        downgraded to classic by it)."""
        entry = consumer_state(doc)["members"].get(member)
        if entry is None:
            return False
        if not uses_classic_protocol(entry):
            raise UnknownMemberIdError(f"Member {member} does not use the classic protocol.")
        self._remove(doc, [member])
        set_state(doc)
        return True

    # -- online downgrade ------------------------------------------------------
    def may_downgrade(self, group: ConsumerState) -> bool:
        """Kafka's validateOnlineDowngrade: members remain, all of them classic, and the
        policy allows it."""
        members = group["members"].values()
        return (
            self.migration_policy in DOWNGRADE_POLICIES
            and bool(members)
            and all(uses_classic_protocol(e) for e in members)
        )

    def downgrade(self, doc: GroupDoc) -> None:
        """Convert a consumer group whose members all speak the classic protocol into a
        classic group (Kafka's online downgrade) at generation = the group epoch, each
        member with its target assignment, and start a rebalance: the members' next
        heartbeats answer REBALANCE_IN_PROGRESS and their leader assigns."""
        group = consumer_state(doc)
        now = self._clock_ms()
        members: dict[str, MemberDoc] = {}
        for order, (member, entry) in enumerate(sorted(group["members"].items())):
            classic = classic_of(entry)
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
        assignment = {m: sorted_pairs(group["target"].get(m, [])) for m in members}
        doc.pop("type", None)
        doc.pop("consumer", None)
        doc["state"] = CLASSIC_STABLE
        doc["generation"] = max(int(doc.get("generation", 0)), int(group["group_epoch"]))
        doc["protocol"] = common[0] if common else first[0]
        doc["leader"] = next(iter(members))
        doc["members"] = members
        doc["assignment"] = assignment
        doc["opaque_assignment"] = {}
        doc["previous_assignment"] = assignment
        self.host.start_rebalance(doc, now)


def static_member(doc: GroupDoc, instance_id: str) -> str:
    """The consumer group's member with ``instance_id`` ('' if none)."""
    return next(
        (
            m
            for m, e in consumer_state(doc)["members"].items()
            if e.get("instance_id") == instance_id
        ),
        "",
    )
