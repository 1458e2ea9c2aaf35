"""The consumer group coordinator (Kafka's classic protocol), with its state in the root.

Members join, the group moves through ``PreparingRebalance`` (waiting for every
member to (re)join, up to the rebalance timeout) to ``CompletingRebalance``
(a new generation; the leader's sync stores the assignment) to ``Stable``; those
transitions are :class:`~sparklog.groups.classic_group.ClassicGroup`'s, applied
here inside each state change.  Heartbeats keep a member alive; a member silent
for its session timeout is expelled and the others rebalance.  Offset commits
must carry the current generation and a member id, so a zombie of an older
generation cannot commit.

The state is a versioned document ``groups/<group>/state/<v>.json`` written
create-only, and each member's liveness is ``groups/<group>/members/<id>.json``.
Two kinds of members share one group.  sparklog's clients let the coordinator
assign (``ASSIGNORS``); Kafka clients join with opaque protocol metadata
(``protocol_metadata``) and their leader assigns, handing the coordinator
opaque per-member assignments (plus the decoded partitions, for describe and
lag).  When the leader is a Kafka client the coordinator computes nothing.

Because every change is a create of the next version, several coordinators
(brokers, or embedded clients in different processes) can serve one group at
once without corrupting it: a loser of a race re-reads and re-applies.  Waiting
calls (join, a follower's sync) are parked in memory at a broker, with no thread
each (:mod:`~sparklog.groups.purgatory`, Kafka's purgatory), and answered by the
state change or the deadline that completes them; over storage they poll the
document every ``poll_ms``, since another process may complete them.
"""

from __future__ import annotations

import base64
import functools
import json
import re
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, TypeVar

from sparklog.clock import now_ms
from sparklog.errors import (
    GroupIdNotFoundError,
    GroupSubscribedToTopicError,
    InconsistentGroupProtocolError,
    InvalidConfigurationError,
    InvalidRequestError,
    NotCoordinatorError,
    RebalanceInProgressError,
    SparklogError,
    UnknownMemberIdError,
)
from sparklog.errors import IllegalGenerationError as _IllegalGeneration
from sparklog.groups.assignors import ASSIGNORS
from sparklog.groups.classic_group import (
    COMPLETING,
    EMPTY,
    PREPARING,
    STABLE,
    ClassicGroup,
    GroupDoc,
    MemberJoin,
    check_not_fenced,
    empty_doc,
    fence_member,
    group_doc,
    instance_taken,
    raw_doc,
)
from sparklog.groups.consumer_classic import static_member
from sparklog.groups.consumer_groups import (
    ClassicJoin,
    ConsumerGroupProtocol,
    Heartbeat,
    HeartbeatAnswer,
    has_members,
    is_consumer_group,
)
from sparklog.groups.lag import HighWatermarks, lag_of, read_high_watermarks
from sparklog.groups.purgatory import REJOIN, DeadlineTimer, Parked
from sparklog.retry import LostRace, until_won
from sparklog.storage import LogRoot
from sparklog.storage.documents import (
    VersionedDocument,
    encode_document,
    parse_document,
    version_key,
)
from sparklog.storage.groups import group_key, validate_group_name
from sparklog.topic_partition import TopicPartition

MEMBER_ID_RE = re.compile(r"^[a-zA-Z0-9._-]{1,200}$")
#: A cached state newer than this is trusted after probing for the next version.
CACHE_TRUST_S = 5.0
#: State versions kept behind the newest (older ones are pruned).
KEEP_VERSIONS = 100
#: what a state change tells its caller besides the new document
Outcome = TypeVar("Outcome")


@dataclass(frozen=True)
class JoinResult:
    """The outcome of a join: the new generation, who leads it, and its members."""

    generation: int
    member_id: str
    leader_id: str
    members: dict[str, list[str]] = field(default_factory=dict)
    protocol: str = ""
    #: Kafka clients' opaque metadata per member for ``protocol`` (None: a sparklog member)
    member_metadata: dict[str, bytes | None] = field(default_factory=dict)
    #: each member's ``group.instance.id`` (KIP-345 static membership), None if dynamic
    instance_ids: dict[str, str | None] = field(default_factory=dict)


def _opaque(metadata: Mapping[str, str] | None, protocol: str) -> bytes | None:
    """A member's opaque metadata for ``protocol`` (None for a sparklog member)."""
    if metadata is None or protocol not in metadata:
        return None
    return base64.b64decode(metadata[protocol])


def _done(answer: Outcome) -> Future[Outcome]:
    """A future already answered (a request with nothing to wait for)."""
    future: Future[Outcome] = Future()
    future.set_result(answer)
    return future


def _copy(doc: Mapping[str, Any]) -> dict[str, Any]:
    return dict(json.loads(json.dumps(doc)))


def _empty_doc(group: str) -> dict[str, Any]:
    return dict(empty_doc(group))


class _StateDoc:
    """One group's state document with a cached latest version."""

    def __init__(self, root: LogRoot, group: str) -> None:
        self.versions = VersionedDocument(root.store, f"{group_key(group)}/state")
        self.group = group
        self.offsets = root.groups  # the group's log: offset commits check generations there
        self._cache: tuple[int, dict[str, Any], float] | None = None

    def read(self) -> tuple[int, dict[str, Any]]:
        cache = self._cache
        if cache is not None and time.monotonic() - cache[2] < CACHE_TRUST_S:
            version, doc, stamp = cache
            while True:
                key = version_key(self.versions.prefix, version + 1)
                raw = self.versions.store.get_or_none(key)
                if raw is None:
                    break
                version, doc = version + 1, parse_document(raw, f"{self.versions.store.url}/{key}")
            self._cache = (version, doc, stamp)
            return version, _copy(doc)
        version, found = self.versions.latest()
        doc = found if found is not None else _empty_doc(self.group)
        self._cache = (version, doc, time.monotonic())
        return version, _copy(doc)

    def update(
        self, change: Callable[[dict[str, Any]], dict[str, Any] | None], attempts: int = 50
    ) -> dict[str, Any]:
        """Apply ``change`` to the newest state and write it as the next version.

        A lost race drops the cache, backs off and re-reads (:func:`sparklog.retry.until_won`);
        after ``attempts`` lost races it raises :class:`~sparklog.errors.CommitConflictError`.
        """
        return self.update_with(lambda doc: (change(doc), None), attempts)[0]

    def update_with(
        self,
        change: Callable[[dict[str, Any]], tuple[dict[str, Any] | None, Outcome]],
        attempts: int = 50,
    ) -> tuple[dict[str, Any], Outcome]:
        """:meth:`update` whose ``change`` also says what happened: the new state and the
        outcome of the attempt that was written (or that changed nothing)."""

        def attempt() -> tuple[dict[str, Any], Outcome]:
            version, doc = self.read()
            old_generation = doc.get("generation", 0)
            new, outcome = change(doc)
            if new is None:
                return doc, outcome
            if not self.versions.write(version + 1, new):
                self._cache = None
                raise LostRace(f"version {version + 1} was written by another coordinator")
            self._cache = (version + 1, _copy(new), time.monotonic())
            if new.get("generation", 0) > old_generation:
                # a rebalance started: from now on the group's log refuses offset
                # commits of older generations (in the create-only step itself)
                self.offsets.set_generation(self.group, int(new["generation"]))
            if (version + 1) % KEEP_VERSIONS == 0:
                self._prune(version + 1)
            return new, outcome

        return until_won(attempt, what=f"group {self.group!r}: state change", attempts_max=attempts)

    def _prune(self, newest: int) -> None:
        try:
            for v in self.versions.versions():
                if v < newest - KEEP_VERSIONS:
                    self.versions.store.delete(version_key(self.versions.prefix, v))
        except SparklogError:
            pass  # pruning is housekeeping; the next round tries again


#: state keys whose change is written to the root by an in-memory coordinator (what a new
#: coordinator needs to restore the group), besides the member set and a group becoming
#: Stable or Empty; joins' flags and deadlines stay in memory
#: (a KIP-848 group's ``consumer`` part changes only on joins, leaves and epochs: all durable)
DURABLE_KEYS = (
    "generation",
    "assignment",
    "opaque_assignment",
    "leader",
    "protocol",
    "type",
    "consumer",
)


class _MemoryStateDoc(_StateDoc):
    """One group's state held in a broker's memory (the group's coordinator).

    Heartbeats and the steps of a rebalance change only memory; what a new
    coordinator needs (a new generation with its members and assignment) is
    written as the next state version, create-only.  Losing that write means
    another broker wrote meanwhile (coordinators disagreed while a death
    propagated): the state is re-read from the root and the change applied to
    it.  Loaded once from the root, when the group is first served here.
    """

    def __init__(
        self, root: LogRoot, group: str, on_change: Callable[[str], None] | None = None
    ) -> None:
        super().__init__(root, group)
        #: told the group's name after each change (the coordinator checks the requests
        #: parked on the group), outside the state's lock
        self.on_change = on_change
        self._lock = threading.RLock()
        self._state: tuple[int, dict[str, Any]] | None = None
        #: when this coordinator loaded the group: restored members' heartbeats count
        #: from here, so they get one session timeout to come back
        self.loaded_ms = 0

    def _loaded(self) -> tuple[int, dict[str, Any]]:
        if self._state is None:
            version, found = self.versions.latest()
            self._state = (version, found if found is not None else _empty_doc(self.group))
            self.loaded_ms = now_ms()
        return self._state

    def read(self) -> tuple[int, dict[str, Any]]:
        with self._lock:
            version, doc = self._loaded()
            return version, _copy(doc)

    def update_with(
        self,
        change: Callable[[dict[str, Any]], tuple[dict[str, Any] | None, Outcome]],
        attempts: int = 50,
    ) -> tuple[dict[str, Any], Outcome]:
        changed = False

        def attempt() -> tuple[dict[str, Any], Outcome]:
            nonlocal changed
            version, current = self._loaded()
            doc = _copy(current)
            new, outcome = change(doc)
            if new is None:
                return doc, outcome
            changed = True
            durable = (
                any(current.get(k) != new.get(k) for k in DURABLE_KEYS)
                or set(current["members"]) != set(new["members"])
                or (current["state"] != new["state"] and new["state"] in (STABLE, EMPTY))
            )
            if not durable:
                self._state = (version, _copy(new))
                return new, outcome
            if not self.versions.write(version + 1, new):
                self._state = None  # another coordinator wrote: re-read, apply again
                raise LostRace(f"version {version + 1} was written by another coordinator")
            self._state = (version + 1, _copy(new))
            if new.get("generation", 0) > current.get("generation", 0):
                self.offsets.set_generation(self.group, int(new["generation"]))
            if (version + 1) % KEEP_VERSIONS == 0:
                self._prune(version + 1)
            return new, outcome

        with self._lock:
            result = until_won(
                attempt, what=f"group {self.group!r}: state change", attempts_max=attempts
            )
        if changed and self.on_change is not None:
            self.on_change(self.group)
        return result


class GroupCoordinator:
    """Consumer group membership, assignment and offset commits over a storage root.

    Two modes.  Over storage (embedded clients, no broker): thread-safe and
    process-safe, it keeps no state the root does not hold (apart from a cache
    validated before use), and members' heartbeats are files in the root.  In
    memory (``in_memory=True``, a broker: the group's coordinator): members,
    heartbeats, session deadlines and rebalance steps are held in memory; only
    new generations with their assignments and the offset commits reach the
    root, so a heartbeat costs no storage request.  A broker serves only the
    groups it coordinates (``Broker.check_coordinator``); one that takes a
    group over restores it from the root and gives its members one session
    timeout to come back.
    """

    def __init__(
        self,
        root: LogRoot,
        *,
        min_session_timeout_ms: int = 1_000,
        max_session_timeout_ms: int = 1_800_000,
        initial_rebalance_delay_ms: int = 0,
        poll_ms: int = 50,
        in_memory: bool = False,
        consumer_session_timeout_ms: int = 45_000,
        consumer_heartbeat_interval_ms: int = 5_000,
        consumer_migration_policy: str = "bidirectional",
        high_watermarks: HighWatermarks | None = None,
    ) -> None:
        """``high_watermarks``: where :meth:`describe_group` takes the high watermarks its
        lag is computed from (a broker's in-memory partition states); by default each
        topic is opened once per call and each of its shard logs read once."""
        self.root = root
        self.high_watermarks: HighWatermarks = high_watermarks or functools.partial(
            read_high_watermarks, root
        )
        #: KIP-848 groups (``group.protocol=consumer``): their own state machine, same
        #: documents; ``consumer_migration_policy`` is Kafka's group.consumer.migration.policy
        self.consumer = ConsumerGroupProtocol(
            self,
            session_timeout_ms=consumer_session_timeout_ms,
            heartbeat_interval_ms=consumer_heartbeat_interval_ms,
            migration_policy=consumer_migration_policy,
        )
        self.in_memory = in_memory
        #: in memory: (group, member) -> last heartbeat (ms)
        self._beats: dict[tuple[str, str], int] = {}
        self.min_session_timeout_ms = min_session_timeout_ms
        self.max_session_timeout_ms = max_session_timeout_ms
        self.initial_rebalance_delay_ms = initial_rebalance_delay_ms
        self.poll_ms = poll_ms
        self._docs: dict[str, _StateDoc] = {}
        #: in memory: joins and syncs waiting per group (purgatory.py), checked after each
        #: change of the group's state and at its deadlines, with no thread each
        self._parked: dict[str, list[Parked]] = {}
        self._parked_lock = threading.Lock()
        self._deadlines = DeadlineTimer(self._deadline_passed)

    # -- plumbing (shared with the KIP-848 protocol, consumer_groups.py) ---------
    def state_doc(self, group: str) -> _StateDoc:
        """The group's state document (in memory at a broker, else over storage)."""
        validate_group_name(group)
        doc = self._docs.get(group)
        if doc is None:
            made = (
                _MemoryStateDoc(self.root, group, self._state_changed)
                if self.in_memory
                else _StateDoc(self.root, group)
            )
            doc = self._docs.setdefault(group, made)
        return doc

    def forget(self, group: str) -> None:
        """Drop what memory holds of ``group`` (another broker coordinates it now); its
        parked joins and syncs are answered NOT_COORDINATOR (the clients find the new one)."""
        self._docs.pop(group, None)
        for key in [k for k in self._beats if k[0] == group]:
            self._beats.pop(key, None)
        with self._parked_lock:
            parked = self._parked.pop(group, [])
        for entry in parked:
            entry.fail(NotCoordinatorError(f"group {group!r} is coordinated by another broker now"))

    def close(self) -> None:
        """Stop the deadline thread (the broker stops) and answer every parked request
        NOT_COORDINATOR, so no caller waits on a coordinator that is gone (a Kafka
        client finds the group's next coordinator)."""
        self._deadlines.close()
        with self._parked_lock:
            parked = [entry for entries in self._parked.values() for entry in entries]
            self._parked.clear()
        for entry in parked:
            entry.fail(NotCoordinatorError("the group's coordinator is stopping"))

    def _heartbeat_key(self, group: str, member_id: str) -> str:
        return f"{group_key(group)}/members/{member_id}.json"

    def touch(self, group: str, member_id: str) -> None:
        """Note that ``member_id`` is alive now (memory, or its heartbeat file)."""
        if self.in_memory:
            self._beats[(group, member_id)] = now_ms()
            return
        data = encode_document({"ms": now_ms()})
        self.root.store.put(self._heartbeat_key(group, member_id), data)

    def forget_heartbeat(self, group: str, member_id: str) -> None:
        """Drop a member's heartbeat (it left, or was never a member)."""
        if self.in_memory:
            self._beats.pop((group, member_id), None)
        else:
            self.root.store.delete(self._heartbeat_key(group, member_id))

    def last_heartbeats(self, group: str, members: Sequence[str]) -> dict[str, int]:
        """Each member's last heartbeat (ms); restored members count from the load."""
        if self.in_memory:
            state = self._docs.get(group)
            since = state.loaded_ms if isinstance(state, _MemoryStateDoc) else 0
            waiting = self._waiting_members(group)
            now = now_ms()  # a member parked in a join or sync is alive (it is waiting)
            return {m: now if m in waiting else self._beats.get((group, m), since) for m in members}
        keys = {self._heartbeat_key(group, m): m for m in members}
        found = self.root.store.get_many(keys)
        out = {}
        for key, member in keys.items():
            raw = found.get(key)
            out[member] = int(parse_document(raw, f"heartbeat {key}").get("ms", 0)) if raw else 0
        return out

    def partition_counts(self, topics: set[str]) -> dict[str, int]:
        """Partitions per topic (0 for a topic that does not exist)."""
        counts = {}
        for topic in sorted(topics):
            try:
                counts[topic] = self.root.describe_topic(topic).partitions
            except SparklogError:
                counts[topic] = 0  # unknown topics get no partitions until they exist
        return counts

    # -- the classic state machine (classic_group.py) ----------------------
    def _classic(self, doc: dict[str, Any]) -> ClassicGroup:
        """The classic group whose state is ``doc`` (changes go to ``doc``)."""
        return ClassicGroup(
            group_doc(doc),
            initial_rebalance_delay_ms=self.initial_rebalance_delay_ms,
            partition_counts=self.partition_counts,
        )

    def start_rebalance(self, doc: GroupDoc, now: int) -> None:
        """Start a rebalance of the classic group ``doc`` (a consumer group just downgraded)."""
        self._classic(raw_doc(doc)).start_rebalance(now)

    def maintain_doc(self, group: str, doc: GroupDoc, now: int) -> bool:
        """Expire silent members and finish due rebalances of ``doc`` (either type)."""
        return self._maintain(group, raw_doc(doc), now)

    def fence(self, doc: GroupDoc, old: str, instance_id: str) -> None:
        """Remember that member ``old`` was replaced by a newer member with ``instance_id``
        (:func:`~sparklog.groups.classic_group.fence_member`)."""
        fence_member(doc, old, instance_id)

    def topic_names(self) -> list[str]:
        """Every topic's name (KIP-848 matches regex subscriptions against them)."""
        return list(self.root.list_topics())

    def _maintain(
        self, group: str, doc: dict[str, Any], now: int, caller: str | None = None
    ) -> bool:
        """Expel silent members, finish due rebalances; True if ``doc`` changed.

        Over storage, a member's own heartbeat (``caller``) reads only the leader's
        heartbeat file while the leader is alive (:meth:`ClassicGroup.maintain`); in
        memory heartbeats cost nothing to read.
        """
        if is_consumer_group(doc):
            return self.consumer.maintain(group, group_doc(doc), now)
        return self._classic(doc).maintain(
            now,
            lambda members: self.last_heartbeats(group, members),
            caller=None if self.in_memory else caller,
        )

    def _current(self, group: str, caller: str | None = None) -> dict[str, Any]:
        """The group's state after expiring members and finishing due rebalances (as seen by
        member ``caller``, if a member asks: see :meth:`_maintain`)."""
        state = self.state_doc(group)

        def change(doc: dict[str, Any]) -> dict[str, Any] | None:
            return doc if self._maintain(group, doc, now_ms(), caller) else None

        return state.update(change)

    # -- validation --------------------------------------------------------
    def _check_member_id(self, member_id: str) -> None:
        if not isinstance(member_id, str) or (member_id and not MEMBER_ID_RE.match(member_id)):
            raise InvalidRequestError(
                f"member id {member_id!r} is not accepted; accepted: empty (a new member) or "
                "1-200 characters from [a-zA-Z0-9._-]"
            )

    def _check_timeouts(self, session_timeout_ms: int, rebalance_timeout_ms: int) -> None:
        lo, hi = self.min_session_timeout_ms, self.max_session_timeout_ms
        if not isinstance(session_timeout_ms, int) or not lo <= session_timeout_ms <= hi:
            raise InvalidConfigurationError(
                f"session_timeout_ms={session_timeout_ms!r} is not accepted; accepted: {lo}-{hi}"
            )
        if not isinstance(rebalance_timeout_ms, int) or rebalance_timeout_ms < 1:
            raise InvalidConfigurationError(
                f"rebalance_timeout_ms={rebalance_timeout_ms!r} is not accepted; accepted: >= 1"
            )

    def _check_generation(self, doc: dict[str, Any], generation: int, member_id: str) -> None:
        """:meth:`ClassicGroup.check_generation` of the classic group ``doc``."""
        self._classic(doc).check_generation(generation, member_id)

    def _join_result(self, doc: GroupDoc, member: str, everyone: bool) -> JoinResult:
        """A join's answer; ``everyone``: with every member's subscription and metadata."""
        shown = doc["members"] if everyone else {member: doc["members"][member]}
        return JoinResult(
            generation=doc["generation"],
            member_id=member,
            leader_id=doc["leader"],
            members={m: list(v["topics"]) for m, v in shown.items()},
            protocol=doc["protocol"],
            member_metadata={
                m: _opaque(v.get("metadata"), doc["protocol"]) for m, v in shown.items()
            },
            instance_ids={m: v.get("instance_id") for m, v in shown.items()},
        )

    # -- parked requests (purgatory.py) --------------------------------------
    def _waiting_members(self, group: str) -> set[str]:
        with self._parked_lock:
            return {entry.member for entry in self._parked.get(group, ())}

    def parked(self) -> int:
        """Joins and syncs waiting now (none holds a thread)."""
        with self._parked_lock:
            return sum(len(entries) for entries in self._parked.values())

    def _park(self, group: str, entry: Parked) -> None:
        """Wait with ``entry`` until a change or a deadline of ``group`` answers it.

        Registered first, then checked against the state as it is now: a change made
        between the request's own step and the registration is not missed.
        """
        with self._parked_lock:
            self._parked.setdefault(group, []).append(entry)
        self._state_changed(group)
        if not entry.future.done():
            self._schedule(group)

    def _state_changed(self, group: str) -> None:
        """Check the requests parked on ``group`` against its state; drop the answered."""
        with self._parked_lock:
            entries = list(self._parked.get(group, ()))
        if not entries:
            return
        state = self._docs.get(group)
        if state is None:
            return
        _, doc = state.read()
        done = [entry for entry in entries if entry.settle(doc)]
        if done:
            with self._parked_lock:
                left = [e for e in self._parked.get(group, ()) if e not in done]
                if left:
                    self._parked[group] = left
                else:
                    self._parked.pop(group, None)
            for entry in done:
                if not entry.future.cancelled() and entry.future.exception() is None:
                    self.touch(group, entry.member)  # answered: alive now

    def _schedule(self, group: str) -> None:
        """Ask the deadline thread to look at ``group`` when its state can next change
        by time alone: the end of its rebalance (or of the initial delay), of the
        leader's time to sync, or of a member's session (the parked ones are alive)."""
        state = self._docs.get(group)
        if state is None:
            return
        _, doc = state.read()
        if is_consumer_group(doc):
            return
        now = now_ms()
        when: list[int] = []
        if doc["state"] == PREPARING:
            when.append(int(doc["rebalance_deadline_ms"]))
            if int(doc["not_before_ms"]) > now:
                when.append(int(doc["not_before_ms"]))
        elif doc["state"] == COMPLETING:
            when.append(int(doc["sync_deadline_ms"]))
        waiting = self._waiting_members(group)
        others = [m for m in doc["members"] if m not in waiting]
        beats = self.last_heartbeats(group, others)
        for m in others:
            when.append(beats.get(m, 0) + int(doc["members"][m]["session_timeout_ms"]) + 1)
        if when:
            self._deadlines.at(max(min(when), now + 1), group)

    def _deadline_passed(self, group: str) -> None:
        """The deadline thread's call: bring ``group`` up to date (its change answers
        what it can), then wait for its next deadline if requests are still parked."""
        with self._parked_lock:
            if not self._parked.get(group):
                return
        try:
            self._current(group)
        except SparklogError:
            # the state could not be written (storage down): try again in a second
            self._deadlines.at(now_ms() + 1_000, group)
            return
        self._state_changed(group)
        with self._parked_lock:
            still = bool(self._parked.get(group))
        if still:
            self._schedule(group)

    # -- the protocol ------------------------------------------------------
    def join_group(
        self,
        group: str,
        member_id: str,
        topics: Sequence[str],
        strategy: str | Sequence[str] = "range",
        session_timeout_ms: int = 10_000,
        rebalance_timeout_ms: int = 30_000,
        protocol_metadata: Mapping[str, bytes] | None = None,
        group_instance_id: str | None = None,
        protocol_type: str | None = None,
        owned_partitions: Sequence[tuple[str, int]] | None = None,
    ) -> JoinResult:
        """Join (or re-join) and wait until the rebalance completes; return the generation
        (:meth:`join_group_parked`, waited for on this thread)."""
        return self.join_group_parked(
            group,
            member_id,
            topics,
            strategy,
            session_timeout_ms,
            rebalance_timeout_ms,
            protocol_metadata,
            group_instance_id,
            protocol_type,
            owned_partitions,
        ).result()

    def join_group_parked(
        self,
        group: str,
        member_id: str,
        topics: Sequence[str],
        strategy: str | Sequence[str] = "range",
        session_timeout_ms: int = 10_000,
        rebalance_timeout_ms: int = 30_000,
        protocol_metadata: Mapping[str, bytes] | None = None,
        group_instance_id: str | None = None,
        protocol_type: str | None = None,
        owned_partitions: Sequence[tuple[str, int]] | None = None,
    ) -> Future[JoinResult]:
        """Join (or re-join); the future is answered when the rebalance completes.

        In memory (a broker) the join is parked (:mod:`~sparklog.groups.purgatory`):
        the calling thread returns at once and the future is completed by the change
        or the deadline that completes the rebalance.  Over storage (embedded
        clients) another process may complete it, which only reading the root shows:
        the call polls every ``poll_ms`` on this thread and returns a done future.
        Errors of the request itself (bad arguments, a fenced member) are raised here;
        those of the wait are the future's.

        ``protocol_metadata`` ({protocol name: opaque bytes}, in preference order) is a
        Kafka client's join: its protocols replace ``strategy`` and its leader assigns.
        ``group_instance_id`` makes the member static (KIP-345): a member joining with
        the id of one already in the group takes its place and fences it (its calls get
        FENCED_INSTANCE_ID); in a stable group, with the same subscription, it keeps
        that member's assignment with no rebalance.  A Kafka consumer's join to a
        KIP-848 group with members (``protocol_type``, and the ``owned_partitions`` its
        subscription names) is served from that group's state and returns at once
        (:meth:`ConsumerGroupProtocol.classic_join`).
        """
        state = self.state_doc(group)
        self._check_member_id(member_id)
        self._check_timeouts(session_timeout_ms, rebalance_timeout_ms)
        opaque = None
        if protocol_metadata is not None:
            opaque = {
                str(name): base64.b64encode(bytes(data)).decode()
                for name, data in protocol_metadata.items()
            }
            strategies = list(opaque)
            if not strategies:
                raise InconsistentGroupProtocolError("a join without any protocol")
        else:
            strategies = [strategy] if isinstance(strategy, str) else list(strategy)
        unknown = [s for s in strategies if s not in ASSIGNORS and opaque is None]
        if not strategies or unknown:
            raise InvalidConfigurationError(
                f"assignment strategy {unknown[0] if unknown else strategies!r} is not "
                f"accepted; accepted: {', '.join(ASSIGNORS)}"
            )
        if (
            isinstance(topics, str)
            or (not topics and opaque is None)
            or not all(isinstance(t, str) for t in topics)
        ):
            raise InvalidRequestError(
                f"topics={topics!r} is not accepted; accepted: a non-empty list of topic names"
            )
        new_member = not member_id
        member = member_id or f"member-{uuid.uuid4().hex[:16]}"
        self.touch(group, member)
        request = MemberJoin(
            member_id=member,
            new=new_member,
            topics=topics,
            strategies=strategies,
            session_timeout_ms=session_timeout_ms,
            rebalance_timeout_ms=rebalance_timeout_ms,
            metadata=opaque,
            instance_id=group_instance_id,
            protocol_type=protocol_type,
        )
        #: the same join to a KIP-848 group with members (only a Kafka client's)
        kip848_request = None
        if opaque is not None:
            kip848_request = ClassicJoin(
                member_id=member,
                new=new_member,
                topics=list(topics),
                protocols=opaque,
                protocol_type=protocol_type,
                session_timeout_ms=session_timeout_ms,
                rebalance_timeout_ms=rebalance_timeout_ms,
                instance_id=group_instance_id,
                owned=owned_partitions,
            )

        def join(doc: dict[str, Any]) -> tuple[dict[str, Any], JoinResult | None]:
            """One attempt (always written): the answer if there is nothing to wait for,
            else None (the member waits for the rebalance to complete)."""
            now = now_ms()
            self._maintain(group, doc, now)
            if self.consumer.classic.refuse_classic_member(group_doc(doc)):
                if kip848_request is None:
                    raise InconsistentGroupProtocolError(
                        f"group {group!r} is a KIP-848 consumer group with members; only Kafka "
                        "consumers (JoinGroup with protocol metadata) may join it"
                    )
                # a KIP-848 group's member: no leader, nothing to wait for
                epoch, protocol = self.consumer.classic.join(group_doc(doc), kip848_request)
                return doc, JoinResult(
                    generation=epoch,
                    member_id=member,
                    leader_id="",
                    members={member: sorted(set(topics))},
                    protocol=protocol,
                    member_metadata={member: _opaque(opaque, protocol)},
                    instance_ids={member: group_instance_id},
                )
            if self._classic(doc).join(request, now):
                # a static member back in its place: no rebalance, same generation
                everyone = doc["leader"] == member
                return doc, self._join_result(group_doc(doc), member, everyone=everyone)
            return doc, None

        start, answer = state.update_with(join)
        if answer is not None:
            return _done(answer)
        start_generation = start["generation"] - (1 if start["state"] != PREPARING else 0)

        def joined(doc: dict[str, Any]) -> Any:
            """The answer once the rebalance the member joined has completed (None: not
            yet; REJOIN: a newer rebalance began after ours completed unseen)."""
            if is_consumer_group(doc):  # upgraded meanwhile: join it as a classic member
                raise RebalanceInProgressError(f"group {group!r} is rebalancing; join again")
            if member not in doc["members"]:
                raise UnknownMemberIdError(
                    f"member {member!r} was removed from group {group!r} while joining; "
                    "join again with an empty member id"
                )
            if doc["state"] in (COMPLETING, STABLE) and doc["generation"] > start_generation:
                return self._join_result(group_doc(doc), member, everyone=True)
            if doc["state"] == PREPARING and not doc["members"][member]["joined"]:
                return REJOIN
            return None

        def rejoin() -> None:
            state.update_with(join)

        if self.in_memory:
            entry = Parked(member, joined, rejoin)
            self._park(group, entry)
            return entry.future
        # over storage: poll the root (another process may complete the rebalance, and
        # only the root says so); a member waiting here is alive: a PUT every third of
        # its session
        last_touch = time.monotonic()
        while True:
            answer = joined(self._current(group, member))
            if answer is REJOIN:
                rejoin()
            elif answer is not None:
                return _done(answer)
            if time.monotonic() - last_touch > session_timeout_ms / 3000:
                self.touch(group, member)
                last_touch = time.monotonic()
            time.sleep(self.poll_ms / 1000)

    def sync_group(
        self,
        group: str,
        generation: int,
        member_id: str,
        assignment: Mapping[str, Sequence[TopicPartition]] | None = None,
    ) -> list[TopicPartition]:
        """The member's partitions for ``generation``; the leader may supply everyone's."""
        return self.sync_group_opaque(group, generation, member_id, assignment)[0]

    def sync_group_opaque(
        self,
        group: str,
        generation: int,
        member_id: str,
        assignment: Mapping[str, Sequence[TopicPartition]] | None = None,
        opaque_assignment: Mapping[str, bytes] | None = None,
    ) -> tuple[list[TopicPartition], bytes | None]:
        """:meth:`sync_group` for Kafka clients: also the member's opaque assignment bytes
        (None when the coordinator assigned); a Kafka leader supplies everyone's."""
        return self.sync_group_parked(
            group, generation, member_id, assignment, opaque_assignment
        ).result()

    def sync_group_parked(
        self,
        group: str,
        generation: int,
        member_id: str,
        assignment: Mapping[str, Sequence[TopicPartition]] | None = None,
        opaque_assignment: Mapping[str, bytes] | None = None,
    ) -> Future[tuple[list[TopicPartition], bytes | None]]:
        """:meth:`sync_group_opaque` answered in a future: a follower's sync waits for the
        leader's, parked in memory (as :meth:`join_group_parked`), polled over storage."""
        state = self.state_doc(group)
        self._check_member_id(member_id)
        given = None
        if assignment is not None:
            try:
                given = {
                    str(m): sorted({(str(t), int(p)) for t, p in tps})
                    for m, tps in assignment.items()
                }
            except (TypeError, ValueError, AttributeError):
                raise InvalidRequestError(
                    "assignment is not accepted; accepted: {member_id: [(topic, partition)]}"
                ) from None

        def sync(doc: dict[str, Any]) -> tuple[dict[str, Any] | None, list[TopicPartition] | None]:
            """One attempt: the state to write (None: unchanged) and the member's
            partitions if a KIP-848 group serves the sync (None: a classic group)."""
            changed = self._maintain(group, doc, now_ms())
            if is_consumer_group(doc):
                check_not_fenced(group_doc(doc), member_id)
                mine = self.consumer.classic.sync(group_doc(doc), member_id, generation)
                return (doc if changed else None), [TopicPartition(str(t), int(p)) for t, p in mine]
            if changed and doc["state"] == PREPARING:
                return doc, None  # write what expired; the member is told to join again
            stored = self._classic(doc).sync(member_id, generation, given, opaque_assignment)
            return (doc if stored or changed else None), None

        while True:
            doc, in_consumer_group = state.update_with(sync)
            if in_consumer_group is not None:  # the assignment is encoded by the listener
                self.touch(group, member_id)
                return _done((in_consumer_group, None))
            synced = self._classic(doc).synced_assignment(member_id, generation)
            if synced is not None:
                self.touch(group, member_id)
                return _done(synced)
            if self.in_memory:

                def synced_now(doc: dict[str, Any]) -> Any:
                    """The member's assignment once the leader has synced (or the error
                    that a newer rebalance or generation makes of the sync)."""
                    if is_consumer_group(doc):
                        raise RebalanceInProgressError(
                            f"group {group!r} is rebalancing; join again"
                        )
                    return self._classic(doc).synced_assignment(member_id, generation)

                entry = Parked(member_id, synced_now)
                self._park(group, entry)
                return entry.future
            time.sleep(self.poll_ms / 1000)

    def heartbeat(self, group: str, generation: int, member_id: str) -> None:
        """Keep the member alive; RebalanceInProgress means: join again now."""
        self._check_member_id(member_id)
        doc = self._current(group, member_id)
        check_not_fenced(group_doc(doc), member_id)
        if is_consumer_group(doc):  # a classic member of a KIP-848 group
            self.consumer.classic.member(group_doc(doc), member_id, generation)
            self.touch(group, member_id)
            self.consumer.classic.heartbeat(group_doc(doc), member_id, generation)
            return
        if member_id not in doc["members"]:
            raise UnknownMemberIdError(f"member {member_id!r} is not in group {group!r}")
        if doc["state"] == PREPARING:
            self.touch(group, member_id)
            raise RebalanceInProgressError(f"group {group!r} is rebalancing; join again")
        self._check_generation(doc, generation, member_id)
        self.touch(group, member_id)

    def leave_group(self, group: str, member_id: str, group_instance_id: str | None = None) -> None:
        """Leave at once (no session timeout wait); the others rebalance.  A static member
        may be named by its ``group_instance_id`` alone (Kafka's LeaveGroup v3+)."""
        state = self.state_doc(group)
        self._check_member_id(member_id)

        def leave(doc: dict[str, Any]) -> dict[str, Any] | None:
            check_not_fenced(group_doc(doc), member_id)
            if is_consumer_group(doc):  # a classic member of a KIP-848 group
                named = static_member(group_doc(doc), group_instance_id or "")
                if group_instance_id and member_id and named and named != member_id:
                    raise instance_taken(group, group_instance_id, named, member_id)
                return (
                    doc if self.consumer.classic.leave(group_doc(doc), named or member_id) else None
                )
            left = self._classic(doc).leave(member_id, group_instance_id, now_ms())
            return doc if left else None

        state.update(leave)
        self.forget_heartbeat(group, member_id)

    def commit_offsets(
        self,
        group: str,
        generation: int,
        member_id: str,
        offsets: Mapping[TopicPartition, int],
        metadata: str = "",
    ) -> None:
        """Commit next-offsets-to-read.  ``generation=-1, member_id=''`` for a group with no
        members (a standalone consumer or the Spark source); stale generations are refused.
        A KIP-848 member commits with its member epoch as ``generation``; its member id is
        the client's own (librdkafka's is base64), so the classic id rule does not apply."""
        try:
            clean = {TopicPartition(str(t), int(p)): int(o) for (t, p), o in offsets.items()}
        except (TypeError, ValueError):
            raise InvalidRequestError(
                "offsets are not accepted; accepted: {(topic, partition): offset}"
            ) from None
        # negative offsets are stored as given, as Kafka does (kafkajs' resetOffsets
        # commits -2 = earliest); readers treat them as no commit or a logical offset
        doc = self._current(group)
        consumer_group = is_consumer_group(doc)
        if not consumer_group:
            self._check_member_id(member_id)
        if generation < 0 and not member_id:
            if has_members(doc):
                raise UnknownMemberIdError(
                    f"group {group!r} has active members; commit with a member id and the "
                    "current generation"
                )
        elif consumer_group:  # KIP-848: the member's epoch, checked in memory
            self.consumer.check_member(group_doc(doc), member_id, generation)
        else:
            self._check_generation(doc, generation, member_id)
            if doc["state"] == COMPLETING:
                raise RebalanceInProgressError(f"group {group!r} is rebalancing; join again")
        topic_ids = {}
        for topic in {t for t, _ in clean}:
            try:
                topic_ids[topic] = self.root.describe_topic(topic).topic_id
            except SparklogError:
                topic_ids[topic] = ""
        self.root.groups.commit(
            group,
            clean,
            metadata=metadata,
            topic_ids=topic_ids,
            generation=generation if member_id and not consumer_group else None,
            member_id=member_id,
        )

    def consumer_group_heartbeat(self, group: str, request: Heartbeat) -> HeartbeatAnswer:
        """KIP-848's ConsumerGroupHeartbeat (:mod:`sparklog.groups.consumer_groups`)."""
        return self.consumer.heartbeat(request)

    def consumer_group_describe(self, group: str) -> dict[str, Any]:
        """KIP-848's ConsumerGroupDescribe of one group (GROUP_ID_NOT_FOUND if classic)."""
        if group not in self.list_groups():
            raise GroupIdNotFoundError(f"Group {group} not found.")
        return self.consumer.describe(group_doc(self._current(group)))

    def check_consumer_member(self, group: str, member_id: str, member_epoch: int) -> None:
        """OffsetFetch v9's member check: a KIP-848 group's member at its current epoch."""
        doc = self._current(group)
        if is_consumer_group(doc) and member_id:
            self.consumer.check_member(group_doc(doc), member_id, member_epoch)

    def fetch_offsets(self, group: str) -> dict[TopicPartition, int]:
        return {tp: offset for tp, (offset, _) in self.fetch_committed(group).items()}

    def fetch_offsets_and_unstable(
        self, group: str
    ) -> tuple[dict[TopicPartition, int], frozenset[TopicPartition]]:
        """The group's committed offsets, and the partitions an open transaction holds
        offsets of (OffsetFetch's ``require_stable``: KIP-447)."""
        self.state_doc(group)
        found, unstable = self.root.groups.fetch_with_pending(group)
        return {tp: c.offset for tp, c in found.items()}, unstable

    def fetch_committed(self, group: str) -> dict[TopicPartition, tuple[int, str]]:
        """The group's committed ``(offset, metadata)`` per partition (OffsetFetch's answer)."""
        self.state_doc(group)
        found = self.root.groups.fetch(group)
        return {tp: (c.offset, c.metadata) for tp, c in found.items()}

    def group_state(self, group: str) -> dict[str, Any]:
        """The group's current state document (after expiring silent members)."""
        return self._current(group)

    def list_groups(self) -> list[str]:
        return list(self.root.groups.list_groups())

    def describe_group(self, group: str) -> dict[str, Any]:
        """State, generation, members with assignments, and lag per committed partition."""
        doc = self._current(group)
        beats = self.last_heartbeats(group, list(doc["members"]))
        members = [
            {
                "member_id": m,
                "topics": v["topics"],
                "assignment": [[t, p] for t, p in doc["assignment"].get(m, [])],
                "last_heartbeat_ms": beats.get(m, 0),
                "session_timeout_ms": v["session_timeout_ms"],
            }
            for m, v in sorted(doc["members"].items())
        ]
        if is_consumer_group(doc):  # KIP-848 members: subscriptions and owned partitions
            found = doc["consumer"]["members"]
            beats = self.last_heartbeats(group, list(found))
            members = [
                {
                    "member_id": m,
                    "topics": v["topic_names"] + ([v["topic_regex"]] if v["topic_regex"] else []),
                    "assignment": [[t, p] for t, p in v["assigned"]],
                    "last_heartbeat_ms": beats.get(m, 0),
                    "session_timeout_ms": (v.get("classic") or {}).get(
                        "session_timeout_ms", self.consumer.session_timeout_ms
                    ),
                }
                for m, v in sorted(found.items())
            ]
        committed_offsets = self.fetch_offsets(group)
        hwms = self.high_watermarks(list(committed_offsets))
        offsets = []
        for tp, committed in sorted(committed_offsets.items()):
            hwm = hwms.get(tp)
            offsets.append(
                {
                    "topic": tp.topic,
                    "partition": tp.partition,
                    "committed": committed,
                    "high_watermark": hwm,
                    "lag": lag_of(hwm, committed),
                }
            )
        return {
            "group": group,
            "state": doc["state"] if has_members(doc) or doc["generation"] else EMPTY,
            "generation": doc["consumer"]["group_epoch"]
            if is_consumer_group(doc)
            else doc["generation"],
            "protocol": doc["consumer"]["assignor"] if is_consumer_group(doc) else doc["protocol"],
            "leader": doc["leader"],
            "members": members,
            "offsets": offsets,
        }

    def delete_group(self, group: str) -> None:
        """Remove an empty group's state and committed offsets."""
        doc = self._current(group)
        if has_members(doc):
            raise InvalidRequestError(
                f"group {group!r} has active members; only empty groups can be deleted"
            )
        self.root.groups.delete(group)
        self._docs.pop(group, None)

    def delete_offsets(
        self, group: str, partitions: Sequence[tuple[str, int]]
    ) -> dict[TopicPartition, SparklogError | None]:
        """Drop committed offsets (Kafka's OffsetDelete); per partition, None or the refusal.

        A partition of a topic an active member is subscribed to keeps its offset
        (GroupSubscribedToTopicError, as Kafka answers GROUP_SUBSCRIBED_TO_TOPIC):
        the member would commit it again.  The others are dropped in one commit of
        the group's log, checked against the generation whose members were looked
        at, so a member that joins meanwhile makes the call look again.
        """
        if group not in self.list_groups():
            raise GroupIdNotFoundError(f"unknown group {group!r}; no offsets deleted")
        try:
            wanted = sorted({TopicPartition(str(t), int(p)) for t, p in partitions})
        except (TypeError, ValueError):
            raise InvalidRequestError(
                "partitions are not accepted; accepted: [(topic, partition), ...]"
            ) from None
        for _ in range(10):
            doc = self._current(group)
            subscribed = {t for m in doc["members"].values() for t in m["topics"]}
            for tps in doc["assignment"].values():  # and what the members were given
                subscribed.update(t for t, _ in tps)
            result: dict[TopicPartition, SparklogError | None] = {}
            free = []
            for tp in wanted:
                if tp.topic in subscribed:
                    result[tp] = GroupSubscribedToTopicError(
                        f"group {group!r} has active members subscribed to topic {tp[0]!r}; "
                        "stop them (or let them unsubscribe) before deleting its offsets"
                    )
                else:
                    result[tp] = None
                    free.append(tp)
            try:
                self.root.groups.delete_offsets(group, free, generation=int(doc["generation"]))
            except _IllegalGeneration:
                continue  # a rebalance started after we looked: look again
            return result
        raise RebalanceInProgressError(f"group {group!r} keeps rebalancing; retry")

    def known_groups(self) -> list[str]:
        """Groups this coordinator has served since it started (no storage request)."""
        return sorted(self._docs)

    def sweep(self, groups: Sequence[str] | None = None) -> None:
        """Expel silent members and finish due rebalances of ``groups`` (default: all)."""
        for group in self.list_groups() if groups is None else groups:
            try:
                self._current(group)
            except SparklogError:
                continue
