"""Consumer-group membership for embedded mode, coordinated through the storage root alone.

Stand-in for ``broker_lite.groups.GroupCoordinator`` with the same method
names (join_group, sync_group, heartbeat, leave_group, commit_offsets, ...),
so several processes sharing a root form a group without any server.

State: ``groups/<g>/membership/<v:020d>.json`` is a create-only versioned
document (members, generation, state, leader, assignment); a lost race re-reads
and retries.  Liveness: each member overwrites its own
``groups/<g>/heartbeats/<member>.json``; a member whose heartbeat is older than
its session timeout is removed by whichever member notices, which starts a
rebalance.  Committed offsets go to the root's GroupStore.

Protocol (Kafka's classic one): a join moves the group to PreparingRebalance;
every live member must re-join; when all have (or the rebalance timeout
passes) the generation increments and the state is CompletingRebalance; the
leader computes the assignment and syncs it (Stable); others' sync waits for it.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sparklog.backends.base import TP, JoinResult
from sparklog.errors import (
    CommitFailedError,
    GroupError,
    KafkaTimeoutError,
    RebalanceInProgressError,
    UnavailableError,
)
from sparklog.types import OffsetAndMetadata
from storage import LogRoot
from storage.documents import version_key

POLL_INTERVAL_S = 0.05
EMPTY = "Empty"
PREPARING = "PreparingRebalance"
COMPLETING = "CompletingRebalance"
STABLE = "Stable"

Doc = dict[str, Any]


def _now_ms() -> int:
    return int(time.time() * 1000)


class _MembershipDoc:
    """The versioned membership document; probes forward from the last version seen.

    Probing by GET (not listing) sees other processes' versions at once even
    where the filesystem caches directory listings (s3fs).
    """

    def __init__(self, root: LogRoot, group: str) -> None:
        self.store = root.store
        self.prefix = f"groups/{group}/membership"
        self.version = -1
        self.doc: Doc | None = None
        self._listed = False

    def latest(self) -> tuple[int, Doc | None]:
        if not self._listed:
            names = self.store.list_names(self.prefix)
            versions = [int(n.split(".")[0]) for n in names if n.split(".")[0].isdigit()]
            if versions:
                newest = max(versions)
                raw = self.store.get_or_none(version_key(self.prefix, newest))
                if raw is not None:
                    self.version, self.doc = newest, json.loads(raw)
            self._listed = True
        while True:
            raw = self.store.get_or_none(version_key(self.prefix, self.version + 1))
            if raw is None:
                return self.version, self.doc
            self.version, self.doc = self.version + 1, json.loads(raw)

    def update(self, change: Callable[[Doc], Doc | None], attempts: int = 200) -> Doc:
        for _ in range(attempts):
            version, doc = self.latest()
            current = json.loads(json.dumps(doc)) if doc else _empty_doc()
            new = change(current)
            if new is None:
                return current
            data = json.dumps(new, sort_keys=True, separators=(",", ":")).encode()
            if self.store.create(version_key(self.prefix, version + 1), data):
                self.version, self.doc = version + 1, new
                return new
        raise UnavailableError(f"group membership at {self.prefix}: too many concurrent updates")


def _empty_doc() -> Doc:
    return {
        "generation": 0,
        "state": EMPTY,
        "strategy": "",
        "leader": None,
        "members": {},
        "assignment": {},
        "rebalance_started_ms": 0,
    }


class EmbeddedGroupCoordinator:
    """Kafka's classic group protocol over a storage root (no broker)."""

    def __init__(self, root: LogRoot) -> None:
        self.root = root
        self._docs: dict[str, _MembershipDoc] = {}

    def _doc(self, group: str) -> _MembershipDoc:
        doc = self._docs.get(group)
        if doc is None:
            from storage.groups import validate_group_name

            try:
                validate_group_name(group)
            except Exception as exc:
                raise GroupError(str(exc)) from exc
            doc = self._docs[group] = _MembershipDoc(self.root, group)
        return doc

    # -- liveness --------------------------------------------------------------
    def _beat(self, group: str, member_id: str) -> None:
        self.root.store.put(
            f"groups/{group}/heartbeats/{member_id}.json",
            json.dumps({"ts": _now_ms()}).encode(),
        )

    def _last_beats(self, group: str, members: Sequence[str]) -> dict[str, int]:
        keys = {m: f"groups/{group}/heartbeats/{m}.json" for m in members}
        found = self.root.store.get_many(keys.values())
        out = {}
        for member, key in keys.items():
            raw = found.get(key)
            out[member] = json.loads(raw)["ts"] if raw else 0
        return out

    def _expired(self, group: str, doc: Doc) -> list[str]:
        members = doc["members"]
        if not members:
            return []
        beats = self._last_beats(group, list(members))
        now = _now_ms()
        return [
            m
            for m, info in members.items()
            if now - max(beats.get(m, 0), info.get("added_ms", 0)) > info["session_timeout_ms"]
        ]

    @staticmethod
    def _start_rebalance(doc: Doc) -> None:
        if doc["state"] != PREPARING:
            doc["state"] = PREPARING
            doc["rebalance_started_ms"] = _now_ms()
            for info in doc["members"].values():
                info["joined"] = -1
        if not doc["members"]:
            doc["state"] = EMPTY

    # -- protocol ----------------------------------------------------------------
    def join_group(
        self,
        group: str,
        member_id: str,
        topics: Sequence[str],
        strategy: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
    ) -> JoinResult:
        member_id = member_id or f"member-{uuid.uuid4().hex[:12]}"
        doc_handle = self._doc(group)
        self._beat(group, member_id)
        expired = self._expired(group, doc_handle.latest()[1] or _empty_doc())

        def join(doc: Doc) -> Doc | None:
            members = doc["members"]
            changed = False
            for dead in expired:
                if dead in members and dead != member_id:
                    del members[dead]
                    doc["assignment"].pop(dead, None)
                    changed = True
            me = members.get(member_id)
            pending = doc["generation"] + 1
            if (
                me is None
                or sorted(me["topics"]) != sorted(topics)
                or doc["state"] != PREPARING
                or changed
            ):
                self._start_rebalance(doc)
                changed = True
            entry = members.setdefault(
                member_id, {"topics": list(topics), "added_ms": _now_ms(), "joined": -1}
            )
            if entry.get("joined") == pending and not changed:
                return None
            entry.update(
                topics=list(topics),
                session_timeout_ms=session_timeout_ms,
                rebalance_timeout_ms=rebalance_timeout_ms,
                strategy=strategy,
                joined=pending,
            )
            doc["state"] = PREPARING
            doc["strategy"] = strategy
            return doc

        doc_handle.update(join)
        deadline = time.monotonic() + rebalance_timeout_ms / 1000 + session_timeout_ms / 1000
        while time.monotonic() < deadline:
            self._beat(group, member_id)
            _, doc = doc_handle.latest()
            doc = doc or _empty_doc()
            me = doc["members"].get(member_id)
            if me is None or (
                doc["state"] == PREPARING and me.get("joined") != doc["generation"] + 1
            ):
                doc_handle.update(join)  # removed or a new round started: join again
                continue
            if doc["state"] in (COMPLETING, STABLE) and me.get("joined") == doc["generation"]:
                return JoinResult(
                    doc["generation"],
                    member_id,
                    doc["leader"],
                    {m: list(i["topics"]) for m, i in sorted(doc["members"].items())},
                )
            if doc["state"] == PREPARING:
                self._try_complete(group, doc_handle, member_id)
            time.sleep(POLL_INTERVAL_S)
        raise KafkaTimeoutError(
            f"group {group!r}: rebalance did not complete within {rebalance_timeout_ms} ms"
        )

    def _try_complete(self, group: str, doc_handle: _MembershipDoc, member_id: str) -> None:
        _, current = doc_handle.latest()
        if current is None:
            return
        dead = set(self._expired(group, current)) - {member_id}

        def complete(doc: Doc) -> Doc | None:
            if doc["state"] != PREPARING:
                return None
            pending = doc["generation"] + 1
            members = doc["members"]
            waited_ms = _now_ms() - doc["rebalance_started_ms"]
            timeout_ms = max(
                (i.get("rebalance_timeout_ms", 0) for i in members.values()), default=0
            )
            laggards = [m for m, i in members.items() if i.get("joined") != pending]
            if laggards and not (set(laggards) <= dead or waited_ms > timeout_ms):
                return None
            for m in laggards:
                del members[m]
                doc["assignment"].pop(m, None)
            if not members:
                doc["state"] = EMPTY
                return doc
            doc["generation"] = pending
            doc["state"] = COMPLETING
            if doc["leader"] not in members:
                doc["leader"] = min(members, key=lambda m: (members[m]["added_ms"], m))
            return doc

        doc_handle.update(complete)

    def sync_group(
        self,
        group: str,
        generation: int,
        member_id: str,
        assignment: Mapping[str, Sequence[TP]] | None = None,
    ) -> list[TP]:
        doc_handle = self._doc(group)
        if assignment is not None:

            def publish(doc: Doc) -> Doc | None:
                self._check_member(group, doc, generation, member_id, allow_completing=True)
                if doc["state"] != COMPLETING:
                    return None
                doc["assignment"] = {
                    m: sorted([t, p] for t, p in tps) for m, tps in assignment.items()
                }
                doc["state"] = STABLE
                return doc

            doc_handle.update(publish)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            self._beat(group, member_id)
            _, doc = doc_handle.latest()
            self._check_member(group, doc or _empty_doc(), generation, member_id, True)
            assert doc is not None
            if doc["state"] == STABLE:
                return [(t, int(p)) for t, p in doc["assignment"].get(member_id, [])]
            time.sleep(POLL_INTERVAL_S)
        raise RebalanceInProgressError(
            f"group {group!r}: no assignment for generation {generation}"
        )

    @staticmethod
    def _check_member(
        group: str, doc: Doc, generation: int, member_id: str, allow_completing: bool = False
    ) -> None:
        if member_id not in doc["members"]:
            raise CommitFailedError(
                f"member {member_id!r} is not in group {group!r} (removed after its session "
                "timed out?); re-join"
            )
        if doc["state"] == PREPARING:
            raise RebalanceInProgressError(f"group {group!r} is rebalancing; re-join")
        if doc["generation"] != generation:
            raise CommitFailedError(
                f"generation {generation} of group {group!r} is stale; current is "
                f"{doc['generation']}"
            )
        if doc["state"] == COMPLETING and not allow_completing:
            raise RebalanceInProgressError(f"group {group!r} is completing a rebalance")

    def heartbeat(self, group: str, generation: int, member_id: str) -> None:
        doc_handle = self._doc(group)
        self._beat(group, member_id)
        _, doc = doc_handle.latest()
        doc = doc or _empty_doc()
        self._check_member(group, doc, generation, member_id, allow_completing=True)
        dead = [m for m in self._expired(group, doc) if m != member_id]
        if dead:

            def evict(d: Doc) -> Doc | None:
                gone = [m for m in dead if m in d["members"]]
                if not gone:
                    return None
                for m in gone:
                    del d["members"][m]
                    d["assignment"].pop(m, None)
                self._start_rebalance(d)
                return d

            doc_handle.update(evict)
            raise RebalanceInProgressError(
                f"group {group!r}: member(s) {', '.join(dead)} timed out; rebalancing"
            )

    def leave_group(self, group: str, member_id: str) -> None:
        def leave(doc: Doc) -> Doc | None:
            if member_id not in doc["members"]:
                return None
            del doc["members"][member_id]
            doc["assignment"].pop(member_id, None)
            if doc["leader"] == member_id:
                doc["leader"] = None
            doc["state"] = STABLE  # force a fresh round for the others
            self._start_rebalance(doc)
            return doc

        self._doc(group).update(leave)
        self.root.store.delete(f"groups/{group}/heartbeats/{member_id}.json")

    def commit_offsets(
        self, group: str, generation: int, member_id: str, offsets: Mapping[TP, OffsetAndMetadata]
    ) -> None:
        _, doc = self._doc(group).latest()
        doc = doc or _empty_doc()
        if member_id or generation >= 0:
            if member_id not in doc["members"] or doc["generation"] != generation:
                raise CommitFailedError(
                    f"commit to group {group!r} from generation {generation} member "
                    f"{member_id!r} rejected: current generation is {doc['generation']}; "
                    "the partitions were probably reassigned"
                )
        elif doc["members"]:
            raise CommitFailedError(
                f"group {group!r} has active members; a consumer outside the group cannot commit"
            )
        by_meta: dict[str, dict[TP, int]] = {}
        for tp, om in offsets.items():
            by_meta.setdefault(om.metadata, {})[tp] = om.offset
        for metadata, part in by_meta.items():
            self.root.groups.commit(group, part, metadata=metadata)

    def fetch_offsets(self, group: str) -> dict[TP, OffsetAndMetadata]:
        self._doc(group)
        return {
            tp: OffsetAndMetadata(c.offset, c.metadata)
            for tp, c in self.root.groups.fetch(group).items()
        }

    def list_groups(self) -> list[str]:
        return self.root.groups.list_groups()

    def describe_group(self, group: str) -> dict[str, Any]:
        _, doc = self._doc(group).latest()
        doc = doc or _empty_doc()
        expired = set(self._expired(group, doc))
        members = {m: i for m, i in doc["members"].items() if m not in expired}
        state = doc["state"] if members else EMPTY
        return {
            "group": group,
            "state": state,
            "generation": doc["generation"],
            "strategy": doc["strategy"],
            "leader": doc["leader"],
            "members": [
                {
                    "member_id": m,
                    "topics": list(i["topics"]),
                    "assignment": [(t, int(p)) for t, p in doc["assignment"].get(m, [])],
                }
                for m, i in sorted(members.items())
            ],
        }

    def delete_group(self, group: str) -> None:
        info = self.describe_group(group)
        if info["members"]:
            raise GroupError(
                f"group {group!r} has {len(info['members'])} active member(s); stop them first"
            )
        self.root.groups.delete(group)
        self._docs.pop(group, None)
