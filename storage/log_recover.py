"""Repair a damaged log, for ``sparklog log recover`` (dry run unless told to act).

A log whose commit is damaged or missing stops at it: a broker refuses the shard
(``CORRUPT_MESSAGE``) and ``sparklog log check`` lists the file.  Recovery
rebuilds the state from the newest sound snapshot (or version 0) and the sound
commits, and writes a *repair commit* in place of each damaged or missing
version: the log reads past it again, and the versions after it, if sound,
keep their data.

A repair commit can never re-use an offset that was acknowledged.  What the lost
commit appended is unknown, so each partition's next offset moves past every
offset the lost commit can have given out: up to the first offset a later sound
commit appended to the partition (exact), or, for a damaged tail, by the rows
of every segment object written in :data:`RECOVER_OBJECT_WINDOW_MS` before the
last sound commit or since that no sound commit references (an upper bound: a
commit appends only objects written before it).  Those offsets are *given up*:
the plan names them per partition, the repair commit records them, and readers
skip them as they skip a compacted range.  Damaged snapshots are deleted when a
sound base remains, and damaged commits below the base (not needed to read the
log) are pruned with the commits below them.

Group logs and the cluster metadata log get the same repair with an empty
change: what the lost commit held (offset commits; topics, ACLs, brokers) is
gone and the log reads on from the state before it.

A broker journal (format 3) gets a *repair version* in place of each damaged or
missing version (:func:`plan_journal_recovery`): for every shard whose log leases
the journal and has not folded past the lost version, a step that moves each of
its partitions' next offset past what the lost version can have given out, by the
shard-log rules above (the first offset a later sound version appended, else the
window's unreferenced rows).  The shard logs are not written: readers read the
journal's tail through the repair version as through any other, and a successor's
lease folds it with the rest.  The offset commits a lost version held are gone.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sparklog.clock import now_ms
from sparklog.errors import CorruptRecordError, InvalidConfigurationError, SparklogError
from sparklog.storage.catalog import LogRoot
from sparklog.storage.documents import version_key
from sparklog.storage.journal import ENDING_KINDS, JournalRef, forget_journal, journal_steps
from sparklog.storage.log_check import problem_in, problem_of, versions_in
from sparklog.storage.metalog import HINT_NAME, Commit, MetaLog, decode_commit, encode_commit
from sparklog.storage.objectstore import ObjectStore
from sparklog.storage.segments import partition_directory
from sparklog.storage.shard_codec import ShardCodec, ShardState
from sparklog.storage.shared_objects import SHARED_OBJECTS_PREFIX, read_trailer
from sparklog.storage.topics import Topic

#: Segment objects this much older than the last sound commit can still belong to a
#: lost commit after it (a flush writes its object, then commits within the produce
#: deadline; brokers' clocks may differ): their rows count towards the offsets given up.
RECOVER_OBJECT_WINDOW_MS = 10 * 60 * 1000


class RecoveryImpossibleError(SparklogError, code="RECOVERY_IMPOSSIBLE"):
    """No sound base to rebuild the log from: restore it from a backup or a mirror."""


@dataclass(frozen=True)
class Repair:
    """One damaged or missing version and the repair commit that takes its place."""

    version: int
    problem: str
    body: Commit


@dataclass
class RecoveryPlan:
    """What ``recover`` does (or did) to one log."""

    log: str
    base: str
    repairs: list[Repair] = field(default_factory=list)
    #: damaged snapshots to delete: (version, problem)
    snapshots_deleted: list[tuple[int, str]] = field(default_factory=list)
    #: commits below the base to delete (damaged ones, and the older ones they cut off)
    commits_pruned: list[int] = field(default_factory=list)
    #: partition (a journal's: "topic/partition") -> [first, end) offset ranges no
    #: longer readable (shard logs and journals)
    given_up: dict[Any, list[tuple[int, int]]] = field(default_factory=dict)
    #: the snapshot the hint must name after recovery (-1: remove the hint)
    hint_snapshot: int | None = None

    @property
    def needed(self) -> bool:
        return bool(self.repairs or self.snapshots_deleted or self.commits_pruned)


# (state before the lost version, the version, sound commits after it) -> change
RepairChange = Callable[[Any, int, list[Commit]], dict[str, Any]]


def plan_recovery(log: MetaLog[Any], change: RepairChange | None = None) -> RecoveryPlan:
    """The repair of ``log``: reads only (one listing, one read per file)."""
    names = log.store.list_names(log.prefix)
    commit_versions = sorted(versions_in(names, ".json"))
    snapshot_versions = sorted(versions_in(names, ".snapshot"), reverse=True)
    sound: dict[int, Commit] = {}
    damaged: dict[int, str] = {}
    for version in commit_versions:
        key = log.key(version)
        raw = log.store.get_or_none(key)
        if raw is None:
            continue
        try:
            commit = decode_commit(raw, log.where(key))
            if commit["v"] != version:
                raise CorruptRecordError(f"holds version {commit['v']}")
            sound[version] = commit
        except CorruptRecordError as exc:
            damaged[version] = f"damaged: {problem_of(exc)}"
    plan = RecoveryPlan(log.name, "")
    state: Any = None
    for version in snapshot_versions:
        problem = problem_in(log, log.key(version, ".snapshot"), snapshot=True)
        if state is not None:  # below the base: only a damaged one needs deleting
            if problem is not None and problem != "missing":
                plan.snapshots_deleted.append((version, problem))
            continue
        if problem is None:
            try:
                state = log.open_snapshot(version)
            except CorruptRecordError as exc:
                problem = problem_of(exc)
        if state is not None:
            plan.base = f"snapshot {log.where(log.key(version, '.snapshot'))}"
        elif problem is not None and problem != "missing":
            plan.snapshots_deleted.append((version, problem))
    if state is None:
        state = log.codec.empty()
        if commit_versions and commit_versions[0] > state.version + 1:
            raise RecoveryImpossibleError(
                f"log {log.name}: no sound snapshot, and the commits before version "
                f"{commit_versions[0]} are gone; restore the log from a backup or a mirror"
            )
        plan.base = "the first version (no sound snapshot)"
    base = state.version
    if plan.snapshots_deleted:
        plan.hint_snapshot = base if base >= 0 else -1
    below = [v for v in damaged if v <= base]
    if below:
        plan.commits_pruned = [v for v in commit_versions if v <= max(below)]
    head = max([*commit_versions, base])
    for version in range(base + 1, head + 1):
        found = sound.get(version)
        if found is not None:
            log.codec.apply(state, found)
            state.version = version
            continue
        later = [sound[v] for v in range(version + 1, head + 1) if v in sound]
        body = change(state, version, later) if change is not None else {}
        given_up = body.pop("given_up", {})
        body.update(
            {
                "v": version,
                "id": uuid.uuid4().hex,
                "ts": now_ms(),
                "kind": "repair",
                "repair": {
                    "was": damaged.get(version, "missing"),
                    "given_up": {str(p): r for p, r in given_up.items()},
                },
            }
        )
        for p, ranges in given_up.items():
            plan.given_up.setdefault(p, []).extend((a, b) for a, b in ranges)
        plan.repairs.append(Repair(version, damaged.get(version, "missing"), body))
        log.codec.apply(state, body)
        state.version = version
    return plan


def execute_recovery(log: MetaLog[Any], plan: RecoveryPlan) -> None:
    """Write the plan's repair commits (in version order), then delete what it names.

    A damaged commit is overwritten in one put, never deleted first: no writer can
    take its version meanwhile.  A missing one is created (create-only); if a writer
    created it first, nothing more is changed and the error says to plan again.
    """
    _write_repairs(log.store, log.key, plan.repairs, f"log {log.name}")
    if plan.hint_snapshot is not None:
        hint = f"{log.prefix}/{HINT_NAME}"
        if plan.hint_snapshot >= 0:
            log.store.put(hint, json.dumps({"snapshot": plan.hint_snapshot}).encode())
        else:
            log.store.delete(hint)
    for version, _problem in plan.snapshots_deleted:
        log.store.delete(log.key(version, ".snapshot"))
    for version in plan.commits_pruned:
        log.store.delete(log.key(version))
    log.invalidate()


def _write_repairs(
    store: ObjectStore, key_of: Callable[[int], str], repairs: list[Repair], what: str
) -> None:
    """Each repair's body at its version: a damaged file overwritten in one put (never
    deleted first: no writer can take its version meanwhile), a missing one created
    create-only (a writer that took it first: stop, and say to plan again)."""
    for repair in repairs:
        key = key_of(repair.version)
        data = encode_commit(repair.body)
        if repair.problem == "missing":
            if not store.create(key, data):
                raise RecoveryImpossibleError(
                    f"{what}: version {repair.version} was created while recovering; "
                    "stop the brokers writing it and plan the recovery again"
                )
        else:
            store.put(key, data)


def metadata_repair_change(state: Any, version: int, later: list[Commit]) -> dict[str, Any]:
    """The cluster metadata log's repair commit: no records (every commit has a list)."""
    return {"records": []}


# -- shard logs: the offsets a lost commit can have given out ------------------------------


def shard_repair_change(topic: Topic, shard: int) -> RepairChange:
    """The change for a shard log's repair commit: each partition's next offset past
    every offset the lost version can have given out (see the module docstring)."""
    tail_rows: dict[int, int] | None = None

    def change(state: ShardState, version: int, later: list[Commit]) -> dict[str, Any]:
        nonlocal tail_rows
        parts: dict[str, Any] = {}
        given_up: dict[int, list[list[int]]] = {}
        partitions = [p for p in range(topic.partitions) if topic.info.shard_of(p) == shard]
        for p in partitions:
            part = state.part(p)
            target = _next_append(later, p)
            if target is None:
                if tail_rows is None:
                    tail_rows = _unreferenced_rows(topic, shard, state, later)
                target = part.high_watermark + tail_rows.pop(p, 0)  # counted once
            if target <= part.high_watermark:
                continue
            move: dict[str, Any] = {"skip_to": target}
            if part.log_start_offset == part.high_watermark:
                move["lso"] = target  # nothing readable before the range
            parts[str(p)] = move
            given_up[p] = [[part.high_watermark, target]]
        return {"parts": parts, "epoch": state.leader_epoch, "given_up": given_up}

    return change


def _next_append(later: list[Commit], partition: int) -> int | None:
    for commit in later:
        appended = ((commit.get("parts") or {}).get(str(partition)) or {}).get("append")
        if appended:
            return int(appended[0]["base_offset"])
        skip = ((commit.get("parts") or {}).get(str(partition)) or {}).get("skip_to")
        if skip is not None:
            return int(skip)
    return None


def _unreferenced_rows(
    topic: Topic, shard: int, state: ShardState, later: list[Commit]
) -> dict[int, int]:
    """Per partition of the shard, the rows of segment objects in the window that no
    sound commit references for it: all a lost tail commit can have appended."""
    referenced: set[tuple[str, int]] = set()
    newest_ms = 0
    for p, part in state.parts.items():
        for seg in part.segments.all():
            referenced.add((seg.object_key, p))
            newest_ms = max(newest_ms, seg.created_ms)
    for commit in later:
        for key, change in (commit.get("parts") or {}).items():
            for raw in [*change.get("append", ()), *change.get("add", ())]:
                referenced.add((raw["object_key"], int(key)))
    since = newest_ms - RECOVER_OBJECT_WINDOW_MS
    rows: dict[int, int] = {}
    for info in topic.store.list_objects("objects"):
        if info.modified_ms < since or not info.key.endswith(".arrow"):
            continue
        raw = topic.store.get_or_none(info.key)
        if raw is None:
            continue
        try:
            directory = partition_directory(raw)
        except (CorruptRecordError, OSError, ValueError):
            continue  # not a readable object: nothing of it can have been committed
        for p, entry in directory.items():
            if topic.info.shard_of(p) == shard and (info.key, p) not in referenced:
                rows[p] = rows.get(p, 0) + int(entry.get("rows", 0))
    for key, directory in _shared_directories(topic, shard, since):
        for p, entry in directory.items():
            if topic.info.shard_of(p) == shard and (f"/{key}", p) not in referenced:
                rows[p] = rows.get(p, 0) + int(entry.get("rows", 0))
    return rows


def _shared_directories(
    topic: Topic, shard: int, since_ms: int
) -> list[tuple[str, dict[int, dict[str, int]]]]:
    """(key, partition directory) of this topic's section in each object of the window that
    the topic shares with others (a broker flush of several topics) and that names ``shard``."""
    store = topic.root.store
    out = []
    for info in store.list_objects(SHARED_OBJECTS_PREFIX):
        if info.modified_ms < since_ms or not info.key.endswith(".arrow"):
            continue
        try:
            sections = read_trailer(store, info.key) or []
            for section in sections:
                if section.topic_id == topic.info.topic_id and shard in section.shards:
                    data = store.get_range(info.key, section.start, section.end)
                    out.append((info.key, partition_directory(data)))
        except (CorruptRecordError, OSError, ValueError):
            continue  # not a readable object: nothing of it can have been committed
    return out


# -- broker journals: a repair version in place of a lost one -------------------------------


def journal_names(root: LogRoot) -> list[str]:
    """The root's broker journals, named ``<broker>/<journal id>`` as ``log check`` does."""
    found = set()
    for info in root.store.list_objects("cluster/journal"):
        folder = info.key.rpartition("/")[0].removeprefix("cluster/journal/")
        if folder.count("/") == 1:
            found.add(folder)
    return sorted(found)


def plan_journal_recovery(root: LogRoot, journal: str) -> RecoveryPlan:
    """The repair of broker journal ``journal`` (``<broker>/<journal id>``): a repair
    version in place of each damaged or missing one (reads only: one listing of the
    journal, one read per version, each topic's shard logs without their tails)."""
    broker, _, journal_id = journal.partition("/")
    if not broker.isdigit() or not journal_id or "/" in journal_id:
        raise InvalidConfigurationError(
            f"--journal {journal!r}: expected BROKER/JOURNAL_ID as `log check` names it"
        )
    ref = JournalRef(int(broker), journal_id)
    names = root.store.list_names(ref.prefix)
    versions = sorted(versions_in(names, ".json"))
    if not versions:
        known = ", ".join(journal_names(root)) or "none"
        raise InvalidConfigurationError(
            f"--journal {journal!r}: no such journal (journals: {known})"
        )
    sound: dict[int, Commit] = {}
    lost: dict[int, str] = {}
    for version in range(versions[0], versions[-1] + 1):
        key = version_key(ref.prefix, version)
        raw = root.store.get_or_none(key) if version in versions else None
        if raw is None:
            lost[version] = "missing"
            continue
        try:
            commit = decode_commit(raw, f"{root.store.url}/{key}")
            if commit["v"] != version:
                raise CorruptRecordError(f"holds version {commit['v']}")
            sound[version] = commit
        except CorruptRecordError as exc:
            lost[version] = f"damaged: {problem_of(exc)}"
    plan = RecoveryPlan(f"journal {journal}", "its sound versions")
    if not lost:
        return plan
    shards: dict[int, dict[str, list[Commit]]] = {v: {} for v in lost}
    given_up: dict[int, dict[str, dict[str, list[list[int]]]]] = {v: {} for v in lost}
    for name in root.list_topics():
        topic = root.topic(name)
        for s in range(topic.shards):
            _repair_shard(topic, s, ref, sound, lost, shards, given_up, plan)
    for version, problem in sorted(lost.items()):
        body: Commit = {
            "v": version,
            "id": uuid.uuid4().hex,
            "ts": now_ms(),
            "kind": "repair",
            "groups": {},
            "shards": shards[version],
            "repair": {"was": problem, "given_up": given_up[version]},
        }
        plan.repairs.append(Repair(version, problem, body))
    return plan


def _repair_shard(
    topic: Topic,
    shard: int,
    ref: JournalRef,
    sound: dict[int, Commit],
    lost: dict[int, str],
    shards: dict[int, dict[str, list[Commit]]],
    given_up: dict[int, dict[str, dict[str, list[list[int]]]]],
    plan: RecoveryPlan,
) -> None:
    """Shard ``shard``'s step in each repair version, if its log leases ``ref`` and has
    not folded past a lost version: its view is the log (not its tail) plus the sound
    versions' steps, in order, as a successor's lease folds them."""
    log = topic.open_shard(shard)
    state: ShardState = MetaLog._load(log)  # the log alone: its tail is what is damaged
    if state.journal != ref:
        return
    codec = ShardCodec()
    key = log.journal_key
    change = shard_repair_change(topic, shard)
    first = state.folded + 1
    last = max([*sound, *lost])
    for version in range(first, last + 1):
        commit = sound.get(version)
        if commit is not None:
            steps = journal_steps([(version, commit)], "shards", key)
            codec.apply_steps(state, ref, steps)
            if commit.get("kind") in ENDING_KINDS or (
                commit.get("kind") == "revoke" and key in (commit.get("revoked") or ())
            ):
                return  # nothing of the shard follows in this journal
            continue
        if version not in lost:
            continue  # pruned below the journal's first version
        later_versions = [(v, sound[v]) for v in sorted(sound) if v > version]
        later = [step for _, step in journal_steps(later_versions, "shards", key)]
        body = change(state, version, later)
        moved: dict[int, list[list[int]]] = body.pop("given_up", {})
        if not body.get("parts"):
            continue
        body["ts"] = now_ms()
        shards[version][key] = [body]
        given_up[version][f"{topic.name}/{shard}"] = {str(p): r for p, r in moved.items()}
        for p, ranges in moved.items():
            plan.given_up.setdefault(f"{topic.name}/{p}", []).extend((a, b) for a, b in ranges)
        codec.apply_steps(state, ref, [[version, body]])


def execute_journal_recovery(root: LogRoot, journal: str, plan: RecoveryPlan) -> None:
    """Write the plan's repair versions: a damaged one overwritten in one put, a missing
    one created (create-only: if a writer took it first, nothing more is changed and the
    error says to plan again).  This process's cached versions of the journal are dropped."""
    broker, _, journal_id = journal.partition("/")
    ref = JournalRef(int(broker), journal_id)
    _write_repairs(
        root.store, lambda v: version_key(ref.prefix, v), plan.repairs, f"journal {journal}"
    )
    forget_journal(root.store, ref)
