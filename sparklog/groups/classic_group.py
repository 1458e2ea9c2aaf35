"""The classic group protocol's state machine: one group's state document and its transitions.

A classic group (Kafka's JoinGroup/SyncGroup protocol) moves from ``Empty``
through ``PreparingRebalance`` (waiting for every member to (re)join, up to the
rebalance timeout) to ``CompletingRebalance`` (a new generation; the leader's
sync stores the assignment) to ``Stable``.  :class:`ClassicGroup` applies those
transitions to one group's state document (:class:`GroupDoc`) in place and says
what happened in its return values, or raises the protocol's error.  It does no
I/O and reads no clock: the coordinator (:mod:`sparklog.groups.coordinator`)
reads and writes the document, keeps the heartbeats and hands in the time
(``now_ms``) and the look-ups a transition needs (partition counts, heartbeats).
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict, TypeVar, cast

from sparklog.errors import (
    FencedInstanceIdError,
    InconsistentGroupProtocolError,
    InvalidRequestError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)
from sparklog.errors import IllegalGenerationError as _IllegalGeneration
from sparklog.groups.assignors import ASSIGNORS
from sparklog.groups.consumer_state import ConsumerState
from sparklog.topic_partition import TopicPartition

EMPTY = "Empty"
PREPARING = "PreparingRebalance"
COMPLETING = "CompletingRebalance"
STABLE = "Stable"
#: fenced static members (old member id -> instance id) a group remembers
FENCED_KEPT = 1000

#: ``[[topic, partition], ...]``: partitions as the JSON document holds them
Pairs = list[list[Any]]
#: partitions per topic (0 for a topic that does not exist)
PartitionCounts = Callable[[set[str]], dict[str, int]]
#: each named member's last heartbeat (ms)
HeartbeatReader = Callable[[list[str]], dict[str, int]]


class _MemberRequired(TypedDict):
    topics: list[str]
    strategies: list[str]
    session_timeout_ms: int
    rebalance_timeout_ms: int
    join_ms: int
    joined: bool


class MemberDoc(_MemberRequired, total=False):
    """One classic member in :class:`GroupDoc`: its subscription, strategies (protocol
    names, in preference order), timeouts, when it first joined and whether it joined
    the current rebalance.  The optional fields are read with ``.get``."""

    #: a Kafka client's base64 metadata per protocol (None: a sparklog member)
    metadata: dict[str, str] | None
    #: ``group.instance.id`` (KIP-345 static membership), None if dynamic
    instance_id: str | None
    #: JoinGroup's protocol type (``consumer`` for Kafka's consumers)
    protocol_type: str | None


class _GroupRequired(TypedDict):
    group: str
    state: str
    generation: int
    protocol: str
    leader: str
    members: dict[str, MemberDoc]
    assignment: dict[str, Pairs]
    previous_assignment: dict[str, Pairs]
    rebalance_deadline_ms: int
    not_before_ms: int
    sync_deadline_ms: int


class GroupDoc(_GroupRequired, total=False):
    """A group's state document ``groups/<group>/state/<v>.json`` (see :func:`empty_doc`).

    ``members``, ``assignment`` (per member, the current generation's) and
    ``previous_assignment`` (the last completed rebalance's) are the classic
    members'; a KIP-848 group (``type``) keeps its own in ``consumer``
    (:mod:`sparklog.groups.consumer_groups`).
    """

    #: a Kafka leader's base64 assignment per member
    opaque_assignment: dict[str, str]
    #: old member id -> the ``group.instance.id`` that replaced it (both group types)
    fenced: dict[str, str]
    #: ``consumer`` for a KIP-848 group; absent for a classic one
    type: str
    #: a KIP-848 group's own state
    consumer: ConsumerState


def empty_doc(group: str) -> GroupDoc:
    """The state of a group that was never written: no members, generation 0."""
    return {
        "group": group,
        "state": EMPTY,
        "generation": 0,
        "protocol": "",
        "leader": "",
        "members": {},
        "assignment": {},
        "previous_assignment": {},
        "rebalance_deadline_ms": 0,
        "not_before_ms": 0,
        "sync_deadline_ms": 0,
    }


def group_doc(raw: dict[str, Any]) -> GroupDoc:
    """``raw``, a state document as read from storage, seen as a :class:`GroupDoc`.

    The same object (changes to one are changes to the other), not checked: only
    this module and :mod:`sparklog.groups.consumer_groups` write the document.
    """
    return cast(GroupDoc, raw)


def raw_doc(doc: GroupDoc) -> dict[str, Any]:
    """The same object as ``doc``, seen as the plain dict the coordinator reads and writes."""
    return cast(dict[str, Any], doc)


def check_not_fenced(doc: GroupDoc, member_id: str) -> None:
    """Refuse a member replaced by a newer one with its ``group.instance.id`` (either
    group type): FENCED_INSTANCE_ID."""
    instance = doc.get("fenced", {}).get(member_id)
    if instance is not None:
        raise FencedInstanceIdError(
            f"member {member_id!r} of group {doc['group']!r} was replaced by a newer member "
            f"with group.instance.id {instance!r}; this consumer must stop"
        )


def fence_member(doc: GroupDoc, old: str, instance_id: str) -> None:
    """Remember that member ``old`` was replaced by a newer member with ``instance_id``
    (either group type): its calls answer FENCED_INSTANCE_ID (the newest
    :data:`FENCED_KEPT` are kept)."""
    fenced = doc.setdefault("fenced", {})
    fenced[old] = instance_id
    for stale in list(fenced)[: max(0, len(fenced) - FENCED_KEPT)]:
        fenced.pop(stale)


def instance_taken(
    group: str, instance_id: str, owner: str, member_id: str
) -> FencedInstanceIdError:
    """The refusal of ``member_id``'s call naming a ``group.instance.id`` ``owner`` holds."""
    return FencedInstanceIdError(
        f"group.instance.id {instance_id!r} of group {group!r} belongs "
        f"to member {owner!r}, not {member_id!r}"
    )


_Value = TypeVar("_Value")


def _rename(table: dict[str, _Value], old: str, new: str) -> None:
    """Move ``old``'s entry of a per-member table to ``new`` (a static member's place)."""
    if old in table:
        table[new] = table.pop(old)


@dataclass(frozen=True)
class MemberJoin:
    """A classic member's JoinGroup, validated by the coordinator."""

    member_id: str
    #: the member joined with an empty member id (``member_id`` was made for it)
    new: bool
    topics: Sequence[str]
    #: protocol (assignor) names in preference order
    strategies: list[str]
    session_timeout_ms: int
    rebalance_timeout_ms: int
    #: a Kafka client's base64 metadata per protocol (None: a sparklog member)
    metadata: dict[str, str] | None = None
    instance_id: str | None = None
    protocol_type: str | None = None


class ClassicGroup:
    """One classic group's state document and the transitions of its state machine.

    The transitions change ``doc`` in place (the coordinator writes it back as the
    next state version) and return what the caller needs to know, or raise the
    protocol's error (the coordinator then writes nothing).
    """

    def __init__(
        self,
        doc: GroupDoc,
        *,
        initial_rebalance_delay_ms: int,
        partition_counts: PartitionCounts,
    ) -> None:
        self.doc = doc
        #: how long a rebalance of an empty group waits for more members to join
        self.initial_rebalance_delay_ms = initial_rebalance_delay_ms
        #: partitions per topic, for the assignments the coordinator computes
        self.partition_counts = partition_counts

    @property
    def name(self) -> str:
        return self.doc["group"]

    # -- checks ------------------------------------------------------------
    def check_generation(self, generation: int, member_id: str) -> None:
        """Refuse a fenced member, a member not in the group, or an old generation."""
        check_not_fenced(self.doc, member_id)
        if member_id not in self.doc["members"]:
            raise UnknownMemberIdError(
                f"member {member_id!r} is not in group {self.name!r}; join with an empty member id"
            )
        if generation != self.doc["generation"]:
            raise _IllegalGeneration(
                f"generation {generation} of member {member_id!r} is not group "
                f"{self.name!r}'s current generation {self.doc['generation']}",
                generation=self.doc["generation"],
            )

    def _check_syncing(self, generation: int, member_id: str) -> None:
        """A sync needs a completed join: REBALANCE_IN_PROGRESS while members (re)join."""
        if self.doc["state"] == PREPARING:
            raise RebalanceInProgressError(f"group {self.name!r} is rebalancing; join again")
        self.check_generation(generation, member_id)

    # -- rebalances --------------------------------------------------------
    def start_rebalance(self, now_ms: int) -> None:
        """Move to PreparingRebalance: every member must join again."""
        doc = self.doc
        was_empty = doc["state"] == EMPTY or not doc["members"]
        doc["state"] = PREPARING
        for entry in doc["members"].values():
            entry["joined"] = False
        timeout = max((m["rebalance_timeout_ms"] for m in doc["members"].values()), default=60_000)
        doc["rebalance_deadline_ms"] = now_ms + timeout
        doc["not_before_ms"] = now_ms + (self.initial_rebalance_delay_ms if was_empty else 0)

    def remove_members(self, gone: Sequence[str], now_ms: int) -> None:
        """Drop ``gone``; the others rebalance (an emptied group is Empty, a new generation)."""
        doc = self.doc
        for member in gone:
            doc["members"].pop(member, None)
            doc["assignment"].pop(member, None)
            doc.get("opaque_assignment", {}).pop(member, None)
        if not doc["members"]:
            doc["state"] = EMPTY
            doc["generation"] += 1
            doc["leader"] = ""
            doc["protocol"] = ""
            doc["assignment"] = {}
        elif doc["state"] != PREPARING:
            self.start_rebalance(now_ms)

    def complete_if_ready(self, now_ms: int) -> bool:
        """Finish a PreparingRebalance whose members all joined (or whose time ran out):
        a new generation of the members that joined, its leader, protocol and (unless a
        Kafka client leads) assignment.  True if ``doc`` changed."""
        doc = self.doc
        if doc["state"] != PREPARING:
            return False
        members = doc["members"]
        everyone = all(m["joined"] for m in members.values())
        if not (
            (everyone and now_ms >= doc["not_before_ms"]) or now_ms >= doc["rebalance_deadline_ms"]
        ):
            return False
        joined = {k: v for k, v in members.items() if v["joined"]}
        doc["members"] = joined
        doc["generation"] += 1
        if not joined:
            doc["state"] = EMPTY
            doc["leader"] = ""
            doc["protocol"] = ""
            doc["assignment"] = {}
            return True
        order = sorted(joined, key=lambda m: (joined[m]["join_ms"], m))
        if doc["leader"] not in joined:
            doc["leader"] = order[0]
        first = joined[order[0]]["strategies"]
        common = [s for s in first if all(s in m["strategies"] for m in joined.values())]
        doc["protocol"] = common[0] if common else first[0]
        doc["opaque_assignment"] = {}
        if joined[doc["leader"]].get("metadata") is not None or doc["protocol"] not in ASSIGNORS:
            doc["assignment"] = {}  # a Kafka client leads: it assigns in its SyncGroup
        else:
            doc["assignment"] = self.compute_assignment()
        doc["state"] = COMPLETING
        timeout = max(m["rebalance_timeout_ms"] for m in joined.values())
        doc["sync_deadline_ms"] = now_ms + timeout
        return True

    def compute_assignment(self) -> dict[str, Pairs]:
        """The coordinator's assignment of the members' subscriptions (sticky to the
        previous one), with the group's protocol's assignor."""
        doc = self.doc
        subscriptions = {m: list(v["topics"]) for m, v in doc["members"].items()}
        counts = self.partition_counts({t for ts in subscriptions.values() for t in ts})
        previous = {
            m: [TopicPartition(str(t), int(p)) for t, p in tps]
            for m, tps in doc.get("previous_assignment", {}).items()
        }
        result = ASSIGNORS[doc["protocol"]](subscriptions, counts, previous)
        return {m: [[t, p] for t, p in tps] for m, tps in result.items()}

    def stabilize(self) -> None:
        """Move to Stable: the current assignment is the one the next rebalance sticks to."""
        self.doc["state"] = STABLE
        self.doc["previous_assignment"] = self.doc["assignment"]

    def maintain(self, now_ms: int, last_heartbeats: HeartbeatReader, caller: str | None) -> bool:
        """Expel silent members, finish due rebalances; True if ``doc`` changed.

        ``caller``: the member asking, when heartbeats are files in storage (else None).
        While the leader is alive, only the leader's own calls read everyone's
        heartbeats, so a round of heartbeats costs O(members) reads, not O(members²).
        """
        doc = self.doc
        changed = False
        # Kafka expires a silent member in every state: a crashed member must not hold a
        # rebalance others started until its rebalance timeout (members waiting in a join
        # are kept alive by that wait)
        if doc["state"] in (STABLE, COMPLETING, PREPARING) and doc["members"]:
            watched = list(doc["members"])
            leader = doc["leader"]
            if caller not in (None, leader) and leader in doc["members"]:
                leader_beat = last_heartbeats([leader]).get(leader, 0)
                if now_ms - leader_beat <= doc["members"][leader]["session_timeout_ms"]:
                    watched = []  # the live leader sweeps the others
            beats = last_heartbeats(watched) if watched else {}
            gone = [
                m
                for m in watched
                if now_ms - beats.get(m, 0) > doc["members"][m]["session_timeout_ms"]
            ]
            if gone:
                self.remove_members(gone, now_ms)
                changed = True
        if doc["state"] == COMPLETING and now_ms >= doc["sync_deadline_ms"]:
            self.stabilize()  # the leader never synced: use the coordinator's assignment
            changed = True
        if self.complete_if_ready(now_ms):
            changed = True
        return changed

    # -- static membership (KIP-345) ---------------------------------------
    def _member_with_instance(self, instance_id: str, other_than: str = "") -> str:
        """The member holding ``instance_id`` besides ``other_than`` ("" if none)."""
        return next(
            (
                m
                for m, e in self.doc["members"].items()
                if e.get("instance_id") == instance_id and m != other_than
            ),
            "",
        )

    def take_static_place(self, join: MemberJoin) -> bool:
        """KIP-345: if ``join``'s member has an instance id, fence any other member holding it.

        True if the member took the old member's place in a stable group with no
        rebalance (same subscription, strategies and metadata); False if the join
        must go on (the old member, if any, removed: a rebalance follows).
        """
        doc, member, instance_id = self.doc, join.member_id, join.instance_id
        if not instance_id:
            return False
        members = doc["members"]
        old = self._member_with_instance(instance_id, other_than=member)
        if not old:
            return False
        entry = members.pop(old)
        fence_member(doc, old, instance_id)
        same = (
            entry["topics"] == sorted(set(join.topics))
            and entry["strategies"] == join.strategies
            and entry.get("metadata") == join.metadata
        )
        if doc["state"] == STABLE and same:
            members[member] = entry
            if doc["leader"] == old:
                # the leader is told the members again (Kafka clients then send an
                # assignment, which a Stable group ignores: everyone keeps theirs)
                doc["leader"] = member
            _rename(doc.get("assignment", {}), old, member)
            _rename(doc.get("opaque_assignment", {}), old, member)
            _rename(doc.get("previous_assignment", {}), old, member)
            return True
        doc.get("assignment", {}).pop(old, None)
        doc.get("opaque_assignment", {}).pop(old, None)
        return False

    # -- the protocol ------------------------------------------------------
    def join(self, join: MemberJoin, now_ms: int) -> bool:
        """Add or update ``join``'s member and (re)start a rebalance unless one is under way.

        True if a static member took its old place with no rebalance (the same
        generation: nothing to wait for); False if the caller waits for the new one.
        """
        doc, member = self.doc, join.member_id
        members = doc["members"]
        check_not_fenced(doc, member)
        if self.take_static_place(join):
            return True
        if not join.new and member not in members:
            raise UnknownMemberIdError(
                f"member {member!r} is not in group {self.name!r} (expelled or left); join "
                "with an empty member id"
            )
        strategies = join.strategies
        others = [m for k, m in members.items() if k != member]
        if others and not any(all(s in m["strategies"] for m in others) for s in strategies):
            raise InconsistentGroupProtocolError(
                f"strategies {strategies} share none with group {self.name!r}'s members "
                f"({sorted({s for m in others for s in m['strategies']})})"
            )
        previous = members.get(member)
        members[member] = {
            "topics": sorted(set(join.topics)),
            "strategies": strategies,
            "session_timeout_ms": join.session_timeout_ms,
            "rebalance_timeout_ms": join.rebalance_timeout_ms,
            "join_ms": previous["join_ms"] if previous else now_ms,
            "joined": True,
            "metadata": join.metadata,
            "instance_id": join.instance_id,
            "protocol_type": join.protocol_type,
        }
        if doc["state"] != PREPARING:
            self.start_rebalance(now_ms)
            members[member]["joined"] = True
        self.complete_if_ready(now_ms)
        return False

    def sync(
        self,
        member_id: str,
        generation: int,
        assignment: Mapping[str, Sequence[tuple[str, int]]] | None,
        opaque_assignment: Mapping[str, bytes] | None,
    ) -> bool:
        """A member's SyncGroup: the leader's, while CompletingRebalance, stores its
        ``assignment`` (and a Kafka leader's ``opaque_assignment``) and makes the group
        Stable.  True if ``doc`` changed (the leader's sync)."""
        doc = self.doc
        self._check_syncing(generation, member_id)
        if doc["state"] != COMPLETING or member_id != doc["leader"]:
            return False
        if assignment is not None:
            unknown = sorted(set(assignment) - set(doc["members"]))
            if unknown:
                raise InvalidRequestError(
                    f"assignment names members {unknown} that are not in group "
                    f"{self.name!r}; accepted members: {sorted(doc['members'])}"
                )
            doc["assignment"] = {
                m: [[t, p] for t, p in assignment.get(m, [])] for m in doc["members"]
            }
        if opaque_assignment is not None:
            doc["opaque_assignment"] = {
                str(m): base64.b64encode(bytes(data)).decode()
                for m, data in opaque_assignment.items()
                if m in doc["members"]
            }
        self.stabilize()
        return True

    def synced_assignment(
        self, member_id: str, generation: int
    ) -> tuple[list[TopicPartition], bytes | None] | None:
        """The member's partitions and opaque assignment (None when the coordinator
        assigned) once the group is Stable; None while the leader has not synced."""
        self._check_syncing(generation, member_id)
        if self.doc["state"] != STABLE:
            return None
        mine = [
            TopicPartition(str(t), int(p)) for t, p in self.doc["assignment"].get(member_id, [])
        ]
        raw = self.doc.get("opaque_assignment", {}).get(member_id)
        return mine, base64.b64decode(raw) if raw is not None else None

    def leave(self, member_id: str, instance_id: str | None, now_ms: int) -> bool:
        """Remove the member (a static one may be named by ``instance_id`` alone); the
        others rebalance.  True if ``doc`` changed (the member was in the group)."""
        leaving = member_id
        if instance_id:
            leaving = self._member_with_instance(instance_id)
            if member_id and leaving and leaving != member_id:
                raise instance_taken(self.name, instance_id, leaving, member_id)
        if leaving not in self.doc["members"]:
            return False
        self.remove_members([leaving], now_ms)
        return True
