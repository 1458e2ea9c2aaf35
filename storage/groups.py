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

import dataclasses
import hashlib
import json
import re
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NotRequired, TypedDict, cast

from sparklog.clock import now_ms
from sparklog.errors import CorruptRecordError, IllegalGenerationError, InvalidGroupIdError
from sparklog.storage.journal import JournalRef
from sparklog.storage.journalled_logs import (
    JournalledLogs,
    LeasedState,
    apply_journal_steps,
    apply_leased_commit,
)
from sparklog.storage.metalog import DEFAULT_SNAPSHOT_INTERVAL, Commit, MetaLog
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


class PendingTxnOffsets(TypedDict):
    """A transactional producer's offsets of one group, waiting for its transaction's end."""

    epoch: int
    #: the transaction's number (the coordinator's ``n``): the end of that one resolves them
    txn: int
    offsets: dict[str, OffsetEntry]


@dataclass
class GroupLogState(LeasedState):
    """A group log at one version: the newest generation and the committed offsets.

    Under a journal lease (format 3), ``journal`` names the broker journal that holds
    the group's newer changes and ``folded`` the last journal version folded into the
    log: a reader applies the journal's changes after it (``GroupStore.fetch``).
    """

    version: int = -1
    generation: int = -1
    offsets: dict[str, OffsetEntry] = field(default_factory=dict)
    commits_since_snapshot: int = 0
    journal: JournalRef | None = None
    folded: int = -1
    #: producer id -> the offsets its open transaction committed (TxnOffsetCommit), not
    #: yet the group's: its transaction's end moves them to ``offsets`` or drops them
    pending: dict[str, PendingTxnOffsets] = field(default_factory=dict)

    def overlaid(self, steps: Sequence[Sequence[Any]]) -> GroupLogState:
        """A copy of this state with the journal ``steps`` after ``folded`` applied."""
        view = dataclasses.replace(self, offsets=dict(self.offsets), pending=dict(self.pending))
        apply_steps(view, self.journal, steps)
        return view


def apply_change(state: GroupLogState, change: Mapping[str, Any]) -> None:
    """One change (a commit's or a journal step's): generation, offsets, deletions, a
    transaction's offsets held back and their resolution at its end."""
    generation = change.get("generation")
    if isinstance(generation, int):
        state.generation = max(state.generation, generation)
    for key, entry in (change.get("offsets") or {}).items():
        state.offsets[key] = cast(OffsetEntry, dict(entry))
    for key in change.get("deleted") or ():
        state.offsets.pop(key, None)
    held = change.get("txn_offsets")
    if held:
        pid = str(held["pid"])
        before = state.pending.get(pid)
        kept = before["offsets"] if before and before["txn"] == held["txn"] else {}
        state.pending[pid] = {
            "epoch": int(held["epoch"]),
            "txn": int(held["txn"]),
            "offsets": {**kept, **held["offsets"]},
        }
    ended = change.get("txn_end")
    if ended:
        pid = str(ended["pid"])
        open_offsets = state.pending.get(pid)
        if open_offsets is not None and open_offsets["txn"] <= int(ended["txn"]):
            del state.pending[pid]
            if ended["commit"] and open_offsets["txn"] == int(ended["txn"]):
                for key, entry in open_offsets["offsets"].items():
                    state.offsets[key] = cast(OffsetEntry, dict(entry))


def apply_steps(
    state: GroupLogState, journal: JournalRef | None, steps: Sequence[Sequence[Any]]
) -> None:
    """Journal ``steps`` (``[version, change]``, in order) of the lease's journal that
    are past ``state.folded``; a fold repeated (a lost answer, the next leader) is a no-op."""
    apply_journal_steps(state, journal, steps, apply_change)


def _partition_of(key: str) -> TopicPartition:
    """The partition an offsets key (``topic:partition``) names."""
    topic, _, partition = key.rpartition(":")
    return TopicPartition(topic, int(partition))


class GroupCodec:
    """Applies group commits; snapshots are the whole state as JSON."""

    def empty(self) -> GroupLogState:
        return GroupLogState()

    def apply(self, state: GroupLogState, commit: Commit) -> None:
        apply_leased_commit(state, commit, apply_change)

    def snapshot(self, state: GroupLogState) -> bytes:
        doc: dict[str, Any] = {
            "version": state.version,
            "generation": state.generation,
            "offsets": state.offsets,
        }
        if state.journal is not None:
            doc["journal"] = state.journal.to_json()
            doc["folded"] = state.folded
        if state.pending:
            doc["pending"] = state.pending
        return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()

    def restore(self, payload: memoryview, where: str) -> GroupLogState:
        try:
            doc = json.loads(bytes(payload))
            return GroupLogState(
                version=int(doc["version"]),
                generation=int(doc["generation"]),
                offsets=dict(doc["offsets"]),
                journal=JournalRef.from_json(doc.get("journal")),
                folded=int(doc.get("folded", -1)),
                pending=dict(doc.get("pending", {})),
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


class GroupStore(JournalledLogs[GroupLogState]):
    """Committed offsets of every consumer group under one root (thread-safe).

    In a broker with a journal (:meth:`use_journal`), the offset commits of the groups
    it coordinates are journal steps (format 3: one journal commit per flush, whatever
    the number of groups), folded into each group's log every ``fold_interval_ms``
    (:meth:`fold_due`); readers anywhere read the log and then the journal its lease
    names (docs/architecture.md, "Storage format 3";
    :class:`~sparklog.storage.journalled_logs.JournalledLogs` is the machine).
    """

    def __init__(
        self, store: ObjectStore, *, snapshot_interval: int = DEFAULT_SNAPSHOT_INTERVAL
    ) -> None:
        super().__init__(store, "groups", self._open_group_log)
        self.snapshot_interval = snapshot_interval

    def _open_group_log(self, group: str) -> MetaLog[GroupLogState]:
        key_name = group_key_name(group)
        if key_name.startswith(_HASHED_PREFIX):
            # a hashed name cannot be decoded: listings read the id from here
            self.store.create(f"groups/{key_name}/{GROUP_ID_OBJECT}", group.encode())
        return GroupLog(self.store, group, self.snapshot_interval)

    def pending_groups(self) -> int:
        """Groups with journalled steps not yet folded."""
        return self.pending_keys()

    # -- groups -------------------------------------------------------------------------

    def log(self, group: str) -> tuple[MetaLog[GroupLogState], threading.Lock]:
        """The group's (cached) log and the lock to hold while using it."""
        validate_group_name(group)
        return super().log(group)

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
        same create-only step that writes it (or, journalled, under the group's lock
        of its only writer).
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

        def needed(state: GroupLogState) -> bool:
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
            return not unchanged or newer

        change: Commit = {"kind": "offsets", "offsets": entries}
        if checked:
            change["generation"] = generation
            change["member"] = member_id
        self._change_if(group, change, needed)

    def commit_transactional(
        self,
        group: str,
        producer_id: int,
        producer_epoch: int,
        txn: int,
        offsets: Mapping[TopicPartition, tuple[int, str]],
        *,
        topic_ids: Mapping[str, str] | None = None,
    ) -> None:
        """Hold ``offsets`` ((offset, metadata) per partition) of producer ``producer_id``'s
        transaction number ``txn`` in the group's log (Kafka's TxnOffsetCommit): they
        become the group's at the transaction's commit (:meth:`end_transaction`), and
        until its end OffsetFetch with ``require_stable`` calls the partitions unstable.
        A journal step of the group's coordinator, like an offset commit: no write of
        its own there."""
        stamp = now_ms()
        entries = {
            f"{topic}:{partition}": {
                "offset": int(offset),
                "metadata": metadata or "",
                "commit_ms": stamp,
                "topic_id": (topic_ids or {}).get(topic, ""),
            }
            for (topic, partition), (offset, metadata) in offsets.items()
        }
        change: Commit = {
            "kind": "txn_offsets",
            "txn_offsets": {
                "pid": producer_id,
                "epoch": producer_epoch,
                "txn": txn,
                "offsets": entries,
            },
        }
        self._change_if(group, change, lambda state: True, urgent=True)

    def end_transaction(self, group: str, producer_id: int, txn: int, *, commit: bool) -> bool:
        """The end of producer ``producer_id``'s transaction number ``txn`` in the group:
        its held offsets become the group's (``commit``) or are dropped; an older
        transaction's left behind are dropped too.  Writes nothing, and returns False,
        if the producer holds none."""
        change: Commit = {
            "kind": "txn_end",
            "txn_end": {"pid": producer_id, "txn": txn, "commit": commit},
        }
        held = [False]

        def needed(state: GroupLogState) -> bool:
            pending = state.pending.get(str(producer_id))
            held[0] = pending is not None and pending["txn"] <= txn
            return held[0]

        self._change_if(group, change, needed, urgent=True)
        return held[0]

    def _change_if(
        self,
        group: str,
        change: Commit,
        needed: Callable[[GroupLogState], bool],
        *,
        urgent: bool = False,
    ) -> None:
        """``change``, if ``needed`` by the group's state: journalled where this process
        coordinates the group, else committed to its log.  ``urgent`` (a transaction's
        offsets and its end, which the transaction waits for in turn, as for its own
        steps): the journal commit starts at once instead of up to the journal's flush
        interval later; an offset commit waits for the next flush."""
        self._change(group, lambda state: dict(change) if needed(state) else None, urgent=urgent)

    def set_generation(self, group: str, generation: int) -> None:
        """Record that ``generation`` started: commits of older generations are refused."""

        def build(state: GroupLogState) -> Commit | None:
            if generation <= state.generation:
                return None
            return {"kind": "generation", "generation": generation}

        self._direct_commit(group, build)

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

        self._direct_commit(group, build)
        return sorted(dropped)

    def generation(self, group: str) -> int:
        """The newest generation the group's log has recorded (-1: none)."""
        return self._view(group).generation

    def fetch(self, group: str) -> dict[TopicPartition, CommittedOffset]:
        return self.fetch_with_pending(group)[0]

    def fetch_with_pending(
        self, group: str
    ) -> tuple[dict[TopicPartition, CommittedOffset], frozenset[TopicPartition]]:
        """The group's committed offsets, and the partitions an open transaction holds
        offsets of (Kafka's "unstable" offsets), from one read of the group."""
        state = self._view(group)
        out: dict[TopicPartition, CommittedOffset] = {}
        for key, entry in state.offsets.items():
            out[_partition_of(key)] = CommittedOffset(
                entry["offset"],
                entry.get("metadata", ""),
                entry.get("commit_ms", 0),
                entry.get("topic_id", ""),
            )
        held = frozenset(
            _partition_of(key) for pending in state.pending.values() for key in pending["offsets"]
        )
        return out, held

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
        self._forget(group)
        self.store.delete_prefix(group_key(group))
