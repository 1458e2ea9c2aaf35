"""A broker's journal (format 3, docs/architecture.md "Storage format 3"): one log per
broker and journal id, one commit per flush, whatever it holds.

``cluster/journal/<broker>/<journal id>/<v:020d>.json`` are create-only, checksummed
commits in the envelope every log commit shares (:func:`metalog.encode_commit`), read
one version at a time: a journal has no snapshots and no listing; a reader knows where
to start (a log's folded position) and probes the next version.  Kinds: ``flush``
(``{"groups": {group: [change, ...]}, "txns": {transactional id: [change, ...]},
"shards": {shard key: [change, ...]}}``: the steps a flush journalled, in order; a
shard's change is exactly the body a format-2 shard commit would have had; ``txns`` only
when it holds any),
``seal`` (written by another process taking over what the journal leased: nothing
follows it, and the writer stops at once) and ``close`` (a graceful stop).

A journal id is fresh for every journal a broker starts (at start and after a seal),
so a writer never appends behind a seal and two processes never write one journal.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

from sparklog.clock import now_ms
from sparklog.errors import CommitStateUnknownError, NotCoordinatorError, SparklogError
from sparklog.retry import is_retriable, retrying
from sparklog.storage.documents import version_key
from sparklog.storage.metalog import Commit, decode_commit, encode_commit
from sparklog.storage.objectstore import ObjectStore

log = logging.getLogger("sparklog.storage.journal")

#: commit kinds after which a journal holds nothing more
ENDING_KINDS = frozenset({"seal", "close"})


class JournalSealedError(NotCoordinatorError):
    """The journal was sealed by another process: nothing more is journalled in it.

    Retriable: the caller's coordinator (or this broker, in a fresh journal) takes
    the work again.
    """


class JournalRef(NamedTuple):
    """Which journal: the broker that writes it and the journal's id."""

    broker: int
    journal: str

    @property
    def prefix(self) -> str:
        return f"cluster/journal/{self.broker}/{self.journal}"

    def to_json(self) -> list[Any]:
        return [self.broker, self.journal]

    @classmethod
    def from_json(cls, raw: Any) -> JournalRef | None:
        if not raw:
            return None
        broker, journal = raw
        return cls(int(broker), str(journal))


class Journal:
    """Reads and writes one journal's versions (thread-safe for readers)."""

    def __init__(self, store: ObjectStore, ref: JournalRef) -> None:
        self.store = store
        self.ref = ref

    def key(self, version: int) -> str:
        return version_key(self.ref.prefix, version)

    def read(self, version: int) -> Commit | None:
        """Version ``version``, or None if it was never written (or is pruned)."""
        raw = self.store.get_or_none(self.key(version))
        if raw is None:
            return None
        return decode_commit(raw, f"{self.store.url}/{self.key(version)}")

    def listed_after(self, version: int) -> int | None:
        """The first existing version after ``version`` (a listing; None: none).

        Pruning deletes a prefix of versions and never the newest, so past the first
        existing version the journal is contiguous to its end: only a reader whose
        start was pruned pays this listing to find where the journal continues.
        """
        found = [
            int(stem)
            for stem in (
                name.removesuffix(".json") for name in self.store.list_names(self.ref.prefix)
            )
            if stem.isdigit() and int(stem) > version
        ]
        return min(found) if found else None

    def read_from(self, first: int) -> Iterator[tuple[int, Commit]]:
        """Versions from ``first`` (or the first existing one after it) to the end; an
        ending version (seal or close) is yielded and ends the walk."""
        version: int | None = first
        commit = self.read(first)
        if commit is None:
            version = self.listed_after(first)
            commit = None if version is None else self.read(version)
        while version is not None and commit is not None:
            yield version, commit
            if commit.get("kind") in ENDING_KINDS:
                return
            version += 1
            commit = self.read(version)

    def create(self, version: int, body: Commit) -> bool:
        """Create ``version`` holding ``body``; False if the version exists already."""
        return self.store.create(self.key(version), encode_commit({**body, "v": version}))

    def seal(
        self, first: int, by: str, shards: list[str] | None = None
    ) -> tuple[list[tuple[int, Commit]], int]:
        """End the journal (or, with ``shards``, the journalling of those shards in it:
        a ``revoke``): its versions from ``first`` to its end, and the version of the
        seal or revoke (created here, or the end found).

        Create-only: if the writer's own append takes the version first, it is read
        and the seal goes after it, so every version the writer created before the
        seal is among those returned, and the writer's later appends fail (a revoke:
        its later appends leave the revoked shards out).
        """
        read: list[tuple[int, Commit]] = []
        version = first
        if not self.store.exists(self.key(first)):
            version = self.listed_after(first) or first
        kind = "seal" if shards is None else "revoke"
        while True:
            commit = self.read(version)
            if commit is None:
                body: Commit = {"kind": kind, "by": by, "ts": now_ms(), "id": uuid.uuid4().hex}
                if shards is not None:
                    body["revoked"] = shards
                if self.create(version, body):
                    log.info(
                        "sealed journal" if shards is None else "revoked shards in journal",
                        extra={"journal": self.ref.prefix, "version": version, "by": by},
                    )
                    return read, version
                continue  # the writer took it: read it
            if commit.get("kind") in ENDING_KINDS or _revokes(commit, shards):
                return read, version
            read.append((version, commit))
            version += 1


def _revokes(commit: Commit, shards: list[str] | None) -> bool:
    """Whether ``commit`` is a revoke of every shard in ``shards``."""
    if shards is None or commit.get("kind") != "revoke":
        return False
    return set(shards) <= set(commit.get("revoked") or ())


@dataclass
class _Pending:
    """One flush's worth of steps being gathered, and who waits for it."""

    #: section ("groups", "txns") -> key -> the key's changes
    keyed: dict[str, dict[str, list[Commit]]] = field(default_factory=dict)
    shards: dict[str, list[Commit]] = field(default_factory=dict)
    #: a writer waits for this flush at once (records: the produce path lingered already)
    urgent: bool = False
    done: threading.Event = field(default_factory=threading.Event)
    version: int = -1
    error: BaseException | None = None
    #: shards whose steps were left out: revoked in this journal by another writer
    revoked: set[str] = field(default_factory=set)


class JournalCommit(NamedTuple):
    """Where a journal commit landed, and the shards of it that were revoked (left out)."""

    ref: JournalRef
    version: int
    revoked: frozenset[str]


class JournalWriter:
    """A broker's journal writer: steps from many threads, one journal commit per flush.

    ``write_step(section, key, change)`` blocks until the flush holding it is committed (the
    acknowledgement point) and returns that version.  A flush happens at once when the
    journal was idle for ``flush_interval_ms``, else at most ``flush_interval_ms``
    after the previous one, gathering every step submitted meanwhile.  A flush that
    finds its version taken by a seal fails its steps with :class:`JournalSealedError`
    and starts a fresh journal; ``on_sealed`` is told which journal ended.
    """

    def __init__(
        self,
        store: ObjectStore,
        broker_id: int,
        *,
        flush_interval_ms: int,
        on_sealed: Callable[[JournalRef], None] | None = None,
    ) -> None:
        self.store = store
        self.broker_id = broker_id
        self.flush_interval_ms = flush_interval_ms
        self.on_sealed = on_sealed
        self._cond = threading.Condition()
        self._pending = _Pending()
        self._flushing = False
        self._last_flush = 0.0
        self._closed = False
        self.journal = self._fresh()
        self._next = 0
        #: monotonic time the current journal started
        self.started = time.monotonic()
        #: journal commits written (for tests and metrics)
        self.commits = 0
        #: this writer's journals that were rotated away (their steps are folded first)
        self.retired: set[JournalRef] = set()
        #: shard steps journalled and not yet folded: shard key -> [(journal, version,
        #: change), ...] (a rotated journal's stay until folded; a sealed one's are dropped:
        #: the sealer folds them)
        self._unfolded: dict[str, list[tuple[JournalRef, int, Commit]]] = {}
        #: monotonic time of each shard's oldest unfolded step
        self._unfolded_since: dict[str, float] = {}
        #: shards revoked in our journal by another writer, not leased again since
        self._revoked: set[str] = set()

    def _fresh(self) -> Journal:
        return Journal(self.store, JournalRef(self.broker_id, uuid.uuid4().hex))

    @property
    def ref(self) -> JournalRef:
        return self.journal.ref

    @property
    def next_version(self) -> int:
        with self._cond:
            return self._next

    def write_step(
        self, section: Literal["groups", "txns"], key: str, change: Commit, *, urgent: bool = False
    ) -> tuple[JournalRef, int]:
        """Journal one change of ``key`` (a group, a transactional id) in ``section``;
        (journal, version) once it is committed.  ``urgent``: the flush holding it
        starts at once (with every step gathered meanwhile) instead of waiting out
        ``flush_interval_ms``, as a flush of records does."""
        with self._cond:
            if self._closed:
                raise JournalSealedError("the broker's journal is closed (stopping)")
            pending = self._pending
            ref = self.journal.ref
            pending.keyed.setdefault(section, {}).setdefault(key, []).append(change)
            pending.urgent = pending.urgent or urgent
        self._flush_when_due(pending)
        pending.done.wait()
        if pending.error is not None:
            raise pending.error
        return ref, pending.version

    def write_shards(self, changes: Mapping[str, Commit]) -> JournalCommit:
        """Journal one change of each shard in ``changes`` in ONE journal commit, at once
        (the caller lingered already); (journal, version) once it is committed.

        The steps are remembered as unfolded (:meth:`unfolded`) until a fold takes them.
        """
        with self._cond:
            if self._closed:
                raise JournalSealedError("the broker's journal is closed (stopping)")
            pending = self._pending
            ref = self.journal.ref
            for key, change in changes.items():
                pending.shards.setdefault(key, []).append(change)
            pending.urgent = True
        self._flush_when_due(pending)
        pending.done.wait()
        if pending.error is not None:
            raise pending.error
        return JournalCommit(ref, pending.version, frozenset(pending.revoked))

    def unfolded(self, key: str, ref: JournalRef) -> list[list[Any]]:
        """Shard ``key``'s steps in journal ``ref`` not yet folded: ``[[version, change]]``."""
        with self._cond:
            return [[v, c] for r, v, c in self._unfolded.get(key, ()) if r == ref]

    def unfolded_keys(self, ref: JournalRef | None = None) -> list[str]:
        """Shards with unfolded steps (in journal ``ref``, if given)."""
        with self._cond:
            return [
                key
                for key, steps in self._unfolded.items()
                if any(ref is None or r == ref for r, _, _ in steps)
            ]

    def fold_due_keys(self, fold_interval_ms: int) -> list[str]:
        """Shards whose oldest unfolded step was journalled ``fold_interval_ms`` ago."""
        now = time.monotonic()
        with self._cond:
            return [
                key
                for key, since in self._unfolded_since.items()
                if (now - since) * 1000 >= fold_interval_ms
            ]

    def folded(self, key: str, ref: JournalRef, through: int) -> None:
        """Forget shard ``key``'s steps of ``ref`` up to version ``through``: a fold
        holds them (or the journal was sealed: its sealer folds them)."""
        with self._cond:
            self._forget_unfolded(key, ref, through)

    def _forget_unfolded(self, key: str, ref: JournalRef, through: int = 1 << 62) -> None:
        """Drop shard ``key``'s steps of ``ref`` up to ``through`` (the lock held)."""
        left = [s for s in self._unfolded.get(key, ()) if s[0] != ref or s[1] > through]
        if left:
            self._unfolded[key] = left
        else:
            self._unfolded.pop(key, None)
            self._unfolded_since.pop(key, None)

    def _flush_when_due(self, pending: _Pending) -> None:
        """Become the flusher of ``pending`` if nobody is, once the interval has passed."""
        with self._cond:
            while True:
                if pending.done.is_set() or self._pending is not pending:
                    return  # flushed by another thread, or being flushed now
                if not self._flushing:
                    if pending.urgent:
                        break
                    wait_s = self._last_flush + self.flush_interval_ms / 1000 - time.monotonic()
                    if wait_s <= 0:
                        break
                    self._cond.wait(wait_s)
                else:
                    self._cond.wait()
            self._flushing = True
            self._pending = _Pending()
            version = self._next
            journal = self.journal
        try:
            body: Commit = {"kind": "flush", "ts": now_ms(), "groups": {}}
            body.update(pending.keyed)
            if pending.shards:
                body["shards"] = pending.shards
            body["id"] = uuid.uuid4().hex
            written = True
            while not self._create(journal, version, body):
                found = journal.read(version)
                if found is not None and found.get("id") == body["id"]:
                    break  # ours: the create's answer was lost
                if found is None or found.get("kind") != "revoke":
                    raise JournalSealedError(
                        f"journal {journal.ref.prefix} was sealed at version {version}"
                    )
                self._note_revoke(journal.ref, found, pending, body)
                version += 1  # the revoke's shards left out, the rest goes on
                if not any(body.get(s) for s in ("shards", "groups", "txns")):
                    written = False  # nothing left to write: the version stays free
                    break
            pending.version = version
            if written:
                note_written(self.store, journal.ref, version, body)
            with self._cond:
                self._next = version + 1 if written else version
                self.commits += 1
                for key, changes in pending.shards.items():
                    self._unfolded.setdefault(key, []).extend(
                        (journal.ref, version, c) for c in changes
                    )
                    self._unfolded_since.setdefault(key, time.monotonic())
        except JournalSealedError as exc:
            pending.error = exc
            self._restart(journal)
        except SparklogError as exc:
            pending.error = exc
        except Exception as exc:
            log.exception("journal commit failed")
            pending.error = SparklogError(f"journal commit failed: {exc}")
        finally:
            with self._cond:
                self._flushing = False
                self._last_flush = time.monotonic()
                self._cond.notify_all()
            pending.done.set()

    def _create(self, journal: Journal, version: int, body: Commit) -> bool:
        """Create ``version``; a lost answer or an outage is retried (a create is
        create-only: a retry of one that landed finds the version, and the caller
        reads it: ours by its id)."""
        return retrying(
            lambda: journal.create(version, body),
            deadline_ms=self.store.commit_deadline_ms,
            retry_if=lambda exc: isinstance(exc, CommitStateUnknownError) or is_retriable(exc),
        )

    def _note_revoke(
        self, ref: JournalRef, revoke: Commit, pending: _Pending, body: Commit
    ) -> None:
        """Another writer revoked shards in our journal: leave their steps out of this
        commit, forget their unfolded steps (the revoker folded them) and lease them
        again before journalling them (:meth:`is_revoked`)."""
        revoked = set(revoke.get("revoked") or ())
        shards: dict[str, list[Commit]] = body.get("shards") or {}
        pending.revoked |= revoked & set(shards)
        for key in revoked:
            shards.pop(key, None)
        if not shards:
            body.pop("shards", None)
        with self._cond:
            self._revoked |= revoked
            for key in revoked:
                self._forget_unfolded(key, ref)

    def is_revoked(self, key: str) -> bool:
        """Whether shard ``key`` was revoked in our journal since we last leased it."""
        with self._cond:
            return key in self._revoked

    def leased(self, key: str) -> None:
        """Shard ``key`` was leased again (its revoke is behind us)."""
        with self._cond:
            self._revoked.discard(key)

    def _restart(self, sealed: Journal) -> None:
        log.warning(
            "journal sealed by another process; starting a fresh one",
            extra={"journal": sealed.ref.prefix},
        )
        with self._cond:
            if self.journal is sealed:
                self.journal = self._fresh()
                self._next = 0
                self.started = time.monotonic()
                # the sealer folded (or will fold) what the sealed journal holds
                for key in list(self._unfolded):
                    self._forget_unfolded(key, sealed.ref)
        if self.on_sealed is not None:
            self.on_sealed(sealed.ref)

    def lease(self) -> Commit:
        """A lease commit's body naming this journal from its next version."""
        return {"kind": "lease", "journal": self.ref.to_json(), "from": self.next_version}

    def rotate(self) -> JournalRef:
        """Start a fresh journal (the old one's steps stay readable until it is folded
        and deleted); the old journal."""
        with self._cond:
            while self._flushing:
                self._cond.wait()
            old = self.journal
            self.journal = self._fresh()
            self._next = 0
            self.started = time.monotonic()
            self.retired.add(old.ref)
            return old.ref

    def close(self) -> None:
        """Refuse further writes (the owner folds, then ends the journal)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()


#: journal versions read by this process (they never change): (store, journal) -> versions
_versions_cache: OrderedDict[tuple[str, JournalRef], dict[int, Commit]] = OrderedDict()
_versions_cache_lock = threading.Lock()
_JOURNALS_CACHED = 16
_VERSIONS_CACHED = 4096


#: journals this process writes: (store, journal) -> the last version it wrote (kept with
#: the journal's cached versions).  A reader in the process (a broker's own fetch reader)
#: finds the end of such a journal here instead of probing the next version: a revoke or
#: seal another process puts after it changes the shard or group log too, which the
#: reader probes first.
_written_heads: dict[tuple[str, JournalRef], int] = {}


def _cached_versions(key: tuple[str, JournalRef]) -> dict[int, Commit]:
    """The cached versions of one journal (caller holds the cache lock), made recent."""
    cached = _versions_cache.setdefault(key, {})
    _versions_cache.move_to_end(key)
    while len(_versions_cache) > _JOURNALS_CACHED:
        evicted, _ = _versions_cache.popitem(last=False)
        _written_heads.pop(evicted, None)
    return cached


def note_written(store: ObjectStore, ref: JournalRef, version: int, body: Commit) -> None:
    """This process wrote ``version`` of journal ``ref`` (``body`` as stored): readers in
    the process take it from memory and probe no further."""
    key = (store.url, ref)
    with _versions_cache_lock:
        _cached_versions(key)[version] = {**body, "v": version}
        _written_heads[key] = max(version, _written_heads.get(key, -1))


def forget_journal(store: ObjectStore, ref: JournalRef) -> None:
    """Drop this process's cached versions of journal ``ref`` (``log recover`` replaced
    some): readers in the process read it from the store again."""
    key = (store.url, ref)
    with _versions_cache_lock:
        _versions_cache.pop(key, None)
        _written_heads.pop(key, None)


def read_versions(store: ObjectStore, ref: JournalRef, first: int) -> list[tuple[int, Commit]]:
    """Journal ``ref``'s versions from ``first`` to its end (the first missing version, or
    an ending one, included), each read once per process: readers of groups and shards
    of one journal share the reads, and a journal this process writes is read from memory
    (:func:`note_written`)."""
    journal = Journal(store, ref)
    key = (store.url, ref)
    with _versions_cache_lock:
        cached = _cached_versions(key)
    out: list[tuple[int, Commit]] = []
    version = max(first, 0)
    while True:
        commit = cached.get(version)
        if commit is None:
            with _versions_cache_lock:
                head = _written_heads.get(key)
            if head is not None and version > head:
                return out  # past what this process wrote: nothing there to read yet
            commit = journal.read(version)
            if commit is None:
                return out
            with _versions_cache_lock:
                cached[version] = commit
                while len(cached) > _VERSIONS_CACHED:
                    del cached[next(iter(cached))]  # the earliest read (versions mostly rise)
        out.append((version, commit))
        if commit.get("kind") in ENDING_KINDS:
            return out
        version += 1


def journal_steps(
    versions: Iterator[tuple[int, Commit]] | list[tuple[int, Commit]],
    section: Literal["groups", "txns", "shards"],
    key: str,
) -> list[list[Any]]:
    """``[[version, change], ...]``: the changes of group, transactional id or shard ``key`` among
    journal ``versions``, up to a revoke of the shard (the journal holds none of its
    changes after one, until a lease names the journal again)."""
    out: list[list[Any]] = []
    for version, commit in versions:
        if section == "shards" and _revokes(commit, [key]):
            break
        changes: Mapping[str, list[Commit]] = commit.get(section) or {}
        for change in changes.get(key, ()):
            out.append([version, change])
    return out
