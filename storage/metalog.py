"""Checksummed, create-only metadata logs: the engine under shard logs and group logs.

A log is a folder of commits ``<v:020d>.json`` (create-only: whoever creates
version v+1 first wins), snapshots ``<v:020d>.snapshot`` of the full state
every ``snapshot_interval`` commits, and a best-effort hint ``_latest.json``
naming the newest snapshot, so opening a log costs one hint, one snapshot and
at most ``snapshot_interval`` commits, never a listing (except when the hint is
missing or damaged).

Integrity (docs/architecture.md, "Storage format 2"): every commit and snapshot
carries an xxh3 checksum
verified on read; a damaged file is a :class:`CorruptRecordError` naming it,
never a parse error.  A version missing in the middle of a log (a later one
exists) is detected by readers, and writers probe the version after the one
they create, so they never re-use a missing version.

Outcomes: each commit carries a random id.  When a create's answer is lost
(the store raised, or the retry found the key already there), the writer
re-reads the log and recognises its own commit by that id, so a lost race is
told apart from its own earlier success and nothing is applied twice.  A
writer re-reads its view after its backoff sleep, right before retrying
(:func:`sparklog.retry.retrying`), so concurrent committers do not starve.
"""

from __future__ import annotations

import contextlib
import json
import logging
import struct
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar

import xxhash

from sparklog.clock import now_ms
from sparklog.errors import (
    CommitConflictError,
    CommitStateUnknownError,
    CorruptRecordError,
    StoreUnavailableError,
)
from sparklog.retry import LostRace, is_retriable, until_won
from sparklog.storage.documents import (
    encode_document,
    is_enveloped,
    parse_document,
    version_key,
)
from sparklog.storage.objectstore import ObjectStore

log = logging.getLogger(__name__)

DEFAULT_SNAPSHOT_INTERVAL = 32
DEFAULT_COMMIT_ATTEMPTS = 200
#: A view not confirmed for this long re-reads the snapshot hint before trusting
#: "no next version": commits below the newest snapshot may have been pruned.
RELOAD_AFTER_MS = 5 * 60 * 1000
#: Versions past the first missing one a local reader checks (a hole is detected).
LOCAL_LOOKAHEAD = 4
#: How many recent commits a log remembers (in memory) to recognise its own.
RECENT_COMMITS = 64
#: A writer deletes the snapshots it wrote before its newest ``SNAPSHOTS_KEPT`` once they
#: are ``SNAPSHOT_GRACE_MS`` old: a snapshot is the whole state, so an hour of them (the
#: commits' retention) held tens of GB for a busy shard (issue 26's soak).  Readers open
#: the newest; a view still reading an older one's parts gets SnapshotGoneError (retriable:
#: it re-opens).
SNAPSHOTS_KEPT = 2
SNAPSHOT_GRACE_MS = 30_000
HINT_NAME = "_latest.json"
SNAPSHOT_MAGIC = b"SLS2"
#: The trailing magic of an indexed snapshot (see :class:`IndexedSnapshot`).
INDEXED_SNAPSHOT_MAGIC = b"SLI2"
#: How much of a snapshot's end opening reads at once (one request on S3): the
#: header and, usually, each partition's newest chunk.
SNAPSHOT_TAIL_BYTES = 256 * 1024
_TRAILER = struct.Struct("<QQ4s")  # header checksum, header length, magic

Commit = dict[str, Any]


# -- the file formats --------------------------------------------------------------------


def encode_commit(body: Commit) -> bytes:
    """A commit file's bytes: the checksummed document envelope of ``body``."""
    return encode_document(body)


def decode_commit(raw: bytes, where: str) -> Commit:
    """The commit body; CorruptRecordError naming ``where`` for any damage."""
    if not is_enveloped(raw):
        raise CorruptRecordError(
            f"metadata file {where} is damaged: not a sparklog format-2 commit ({len(raw)} bytes)"
        )
    doc = parse_document(raw, f"metadata file {where}")
    if not isinstance(doc.get("v"), int):
        raise CorruptRecordError(f"metadata file {where} is not a commit")
    return doc


def encode_snapshot(payload: bytes) -> bytes:
    """``payload + xxh3-64 (8 bytes LE) + magic``."""
    return payload + struct.pack("<Q", xxhash.xxh3_64_intdigest(payload)) + SNAPSHOT_MAGIC


def decode_snapshot(raw: bytes, where: str) -> memoryview:
    """The snapshot payload (a view, no copy), checksum verified; CorruptRecordError naming
    ``where``."""
    if len(raw) < 12 or raw[-4:] != SNAPSHOT_MAGIC:
        raise CorruptRecordError(
            f"snapshot {where} is damaged: truncated or not a sparklog format-2 snapshot "
            f"({len(raw)} bytes)"
        )
    payload = memoryview(raw)[:-12]
    (expected,) = struct.unpack("<Q", raw[-12:-4])
    if xxhash.xxh3_64_intdigest(payload) != expected:
        raise CorruptRecordError(f"snapshot {where} fails its checksum")
    return payload


def seal_indexed_snapshot(blobs: list[bytes], header: dict[str, Any]) -> bytes:
    """An indexed snapshot: ``blobs``, the JSON ``header``, its xxh3, its length, the magic.

    The header must name each blob by ``[start, end, checksum]`` (see
    :func:`blob_refs`); it is checksummed here.
    """
    data = json.dumps(header, separators=(",", ":")).encode()
    trailer = _TRAILER.pack(xxhash.xxh3_64_intdigest(data), len(data), INDEXED_SNAPSHOT_MAGIC)
    return b"".join([*blobs, data, trailer])


def blob_refs(blobs: list[bytes]) -> list[list[int]]:
    """``[start, end, xxh3]`` of each blob laid out one after the other from byte 0."""
    out, at = [], 0
    for blob in blobs:
        out.append([at, at + len(blob), xxhash.xxh3_64_intdigest(blob)])
        at += len(blob)
    return out


class SnapshotGoneError(StoreUnavailableError):
    """A view's snapshot was pruned before a part of it was read (retriable: the log
    drops its view, and the next look opens the newest snapshot)."""


class IndexedSnapshot:
    """An opened indexed snapshot: its checksummed header, its parts read on demand.

    Layout: ``[blob]* header-json xxh3(header):u64 len(header):u64 b"SLI2"``.
    Opening reads the file's tail (:data:`SNAPSHOT_TAIL_BYTES`, one request),
    which holds the header and the blobs written last; other blobs are read by
    range when asked for.  Every blob carries its own checksum in the header,
    verified on each read: damage in any part that is read is detected, naming
    the file and byte range.
    """

    def __init__(
        self,
        store: ObjectStore,
        key: str,
        where: str,
        tail: bytes,
        size: int,
        on_gone: Callable[[], None],
    ) -> None:
        self.store, self.key, self.where = store, key, where
        self.size = size
        self._tail, self._tail_start = tail, size - len(tail)
        self._on_gone = on_gone
        if len(tail) < _TRAILER.size:
            raise CorruptRecordError(f"snapshot {where} is damaged: truncated ({size} bytes)")
        digest, length, _ = _TRAILER.unpack(tail[-_TRAILER.size :])
        end = size - _TRAILER.size
        if length > end:
            raise CorruptRecordError(f"snapshot {where} is damaged: header length {length}")
        raw = self._bytes(end - length, end)
        if xxhash.xxh3_64_intdigest(raw) != digest:
            raise CorruptRecordError(f"snapshot {where} fails its header checksum")
        try:
            header = json.loads(bytes(raw))
        except (ValueError, UnicodeDecodeError) as exc:
            raise CorruptRecordError(f"snapshot {where} header cannot be parsed: {exc}") from None
        if not isinstance(header, dict):
            raise CorruptRecordError(f"snapshot {where} header is not an object")
        self.header: dict[str, Any] = header
        self.header_start = end - length

    def _bytes(self, start: int, end: int) -> bytes | memoryview:
        if start >= self._tail_start:
            return memoryview(self._tail)[start - self._tail_start : end - self._tail_start]
        try:
            return self.store.get_range(self.key, start, end).to_pybytes()
        except FileNotFoundError:
            self._on_gone()
            raise SnapshotGoneError(
                f"snapshot {self.where} was pruned before this view read bytes {start}-{end}; "
                "the view is re-opened from the newest snapshot"
            ) from None

    def read(self, ref: list[int]) -> bytes | memoryview:
        """The blob ``[start, end, checksum]`` names, checksum verified."""
        start, end, digest = (int(v) for v in ref)
        if not 0 <= start <= end <= self.header_start:
            raise CorruptRecordError(f"snapshot {self.where} names bytes {start}-{end} it lacks")
        data = self._bytes(start, end)
        if len(data) != end - start or xxhash.xxh3_64_intdigest(data) != digest:
            raise CorruptRecordError(
                f"snapshot {self.where} bytes {start}-{end} fail their checksum"
            )
        return data


# -- the engine --------------------------------------------------------------------------


class LogStateBase:
    """What every log state holds besides its own content."""

    version: int
    commits_since_snapshot: int


S = TypeVar("S", bound=LogStateBase)


class StateCodec(Protocol[S]):
    """How one kind of log builds, advances and snapshots its state."""

    def empty(self) -> S: ...

    def apply(self, state: S, commit: Commit) -> None: ...

    def snapshot(self, state: S) -> bytes: ...

    def restore(self, payload: memoryview, where: str) -> S: ...


class IndexedStateCodec(StateCodec[S], Protocol[S]):
    """A codec whose ``snapshot`` returns a sealed indexed snapshot (read on demand)."""

    indexed: bool

    def restore_indexed(self, snapshot: IndexedSnapshot) -> S: ...


class _LostRace(LostRace):
    """Another writer created the version first (retried after a re-read)."""


class _OutcomeUnknown(CommitConflictError):
    """The create's answer was lost; resolved by re-reading (retried after a re-read)."""


class MetaLog(Generic[S]):
    """One create-only log of commits and snapshots.  Not thread-safe: lock around it."""

    def __init__(
        self,
        store: ObjectStore,
        prefix: str,
        codec: StateCodec[S],
        *,
        name: str,
        snapshot_interval: int = DEFAULT_SNAPSHOT_INTERVAL,
        commit_attempts: int = DEFAULT_COMMIT_ATTEMPTS,
        commit_deadline_ms: int | None = None,
        clock_ms: Callable[[], int] = now_ms,
    ) -> None:
        self.store = store
        self.prefix = prefix
        self.codec = codec
        self.name = name
        self.snapshot_interval = snapshot_interval
        self.commit_attempts = commit_attempts
        #: how long one commit retries (lost races, outages) before it raises; None: the
        #: store's storage option ``commit_deadline_ms`` (default 120000)
        self.commit_deadline_ms = (
            store.commit_deadline_ms if commit_deadline_ms is None else commit_deadline_ms
        )
        self.clock_ms = clock_ms
        self._state: S | None = None
        self._confirmed = 0.0  # monotonic time the view was last seen at the head
        self._recent: OrderedDict[str, Commit] = OrderedDict()
        #: the head of our view is a commit this writer created (nothing read since): the
        #: probe for a hole before the next create can be skipped (see :meth:`commit`)
        self._own_head = False
        #: (version, written at ms) of the snapshots this writer wrote and has not deleted
        self._written_snapshots: list[tuple[int, int]] = []
        # Handles are shared by threads (e.g. views of several partitions of a shard):
        # loading, refreshing and committing are serialised.
        self._lock = threading.RLock()

    def key(self, version: int, suffix: str = ".json") -> str:
        return version_key(self.prefix, version, suffix)

    def where(self, key: str) -> str:
        return f"{self.store.url}/{key}"

    # -- reading -----------------------------------------------------------
    @property
    def state(self) -> S:
        state = self._state
        if state is None:
            with self._lock:
                if self._state is None:
                    self._state = self._load()
                state = self._state
        return state

    @property
    def loaded_state(self) -> S | None:
        """The state as last read, or None if the log was never opened: no I/O."""
        return self._state

    def refresh(self, max_staleness_ms: int = 0) -> S:
        """Catch up with commits made since the last look: one probe when nothing changed.

        With ``max_staleness_ms``, a view confirmed at the head more recently
        than that is returned as is (no request): readers of many partitions of
        one shard share one probe, so an idle reader's cost is per shard.
        """
        if (
            max_staleness_ms > 0
            and self._state is not None
            and (time.monotonic() - self._confirmed) * 1000 < max_staleness_ms
        ):
            return self._state
        with self._lock:
            return self._refresh()

    def _refresh(self) -> S:
        if self._state is None:
            return self.state
        if (time.monotonic() - self._confirmed) * 1000 > RELOAD_AFTER_MS:
            snapshot = self._hinted_snapshot()
            if snapshot is not None and snapshot > self._state.version:
                self._state = self._load()
                return self._state
        self._read_forward(self._state, first_chunk=1)
        return self._state

    def _hinted_snapshot(self) -> int | None:
        """The hint's snapshot version; None if absent or damaged (it is only a hint)."""
        try:
            raw = self.store.get_or_none(f"{self.prefix}/{HINT_NAME}")
            if raw is None:
                return None
            version = json.loads(raw)["snapshot"]
            return version if isinstance(version, int) and version >= 0 else None
        except (ValueError, KeyError, TypeError, UnicodeDecodeError):
            log.warning("log %s: ignoring a damaged %s hint", self.name, HINT_NAME)
            return None

    def _load(self) -> S:
        snapshot = self._hinted_snapshot()
        state: S | None = None
        if snapshot is not None:
            state = self._load_snapshot(snapshot)
        if state is None:
            names = self.store.list_names(self.prefix)
            if not names:
                # Nothing at all under the log: it is empty as of this listing (a commit made
                # since is found by the next probe, as one made after any read is).  Reading
                # its first versions too cost every never-written log (most of an idle
                # cluster's topics) five more GETs per load (issue 37: a broker's start).
                self._confirmed = time.monotonic()
                return self.codec.empty()
            found = [
                int(n.split(".")[0])
                for n in names
                if n.endswith(".snapshot") and n.split(".")[0].isdigit()
            ]
            for version in sorted(found, reverse=True):
                state = self._load_snapshot(version)
                if state is not None:
                    break
        if state is None:
            state = self.codec.empty()
        self._read_forward(state, first_chunk=4)
        return state

    def invalidate(self) -> None:
        """Drop the view: the next look re-opens the log from its newest snapshot."""
        with self._lock:
            self._state = None
            self._own_head = False

    def open_snapshot(self, version: int) -> S | None:
        """The state in snapshot ``version`` (None if absent), apart from this handle's
        view; CorruptRecordError naming the file if it is damaged."""
        return self._load_snapshot(version)

    def _load_snapshot(self, version: int) -> S | None:
        key = self.key(version, ".snapshot")
        found = self.store.get_tail(key, SNAPSHOT_TAIL_BYTES)  # bytes, never a memory map
        if found is None:
            return None
        tail, size = found
        where = self.where(key)
        if tail.endswith(INDEXED_SNAPSHOT_MAGIC) and getattr(self.codec, "indexed", False):
            codec: Any = self.codec
            state: S = codec.restore_indexed(
                IndexedSnapshot(self.store, key, where, tail, size, self.invalidate)
            )
        else:
            raw = tail if len(tail) == size else self.store.get_or_none(key)
            if raw is None:
                return None
            state = self.codec.restore(decode_snapshot(raw, where), where)
        if state.version != version:
            raise CorruptRecordError(f"snapshot {where} holds version {state.version}")
        state.commits_since_snapshot = 0
        return state

    def _read_forward(self, state: S, first_chunk: int) -> None:
        """Apply the commits after ``state.version``.

        Reads chunks of versions at once (concurrently on S3), each with one
        version of lookahead, so a missing version followed by an existing one
        is detected; an idle probe (``first_chunk=1``) reads just the next key.
        """
        if not self.store.is_remote:
            self._read_forward_one_by_one(state, lookahead=first_chunk > 1)
            return
        chunk, lookahead = first_chunk, first_chunk > 1
        while True:
            wanted = chunk + (1 if lookahead else 0)
            keys = [self.key(state.version + i) for i in range(1, wanted + 1)]
            found = self.store.get_many(keys)
            # the lookahead too: found, it is applied (reading it again in the next chunk
            # cost a log of exactly ``chunk`` commits 17 more GETs); missing, it is the head
            for i, key in enumerate(keys):
                raw = found.get(key)
                if raw is None:
                    later = next((k for k in keys[i + 1 :] if found.get(k) is not None), None)
                    if later is not None:
                        raise self._hole(key, later)
                    self._confirmed = time.monotonic()
                    return
                self._apply(state, self._decode(raw, key, state.version + 1))
            chunk, lookahead = min(max(chunk, 2) * 4, 256), True

    def _read_forward_one_by_one(self, state: S, lookahead: bool) -> None:
        """:meth:`_read_forward` where a read costs no round trip (local, memory): one key
        at a time, so no read goes past the head except the lookahead."""
        while True:
            key = self.key(state.version + 1)
            raw = self.store.get_many([key])[key]
            if raw is None:
                for ahead in range(2, 2 + LOCAL_LOOKAHEAD if lookahead else 0):
                    later = self.key(state.version + ahead)
                    if self.store.get_many([later])[later] is not None:
                        raise self._hole(key, later)
                self._confirmed = time.monotonic()
                return
            self._apply(state, self._decode(raw, key, state.version + 1))
            lookahead = True

    def _hole(self, missing: str, later: str) -> CorruptRecordError:
        return CorruptRecordError(
            f"log {self.name}: commit {self.where(missing)} is missing while a later "
            f"one ({later.rsplit('/', 1)[-1]}) exists; the log needs repair"
        )

    def _decode(self, raw: bytes, key: str, version: int) -> Commit:
        commit = decode_commit(raw, self.where(key))
        if commit["v"] != version:
            raise CorruptRecordError(
                f"metadata file {self.where(key)} holds version {commit['v']}, not {version}"
            )
        return commit

    def _apply(self, state: S, commit: Commit) -> None:
        self._own_head = False
        try:
            self.codec.apply(state, commit)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise CorruptRecordError(
                f"metadata file {self.where(self.key(commit['v']))} has an unexpected "
                f"shape: {type(exc).__name__}: {exc}"
            ) from None
        state.version = commit["v"]
        state.commits_since_snapshot += 1
        commit_id = commit.get("id")
        if isinstance(commit_id, str):
            self._recent[commit_id] = commit
            while len(self._recent) > RECENT_COMMITS:
                self._recent.popitem(last=False)

    # -- writing -----------------------------------------------------------
    def preparing_commit(self) -> contextlib.AbstractContextManager[None]:
        """A block in which the next commit's temp file is made beside the block's work.

        For a writer with work to do before it commits (writing the object the
        commit names): locally, the commit then finds its file made.
        """
        return self.store.preparing_create(self.key(0))  # any version's key names the folder

    def commit(self, build: Callable[[S], Commit | None]) -> Commit | None:
        """Create the next commit from ``build(state)``; re-read and rebuild on a lost race.

        ``build`` returns None when nothing must be written; it may raise to
        refuse (fencing, sequence errors).  Returns the commit that landed.
        """
        tried: set[str] = set()

        def attempt() -> Commit | None:
            state = self.state
            for commit_id in tried:
                mine = self._recent.get(commit_id)
                if mine is not None:  # an earlier attempt landed after all
                    return mine
            body = build(state)
            if body is None:
                return None
            version = state.version + 1
            body["v"] = version
            body["id"] = uuid.uuid4().hex
            body.setdefault("ts", self.clock_ms())
            data = encode_commit(body)
            # Never re-use a missing version: if the one after ours exists, our
            # view is stale (or the log has a hole); the re-read tells which.  A writer
            # whose head is its own last commit skips the probe: a later version can
            # exist only if another writer won the next one, and then our create fails.
            if not self._own_head and self.store.get_or_none(self.key(version + 1)) is not None:
                if not self.store.exists(self.key(version)):
                    raise CorruptRecordError(
                        f"log {self.name}: commit {self.where(self.key(version))} is missing "
                        "while a later one exists; the log needs repair (not re-using it)"
                    )
                raise _LostRace(f"log {self.name}: version {version} is behind the head")
            tried.add(body["id"])
            try:
                created = self.store.create(self.key(version), data)
            except (CommitStateUnknownError, StoreUnavailableError) as exc:
                raise _OutcomeUnknown(
                    f"log {self.name}: the outcome of creating version {version} is unknown: {exc}"
                ) from exc
            if not created:
                raise _LostRace(f"log {self.name}: version {version} was created by another")
            self._apply(state, body)
            self._own_head = True
            self._confirmed = time.monotonic()
            if state.commits_since_snapshot >= self.snapshot_interval:
                self._write_snapshot(state)
            return body

        try:
            with self._lock:
                # the first attempt runs at once; each retry backs off (full jitter), then
                # re-reads right before it (never a stale view), so committers do not starve
                return until_won(
                    attempt,
                    what=f"log {self.name}: commit",
                    attempts_max=self.commit_attempts + 1,
                    deadline_ms=self.commit_deadline_ms,
                    backoff_initial_ms=1,
                    backoff_max_ms=200,
                    retry_if=is_retriable,
                    before_retry=self._refresh_before_retry,
                )
        except _OutcomeUnknown as exc:
            raise CommitStateUnknownError(str(exc)) from exc

    def _refresh_before_retry(self, exc: BaseException) -> None:
        if isinstance(exc, SnapshotGoneError):
            self.invalidate()
        self.refresh()

    def _write_snapshot(self, state: S) -> None:
        key = self.key(state.version, ".snapshot")
        try:
            data = self.codec.snapshot(state)
            if not getattr(self.codec, "indexed", False):
                data = encode_snapshot(data)
            self.store.create(key, data)
            self.store.put(
                f"{self.prefix}/{HINT_NAME}", json.dumps({"snapshot": state.version}).encode()
            )
            state.commits_since_snapshot = 0
        except (StoreUnavailableError, CommitStateUnknownError) as exc:
            # (a SnapshotGoneError has dropped the view: the next look re-opens it)
            log.warning("log %s: snapshot at version %d failed: %s", self.name, state.version, exc)
            return
        self._written_snapshots.append((state.version, self.clock_ms()))
        self._delete_old_snapshots()

    def _delete_old_snapshots(self) -> None:
        """Delete this writer's snapshots older than its newest :data:`SNAPSHOTS_KEPT` once
        they are :data:`SNAPSHOT_GRACE_MS` old (best effort: :func:`prune_log` sweeps the
        rest, and any other writer's, with the commits)."""
        now = self.clock_ms()
        written = self._written_snapshots
        while len(written) > SNAPSHOTS_KEPT and now - written[0][1] >= SNAPSHOT_GRACE_MS:
            version, _ = written.pop(0)
            try:
                self.store.delete(self.key(version, ".snapshot"))
            except StoreUnavailableError as exc:
                log.warning("log %s: old snapshot %d not deleted: %s", self.name, version, exc)
                return


def prune_log(
    store: ObjectStore,
    prefix: str,
    *,
    retention_ms: int,
    now: int | None = None,
    dry_run: bool = False,
    waiting: list[tuple[str, int]] | None = None,
) -> list[str]:
    """Delete commits and snapshots older than the newest snapshot by ``retention_ms``.

    Keeps the newest snapshot and every commit after it, so the log's file
    count stays bounded.  Returns the keys deleted (or that would be); the keys
    below the snapshot kept only for their age go into ``waiting``, each with the
    time (ms) it comes of age, so a caller need not list the log again before then.
    """
    now = now_ms() if now is None else now
    objects = store.list_objects(prefix)
    snapshots = [
        int(o.key.rsplit("/", 1)[-1].split(".")[0])
        for o in objects
        if o.key.endswith(".snapshot") and o.key.rsplit("/", 1)[-1].split(".")[0].isdigit()
    ]
    if not snapshots:
        return []
    newest = max(snapshots)
    doomed = []
    for obj in objects:
        stem, _, ext = obj.key.rsplit("/", 1)[-1].partition(".")
        if not stem.isdigit() or ext not in ("json", "snapshot"):
            continue
        version = int(stem)
        below = version <= newest if ext == "json" else version < newest
        if below and now - obj.modified_ms >= retention_ms:
            doomed.append(obj.key)
        elif below and waiting is not None:
            waiting.append((obj.key, obj.modified_ms + retention_ms))
    if not dry_run:
        for key in doomed:
            store.delete(key)
    return doomed
