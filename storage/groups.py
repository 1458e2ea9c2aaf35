"""Consumer groups' committed offsets: each group's own log (like Kafka's ``__consumer_offsets``).

``groups/<group>/log/<v:020d>.json`` are create-only, checksummed commits (see
:mod:`sparklog.storage.metalog`), with snapshots every few commits, so an offset
commit is one append (O(1): no listing, no rewrite of the whole offset map) and
opening a group costs a hint, a snapshot and a few commits.

A commit carries the committing member's generation and is accepted in the same
create-only step that checks it against the log's generation: the coordinator
records each new generation in the log when a rebalance starts it, so a zombie
member of an older generation can never commit after the rebalance (its create
either loses to the generation commit, or re-reads it and is refused).
Membership itself is the coordinator's business (sparklog.groups).
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import NotRequired, TypedDict, cast

from sparklog.clock import now_ms
from sparklog.errors import CorruptRecordError, IllegalGenerationError, InvalidGroupIdError
from sparklog.storage.metalog import DEFAULT_SNAPSHOT_INTERVAL, Commit, LogStateBase, MetaLog
from sparklog.storage.objectstore import ObjectStore
from sparklog.topic_partition import TopicPartition

#: characters a group id keeps unchanged in its storage key (the ids accepted before
#: any id was: such an id's key is the id itself, so existing groups stay readable)
_PLAIN_KEY_RE = re.compile(r"^[a-zA-Z0-9._-]+$")
_SAFE_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
#: the longest key folder name: the old id limit, inside a file name's 255 bytes
MAX_KEY_NAME = 249
#: the object beside a hashed group's logs that holds its id (see :func:`group_key_name`)
GROUP_ID_OBJECT = "group-id"
_HASHED_PREFIX = "!H"


def validate_group_name(name: str) -> str:
    """``name`` if it is a group id: any non-empty string, as Kafka accepts."""
    if not isinstance(name, str) or not name:
        raise InvalidGroupIdError(f"invalid group id {name!r}; accepted: any non-empty string")
    return name


def group_key_name(group: str) -> str:
    """The folder name under ``groups/`` that stores ``group`` (reversible, S3- and file-safe).

    Kafka accepts any non-empty group id; keys must stay file names on a local root
    and plain keys on S3.  Ids of ``[a-zA-Z0-9._-]`` (the ids accepted before) are
    their own name, so existing groups keep their keys.  Any other character, and
    ``.``/``..`` as a whole, is written ``!XX`` per UTF-8 byte (``!`` is never in a
    plain name, so the escaping is reversible).  A name longer than
    :data:`MAX_KEY_NAME` is ``!H`` + the id's SHA-256, and the id itself is stored
    beside the logs (:data:`GROUP_ID_OBJECT`) for listings.
    """
    validate_group_name(group)
    if _PLAIN_KEY_RE.match(group) and group not in (".", ".."):
        name = group
    else:
        name = "".join(
            ch if ch in _SAFE_CHARS and group not in (".", "..") else _escape(ch) for ch in group
        )
    if len(name) > MAX_KEY_NAME:
        name = _HASHED_PREFIX + hashlib.sha256(group.encode("utf-8")).hexdigest()
    return name


def _escape(ch: str) -> str:
    return "".join(f"!{byte:02X}" for byte in ch.encode("utf-8"))


def group_key(group: str) -> str:
    """The storage prefix of ``group``'s objects: ``groups/<group_key_name(group)>``."""
    return f"groups/{group_key_name(group)}"


def decode_group_key_name(name: str) -> str | None:
    """The group id a folder name stores, or None for a hashed name (read its id object)."""
    if name.startswith(_HASHED_PREFIX):
        return None
    if "!" not in name:
        return name
    raw = bytearray()
    i = 0
    while i < len(name):
        if name[i] == "!":
            raw.append(int(name[i + 1 : i + 3], 16))
            i += 3
        else:
            raw.extend(name[i].encode("ascii"))
            i += 1
    return raw.decode("utf-8")


@dataclass(frozen=True)
class CommittedOffset:
    """A group's committed position in one partition: the next offset to read."""

    offset: int
    metadata: str
    commit_ms: int
    topic_id: str = ""


class OffsetEntry(TypedDict):
    """One partition's committed offset as a group log stores it (key ``topic:partition``)."""

    offset: int
    metadata: str
    commit_ms: int
    #: the topic's id at commit time ('' in logs written before ids were recorded)
    topic_id: NotRequired[str]


@dataclass
class GroupLogState(LogStateBase):
    """A group log at one version: the newest generation and the committed offsets."""

    version: int = -1
    generation: int = -1
    offsets: dict[str, OffsetEntry] = field(default_factory=dict)
    commits_since_snapshot: int = 0


class GroupCodec:
    """Applies group commits; snapshots are the whole state as JSON."""

    def empty(self) -> GroupLogState:
        return GroupLogState()

    def apply(self, state: GroupLogState, commit: Commit) -> None:
        generation = commit.get("generation")
        if isinstance(generation, int):
            state.generation = max(state.generation, generation)
        for key, entry in (commit.get("offsets") or {}).items():
            state.offsets[key] = cast(OffsetEntry, dict(entry))
        for key in commit.get("deleted") or ():
            state.offsets.pop(key, None)

    def snapshot(self, state: GroupLogState) -> bytes:
        return json.dumps(
            {"version": state.version, "generation": state.generation, "offsets": state.offsets},
            sort_keys=True,
            separators=(",", ":"),
        ).encode()

    def restore(self, payload: memoryview, where: str) -> GroupLogState:
        try:
            doc = json.loads(bytes(payload))
            return GroupLogState(
                version=int(doc["version"]),
                generation=int(doc["generation"]),
                offsets=dict(doc["offsets"]),
            )
        except (ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
            raise CorruptRecordError(f"snapshot {where} cannot be decoded: {exc}") from None


class GroupLog(MetaLog[GroupLogState]):
    """One group's log.  Not thread-safe: :class:`GroupStore` locks around it."""

    def __init__(
        self, store: ObjectStore, group: str, snapshot_interval: int = DEFAULT_SNAPSHOT_INTERVAL
    ) -> None:
        super().__init__(
            store,
            f"{group_key(group)}/log",
            GroupCodec(),
            name=f"group {group}",
            snapshot_interval=snapshot_interval,
        )
        self.group = group


class GroupStore:
    """Committed offsets of every consumer group under one root (thread-safe)."""

    def __init__(
        self, store: ObjectStore, *, snapshot_interval: int = DEFAULT_SNAPSHOT_INTERVAL
    ) -> None:
        self.store = store
        self.snapshot_interval = snapshot_interval
        self._lock = threading.Lock()
        self._logs: dict[str, tuple[GroupLog, threading.Lock]] = {}

    def log(self, group: str) -> tuple[GroupLog, threading.Lock]:
        """The group's (cached) log and the lock to hold while using it."""
        validate_group_name(group)
        with self._lock:
            found = self._logs.get(group)
            if found is None:
                key_name = group_key_name(group)
                if key_name.startswith(_HASHED_PREFIX):
                    # a hashed name cannot be decoded: listings read the id from here
                    self.store.create(f"groups/{key_name}/{GROUP_ID_OBJECT}", group.encode())
                found = (GroupLog(self.store, group, self.snapshot_interval), threading.Lock())
                self._logs[group] = found
            return found

    def commit(
        self,
        group: str,
        offsets: Mapping[TopicPartition, int],
        *,
        metadata: str = "",
        topic_ids: Mapping[str, str] | None = None,
        generation: int | None = None,
        member_id: str = "",
    ) -> None:
        """Record ``offsets`` (next offset to consume) for the group's partitions.

        With ``generation`` (>= 0), the commit is refused with
        IllegalGenerationError unless it is the log's newest generation, in the
        same create-only step that writes it.
        """
        stamp = now_ms()
        entries: dict[str, OffsetEntry] = {
            f"{topic}:{partition}": {
                "offset": int(offset),
                "metadata": metadata,
                "commit_ms": stamp,
                "topic_id": (topic_ids or {}).get(topic, ""),
            }
            for (topic, partition), offset in offsets.items()
        }
        checked = generation is not None and generation >= 0

        def build(state: GroupLogState) -> Commit | None:
            if checked and generation is not None and generation < state.generation:
                raise IllegalGenerationError(
                    f"generation {generation} of member {member_id!r} is not group {group!r}'s "
                    f"current generation {state.generation}; offsets not committed",
                    generation=state.generation,
                )
            unchanged = all(
                k in state.offsets
                and state.offsets[k].get("offset") == v["offset"]
                and state.offsets[k].get("metadata") == v["metadata"]
                for k, v in entries.items()
            )
            newer = checked and generation is not None and generation > state.generation
            if unchanged and not newer:
                return None
            commit: Commit = {"kind": "offsets", "offsets": entries}
            if checked:
                commit["generation"] = generation
                commit["member"] = member_id
            return commit

        log, lock = self.log(group)
        with lock:
            log.commit(build)

    def set_generation(self, group: str, generation: int) -> None:
        """Record that ``generation`` started: commits of older generations are refused."""

        def build(state: GroupLogState) -> Commit | None:
            if generation <= state.generation:
                return None
            return {"kind": "generation", "generation": generation}

        log, lock = self.log(group)
        with lock:
            log.commit(build)

    def delete_offsets(
        self,
        group: str,
        partitions: Iterable[tuple[str, int]],
        *,
        generation: int | None = None,
    ) -> list[TopicPartition]:
        """Drop the group's committed offsets of ``partitions`` (Kafka's OffsetDelete).

        One commit in the group's create-only log lists the dropped keys; the
        offsets before it stay in older commits and snapshots until the log is
        pruned, but no reader sees them any more.  With ``generation``, the drop is
        refused with IllegalGenerationError if a newer generation started since the
        caller checked the group's members (in the same create-only step).  Returns
        the partitions that had an offset (sorted); a group with none of them
        commits nothing.
        """
        wanted = sorted({TopicPartition(str(t), int(p)) for t, p in partitions})
        keys = {f"{tp.topic}:{tp.partition}": tp for tp in wanted}
        dropped: list[TopicPartition] = []

        def build(state: GroupLogState) -> Commit | None:
            if generation is not None and generation < state.generation:
                raise IllegalGenerationError(
                    f"group {group!r} started generation {state.generation} after generation "
                    f"{generation} was checked; offsets not deleted",
                    generation=state.generation,
                )
            present = [key for key in keys if key in state.offsets]
            dropped[:] = [keys[key] for key in present]
            if not present:
                return None
            return {"kind": "delete_offsets", "deleted": present}

        log, lock = self.log(group)
        with lock:
            log.commit(build)
        return sorted(dropped)

    def generation(self, group: str) -> int:
        """The newest generation the group's log has recorded (-1: none)."""
        log, lock = self.log(group)
        with lock:
            return log.refresh().generation

    def fetch(self, group: str) -> dict[TopicPartition, CommittedOffset]:
        log, lock = self.log(group)
        with lock:
            offsets = dict(log.refresh().offsets)
        out: dict[TopicPartition, CommittedOffset] = {}
        for key, entry in offsets.items():
            topic, _, partition = key.rpartition(":")
            out[TopicPartition(topic, int(partition))] = CommittedOffset(
                entry["offset"],
                entry.get("metadata", ""),
                entry.get("commit_ms", 0),
                entry.get("topic_id", ""),
            )
        return out

    def list_groups(self) -> list[str]:
        """Every group id with objects under ``groups/`` (decoded from the key names)."""
        out = []
        for name in self.store.list_names("groups"):
            group = decode_group_key_name(name)
            if group is None:
                data = self.store.get_or_none(f"groups/{name}/{GROUP_ID_OBJECT}")
                if data is None:
                    continue  # a hashed group whose id object is not written yet
                group = bytes(data).decode("utf-8")
            out.append(group)
        return sorted(out)

    def delete(self, group: str) -> None:
        validate_group_name(group)
        with self._lock:
            self._logs.pop(group, None)
        self.store.delete_prefix(group_key(group))
