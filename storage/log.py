"""Shard logs and the partition views over them (docs/architecture.md, "Storage format 2").

A topic's partitions share ``commit.shards`` shard logs; partition p belongs to
shard ``p % shards``.  Shard s's commits are
``shards/<s:05d>/log/<v:020d>.json`` (create-only, checksummed; see
:mod:`sparklog.storage.metalog`).  One commit appends segments for any number
of the shard's partitions, each at its own high watermark, so a flush or a
Spark micro-batch lands in all of them or in none, and one flush costs one
commit per shard touched whatever the partition count.

The shard state holds, per partition, the live segments, high watermark, log
start offset and idempotent producers (id -> epoch, last sequence, recent
batches, last write time), plus the shard's leader epoch and the Spark sink's
``(app id, version)`` markers.  Producers idle longer than
``producer.id.expiration.ms`` and markers older than ``marker.retention.ms``
are dropped by the commit that notices them, so the state stays bounded.

Three modules, one job each (Kafka's ``UnifiedLog`` / ``ProducerStateManager``
seams): :mod:`sparklog.storage.producer_state` (idempotent producers' state and
the one dedup rule), :mod:`sparklog.storage.shard_codec` (the shard state, how a
commit changes it, snapshots) and this one (appending to a shard log, and the
partition views over it).  ``ProducerBatch``, ``duplicate_of`` and ``LogState``
stay importable from here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import pyarrow as pa

from sparklog.clock import now_ms
from sparklog.errors import (
    CorruptRecordError,
    FencedLeaderEpochError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceNumberError,
    SparklogError,
    StagedObjectExpiredError,
)
from sparklog.storage import txn_markers
from sparklog.storage.journal import (
    Journal,
    JournalRef,
    JournalSealedError,
    JournalWriter,
    journal_steps,
    read_versions,
)
from sparklog.storage.metalog import (
    DEFAULT_COMMIT_ATTEMPTS,
    DEFAULT_SNAPSHOT_INTERVAL,
    Commit,
    MetaLog,
    SnapshotGoneError,
)
from sparklog.storage.objectstore import ObjectStore
from sparklog.storage.producer_state import (
    DEFAULT_PRODUCER_EXPIRATION_MS,
    ProducerBatch,
    duplicate_of,
)
from sparklog.storage.records import OFFSET_FIELD, with_offset_column
from sparklog.storage.segments import Segment, read_segment
from sparklog.storage.shard_codec import LogState, PartState, ShardCodec, ShardState

#: A staged object older than this is never committed, and GC never deletes an
#: unreferenced object younger than it (its grace period must be at least this):
#: generous, so a Spark batch whose tasks run for an hour still commits.
STAGED_OBJECT_MAX_AGE_MS = 2 * 60 * 60 * 1000
DEFAULT_MARKER_RETENTION_MS = 7 * 86_400_000
#: How often (at most) a writer looks for expired producers and markers.
EXPIRY_CHECK_MS = 60_000
#: Readers of several partitions of one shard within this window share one probe.
READ_PROBE_SHARE_MS = 100
#: An idle (long-polling) reader probes each shard log at most this often.
IDLE_PROBE_INTERVAL_MS = 250

__all__ = [
    "DEFAULT_COMMIT_ATTEMPTS",
    "DEFAULT_SNAPSHOT_INTERVAL",
    "IDLE_PROBE_INTERVAL_MS",
    "READ_PROBE_SHARE_MS",
    "STAGED_OBJECT_MAX_AGE_MS",
    "AppendResult",
    "LogState",
    "MirrorPositionMovedError",
    "PartitionLog",
    "ProducerBatch",
    "ShardLog",
    "duplicate_of",
]
SchemaResolver = Callable[[str], pa.Schema]


class MirrorPositionMovedError(SparklogError, code="MIRROR_POSITION_MOVED"):
    """A mirror's planned copy no longer starts at its partition's end (another writer
    moved it): plan again from the log's head.  Not retried by the commit loop."""


_T = TypeVar("_T")


@dataclass(frozen=True)
class AppendResult:
    """Where an append landed.  ``duplicate`` means it had been committed before."""

    base_offset: int
    record_count: int
    version: int
    duplicate: bool = False

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.record_count - 1


# -- the shard log --------------------------------------------------------------------------


class ShardLog(MetaLog[ShardState]):
    """One shard's log: commits for many partitions.  Not thread-safe: lock around it."""

    def __init__(
        self,
        store: ObjectStore,
        shard: int,
        *,
        topic: str = "",
        snapshot_interval: int = DEFAULT_SNAPSHOT_INTERVAL,
        commit_attempts: int = DEFAULT_COMMIT_ATTEMPTS,
        producer_expiration_ms: int = DEFAULT_PRODUCER_EXPIRATION_MS,
        marker_retention_ms: int = DEFAULT_MARKER_RETENTION_MS,
        clock_ms: Callable[[], int] = now_ms,
        topic_id: str = "",
    ) -> None:
        codec = ShardCodec()
        super().__init__(
            store,
            f"shards/{shard:05d}/log",
            codec,
            name=f"{topic}/shard-{shard}",
            snapshot_interval=snapshot_interval,
            commit_attempts=commit_attempts,
            clock_ms=clock_ms,
        )
        self.shard = shard
        self.topic = topic
        self.producer_expiration_ms = producer_expiration_ms
        self.marker_retention_ms = marker_retention_ms
        self._expiry_checked = 0
        self._shard_codec = codec
        #: the shard's name in a broker journal's ``shards`` (format 3)
        self.journal_key = f"{topic_id or topic}/{shard}"
        #: the broker journal this handle writes the shard's changes to, once it holds the
        #: shard's lease (format 3; None: every change is a commit of the log)
        self._writer: JournalWriter | None = None

    def __repr__(self) -> str:
        return f"ShardLog({self.topic!r}, {self.shard})"

    # -- format 3: the broker journal ---------------------------------------------------
    #
    # A leader's handle (:meth:`use_journal`) journals every change of the shard as a
    # step of its broker's journal, after a ``lease`` commit naming that journal; its
    # steps are folded into the log by :meth:`fold`.  Every other handle reads the log
    # and then the leased journal's versions after the folded position (the "tail"); a
    # direct commit that assigns offsets revokes the shard in the leased journal first and
    # ends the lease, so the leader's later steps of it are left out and nothing
    # acknowledged is lost.

    def use_journal(self, writer: JournalWriter | None) -> None:
        """Journal this handle's changes in ``writer``'s journal while it holds the
        shard's lease (taken by :meth:`stage` and :meth:`bump_epoch`, the leader's
        calls); None: commit them to the log."""
        with self._lock:
            self._writer = writer

    @property
    def _journal_store(self) -> ObjectStore:
        """The root's store: journals live under the root, not the topic."""
        return self.store.locate("/cluster")[0]

    def _steps(self, versions: list[tuple[int, Commit]]) -> list[list[Any]]:
        """This shard's ``[[version, change]]`` among journal ``versions``."""
        return journal_steps(versions, "shards", self.journal_key)

    def _holds_lease(self, state: ShardState) -> bool:
        writer = self._writer
        return (
            writer is not None
            and state.journal == writer.ref
            and not writer.is_revoked(self.journal_key)
        )

    def _load(self) -> ShardState:
        state = super()._load()
        self._read_tail(state)
        return state

    def _refresh(self) -> ShardState:
        state = super()._refresh()
        self._read_tail(state)
        return state

    def _read_tail(self, state: ShardState) -> None:
        """Apply the leased journal's steps after ``state.folded``: from the store for a
        reader; from the writer's memory when the lease is ours (the handle that
        journalled them has them already, a handle opened since, after a config change
        re-opened the topic, has not)."""
        ref = state.journal
        if ref is None:
            return
        if self._holds_lease(state):
            assert self._writer is not None
            self._shard_codec.apply_steps(state, ref, self._writer.unfolded(self.journal_key, ref))
            return
        versions = read_versions(self._journal_store, ref, state.folded + 1)
        self._shard_codec.apply_steps(state, ref, self._steps(versions))

    def _ensure_lease(self) -> None:
        if not self._holds_lease(self.state):
            self._lease()

    def _lease(self) -> None:
        """Name our writer's journal in the log (bumping the leader epoch), folding first
        what the previously leased journal holds for the shard: another writer's is
        revoked for the shard first (nothing more of the shard is acknowledged from it)."""
        writer = self._writer
        assert writer is not None
        if writer.is_revoked(self.journal_key):
            self.refresh()  # the revoker's commit, if it landed

        def build(state: ShardState) -> Commit | None:
            if self._holds_lease(state):
                return None
            commit = {**writer.lease(), "epoch": state.leader_epoch + 1}
            old = state.journal
            if old is None:
                return commit
            if old in writer.retired:  # rotated away: its steps are in our memory
                steps = writer.unfolded(self.journal_key, old)
            else:
                if old != writer.ref:  # another writer's, alive or dead
                    read, _ = Journal(self._journal_store, old).seal(
                        state.folded + 1, by=f"broker {writer.broker_id}", shards=[self.journal_key]
                    )
                    self._shard_codec.apply_steps(state, old, self._steps(read))
                # (ours, revoked: its steps up to the revoke, in case the revoker died)
                versions = read_versions(self._journal_store, old, state.log_folded + 1)
                steps = self._steps(versions)
            # every step the log itself lacks (a view may hold some read from the tail)
            steps = [step for step in steps if step[0] > state.log_folded]
            if steps:
                commit["fold"] = {"journal": old.to_json(), "steps": steps}
            return commit

        before = self.state.journal
        MetaLog.commit(self, build)
        writer.leased(self.journal_key)
        if before is not None and before in writer.retired:
            writer.folded(self.journal_key, before, 1 << 62)  # all of it: the lease folded it

    def fold(self) -> bool:
        """Fold our journalled steps into the log (one commit); whether any were folded."""
        writer = self._writer
        if writer is None:
            return False
        with self._lock:
            ref = self.state.journal
            if ref is None:
                return False
            steps = writer.unfolded(self.journal_key, ref)
            if not steps:
                return False

            def build(state: ShardState) -> Commit | None:
                if state.journal != ref:
                    return None  # sealed and folded by another writer meanwhile
                return {"kind": "fold", "fold": {"journal": ref.to_json(), "steps": steps}}

            landed = MetaLog.commit(self, build)
            writer.folded(self.journal_key, ref, steps[-1][0])
            return landed is not None

    def stage(self, build: Callable[[ShardState], Commit | None]) -> Commit | None:
        """The body ``build`` gives against this leader's view, not yet written (the
        produce path journals a flush's bodies of all shards in one journal commit, then
        calls :meth:`journalled`).  Leases the shard first if needed."""
        with self._lock:
            self._ensure_lease()
            body = build(self.state)
            if body is not None:
                body.setdefault("ts", self.clock_ms())
            return body

    def journalled(self, ref: JournalRef, version: int, body: Commit) -> Commit:
        """Apply a staged body journalled at ``version`` of ``ref`` to our view."""
        with self._lock:
            state = self.state
            if state.journal != ref:
                # the journal was sealed (and restarted) between the lease and this step:
                # it is in a journal the log does not name, so it is not committed
                assert self._writer is not None
                self._writer.folded(self.journal_key, ref, version)
                raise JournalSealedError(
                    f"shard {self.name}: the broker's journal changed; write again"
                )
            self._shard_codec.apply_steps(state, ref, [[version, body]])
            return {**body, "v": state.version}

    def commit(self, build: Callable[[ShardState], Commit | None]) -> Commit | None:
        """Commit ``build``'s change: as a journal step while this handle holds the lease,
        else to the log (revoking the shard in a leased journal first when the change
        assigns offsets)."""
        writer = self._writer
        if writer is not None and self._holds_lease(self.state):
            body = self.stage(build)
            if body is None:
                return None
            landed = writer.write_shards({self.journal_key: body})
            if self.journal_key in landed.revoked:
                raise JournalSealedError(f"shard {self.name}: revoked by another writer")
            return self.journalled(landed.ref, landed.version, body)
        return MetaLog.commit(self, self._direct(build))

    def _direct(
        self, build: Callable[[ShardState], Commit | None]
    ) -> Callable[[ShardState], Commit | None]:
        """``build`` as a direct commit of a leased shard: it carries a fold of the
        journal's steps its view holds; a change that assigns offsets ends the lease
        first: the shard is revoked in the leased journal (nothing more of it is
        acknowledged from there), its steps up to the revoke are applied to the view the
        change is built on, and the commit folds them."""

        def wrapped(state: ShardState) -> Commit | None:
            body = build(state)
            ref = state.journal
            if body is None or ref is None:
                return body
            if not _assigns_offsets(body):
                # built on the journal's steps this view read: they land first, for every
                # reader (the lease stays; a fold the leader repeats changes nothing)
                if state.folded > state.log_folded:
                    versions = read_versions(self._journal_store, ref, state.log_folded + 1)
                    steps = [s for s in self._steps(versions) if s[0] <= state.folded]
                    if steps:
                        body["fold"] = {"journal": ref.to_json(), "steps": steps}
                return body
            read, _ = Journal(self._journal_store, ref).seal(
                state.folded + 1, by=f"a direct writer of {self.name}", shards=[self.journal_key]
            )
            self._shard_codec.apply_steps(state, ref, self._steps(read))
            body = build(state)  # on the journal's last word
            if body is None:
                return None
            versions = read_versions(self._journal_store, ref, state.log_folded + 1)
            steps = self._steps(versions)
            body["fold"] = {"journal": ref.to_json(), "steps": steps}
            body["journal"] = None
            return body

        return wrapped

    @property
    def leader_epoch(self) -> int:
        return self.state.leader_epoch

    def _expiry(self, state: ShardState, now: int) -> dict[str, int]:
        """The expiry a commit should carry now (empty: nothing to expire or checked lately)."""
        if now - self._expiry_checked < EXPIRY_CHECK_MS:
            return {}
        self._expiry_checked = now
        out = {}
        producers_before = now - self.producer_expiration_ms
        if any(
            v.get("ts", 0) < producers_before
            for part in state.parts.values()
            for v in part.producers.values()
        ):
            out["producers_before"] = producers_before
        markers_before = now - self.marker_retention_ms
        if any(v.get("ts", 0) < markers_before for v in state.markers.values()):
            out["markers_before"] = markers_before
        return out

    def _check_epoch(self, state: ShardState, leader_epoch: int | None) -> None:
        if leader_epoch is not None and leader_epoch < state.leader_epoch:
            raise FencedLeaderEpochError(
                f"shard {self.name}: leader epoch {leader_epoch} is fenced by epoch "
                f"{state.leader_epoch}"
            )

    def duplicate_of(self, partition: int, batch: ProducerBatch) -> int | None:
        """The dedup rule against this log's view (see :func:`duplicate_of`).

        A sequence error against a possibly stale view is checked again after a
        refresh, so only the log's head can refuse a batch.
        """
        where = f"{self.topic}-{partition}"
        try:
            return _duplicate_in(self.state.parts.get(partition), batch, where)
        except OutOfOrderSequenceNumberError:
            return _duplicate_in(self.refresh().parts.get(partition), batch, where)

    def append(
        self,
        appends: Mapping[int, Sequence[Segment]],
        *,
        leader_epoch: int | None = None,
        producers: Mapping[int, ProducerBatch] | None = None,
        txn: tuple[str, int] | None = None,
        staged_max_age_ms: int = STAGED_OBJECT_MAX_AGE_MS,
        transactions: Mapping[int, int] | None = None,
    ) -> dict[int, AppendResult]:
        """Commit staged segments of many partitions atomically, each at its high watermark.

        ``leader_epoch`` fences a deposed leader.  ``producers`` (per partition)
        deduplicates an idempotent producer's retries: a partition whose batch
        was committed before is answered from the log and not appended again.
        ``txn=(app_id, version)`` makes a repeated commit of the same marker a
        no-op for the whole shard (the Spark sink's exactly-once).
        ``transactions`` (partition -> transaction number) marks a partition's
        records as the open transaction of its producer (a Kafka transactional
        producer); a write of a transaction already ended there is refused.
        """
        build, finish = self._append_plan(
            appends,
            leader_epoch=leader_epoch,
            producers=producers,
            txn=txn,
            staged_max_age_ms=staged_max_age_ms,
            transactions=transactions,
        )
        try:
            commit = self.commit(build)
        except OutOfOrderSequenceNumberError:
            if not producers:
                raise
            # A stale view must not fail a batch that the log's head would accept.
            self.refresh()
            commit = self.commit(build)
        return finish(commit)

    def stage_append(
        self,
        appends: Mapping[int, Sequence[Segment]],
        *,
        leader_epoch: int | None = None,
        producers: Mapping[int, ProducerBatch] | None = None,
        transactions: Mapping[int, int] | None = None,
        txn: tuple[str, int] | None = None,
    ) -> tuple[Commit | None, Callable[[Commit | None], dict[int, AppendResult]]]:
        """:meth:`append`'s body against this leader's view, not yet written, and what
        turns the journalled body (:meth:`journalled`) into the append's results: the
        produce path journals one flush's bodies of every shard in one journal commit
        (``txn``: a brokerless writer's marker, handed over with its commit)."""
        build, finish = self._append_plan(
            appends,
            leader_epoch=leader_epoch,
            producers=producers,
            txn=txn,
            staged_max_age_ms=STAGED_OBJECT_MAX_AGE_MS,
            transactions=transactions,
        )
        return self.stage(build), finish

    def _append_plan(
        self,
        appends: Mapping[int, Sequence[Segment]],
        *,
        leader_epoch: int | None,
        producers: Mapping[int, ProducerBatch] | None,
        txn: tuple[str, int] | None,
        staged_max_age_ms: int,
        transactions: Mapping[int, int] | None,
    ) -> tuple[
        Callable[[ShardState], Commit | None],
        Callable[[Commit | None], dict[int, AppendResult]],
    ]:
        """The build of an append's commit and the results of the commit that landed."""
        now = self.clock_ms()
        for segments in appends.values():
            for seg in segments:
                if now - seg.created_ms > staged_max_age_ms:
                    raise StagedObjectExpiredError(
                        f"staged object {seg.object_key} is older than {staged_max_age_ms} ms "
                        "and may be garbage-collected; write it again"
                    )
        producers = producers or {}
        transactions = transactions or {}
        counts = {p: sum(s.offset_span for s in segs) for p, segs in appends.items()}
        outcome: dict[int, AppendResult] = {}

        def build(state: ShardState) -> Commit | None:
            outcome.clear()
            self._check_epoch(state, leader_epoch)
            if txn is not None and state.markers.get(txn[0], {}).get("version", -1) >= txn[1]:
                for p, n in counts.items():
                    outcome[p] = AppendResult(-1, n, state.version, duplicate=True)
                return None
            parts: dict[str, Any] = {}
            for p, segments in sorted(appends.items()):
                batch = producers.get(p)
                if batch is not None:
                    dup = _duplicate_in(state.part(p), batch, f"{self.topic}-{p}")
                    if dup is not None:
                        outcome[p] = AppendResult(dup, counts[p], state.version, duplicate=True)
                        continue
                number = transactions.get(p)
                if number is not None and batch is not None:
                    txn_markers.check_txn_append(
                        state.part(p).txn, batch.producer_id, number, f"{self.topic}-{p}"
                    )
                base = state.part(p).high_watermark
                placed = []
                for seg in segments:
                    entry = seg.to_json()  # seg.at(base).to_json(), without a dataclass copy
                    entry["base_offset"] = base
                    placed.append(entry)
                    base += seg.offset_span
                change: dict[str, Any] = {"append": placed}
                if batch is not None:
                    change["producer"] = {
                        "id": batch.producer_id,
                        "epoch": batch.producer_epoch,
                        "first_seq": batch.first_sequence,
                        "last_seq": batch.last_sequence,
                    }
                    if number is not None:
                        change["txn"] = {"id": batch.producer_id, "n": number}
                parts[str(p)] = change
            if not parts:
                return None
            commit: Commit = {"kind": "append", "parts": parts, "ts": now}
            commit["epoch"] = max(leader_epoch or 0, state.leader_epoch)
            if txn is not None:
                commit["txn"] = {"app_id": txn[0], "version": txn[1]}
            expire = self._expiry(state, now)
            if expire:
                commit["expire"] = expire
            return commit

        def finish(commit: Commit | None) -> dict[int, AppendResult]:
            return self._append_results(commit, appends, counts, outcome)

        return build, finish

    def _append_results(
        self,
        commit: Commit | None,
        appends: Mapping[int, Sequence[Segment]],
        counts: Mapping[int, int],
        outcome: dict[int, AppendResult],
    ) -> dict[int, AppendResult]:
        if commit is not None:
            for key, change in commit["parts"].items():
                p = int(key)
                placed = change.get("append", [])
                base = placed[0]["base_offset"] if placed else self.state.part(p).high_watermark
                outcome[p] = AppendResult(base, counts[p], commit["v"])
        for p in appends:
            if p not in outcome:  # nothing to place (no segments)
                part = self.state.part(p)
                outcome[p] = AppendResult(part.high_watermark, 0, self.state.version)
        return outcome

    def end_transactions(
        self,
        ends: Mapping[int, txn_markers.Marker],
        *,
        leader_epoch: int | None = None,
    ) -> dict[int, int]:
        """End a transaction in several partitions at once: partition -> control record offset.

        A partition where the producer's transaction wrote records gets a control
        record (one offset); one where it wrote nothing only remembers that the
        transaction ended (so a late write of it is refused).  Writing the same
        ends again is a no-op (-1: no control record written now), so a
        coordinator that died half-way can be followed by another one.
        """
        placed: dict[int, int] = {}

        def build(state: ShardState) -> Commit | None:
            placed.clear()
            self._check_epoch(state, leader_epoch)
            parts: dict[str, Any] = {}
            for p, marker in sorted(ends.items()):
                part = state.part(p)
                pid = str(marker.producer_id)
                closed = int((part.txn.get("closed") or {}).get(pid, -1))
                if closed >= marker.txn_number:
                    continue
                entry = (part.txn.get("open") or {}).get(pid)
                if entry is not None and int(entry["n"]) <= marker.txn_number:
                    offset = part.high_watermark
                    parts[str(p)] = {"marker": {**marker.to_json(), "offset": offset}}
                    placed[p] = offset
                else:
                    parts[str(p)] = {"close": {"id": marker.producer_id, "n": marker.txn_number}}
            if not parts:
                return None
            commit: Commit = {"kind": "txn_end", "parts": parts, "ts": self.clock_ms()}
            commit["epoch"] = max(leader_epoch or 0, state.leader_epoch)
            return commit

        self.commit(build)
        return {p: placed.get(p, -1) for p in ends}

    def bump_epoch(self, new_epoch: int | None = None) -> int:
        """Write an epoch-bump commit (a leader taking over the shard); return the new epoch.

        A handle with a journal writes its lease instead (which bumps the epoch), unless
        it holds the lease already."""
        if self._writer is not None and new_epoch is None:
            with self._lock:
                self._ensure_lease()
                return self.state.leader_epoch

        def build(state: ShardState) -> Commit:
            epoch = state.leader_epoch + 1 if new_epoch is None else new_epoch
            if epoch <= state.leader_epoch:
                raise FencedLeaderEpochError(
                    f"shard {self.name}: epoch {epoch} is not above current {state.leader_epoch}"
                )
            return {"kind": "epoch", "epoch": epoch}

        commit = self.commit(build)
        assert commit is not None
        return int(commit["epoch"])

    def append_mirrored(
        self,
        appends: Mapping[int, Sequence[Segment]],
        *,
        link: str,
        expected: Mapping[int, int],
    ) -> dict[int, AppendResult]:
        """Commit segments already written with their offsets (a mirror link's copy).

        Unlike :meth:`append`, offsets are not assigned here: each segment keeps
        the ``base_offset`` it had at its source, so a mirror partition holds the
        source's offsets.  ``expected[p]`` is partition p's high watermark the
        caller planned from (the link's position): the commit lands only while
        it still holds, so two copies of the same range can never both commit,
        and a copy whose commit answer was lost finds its segments in place
        (answered as ``duplicate``).  A segment starting above the previous end
        (offsets the source no longer holds: its retention or compaction) is
        committed with the range recorded as a gap in the same commit; if
        nothing live precedes the gap, the log start offset moves to it.  The
        commit names ``link``: the position and the data are one create.
        """
        build, finish = self._mirrored_plan(appends, link=link, expected=expected)
        return finish(self.commit(build))

    def stage_append_mirrored(
        self,
        appends: Mapping[int, Sequence[Segment]],
        *,
        link: str,
        expected: Mapping[int, int],
    ) -> tuple[Commit | None, Callable[[Commit | None], dict[int, AppendResult]]]:
        """:meth:`append_mirrored`'s body against this leader's view, not yet written, and
        what turns the journalled body (:meth:`journalled`) into its results: a mirror
        copier's commit handed to the shard's leader is one step of its journal, with
        the same position check (:class:`MirrorPositionMovedError`, or ``duplicate``)."""
        build, finish = self._mirrored_plan(appends, link=link, expected=expected)
        return self.stage(build), finish

    def _mirrored_plan(
        self,
        appends: Mapping[int, Sequence[Segment]],
        *,
        link: str,
        expected: Mapping[int, int],
    ) -> tuple[
        Callable[[ShardState], Commit | None],
        Callable[[Commit | None], dict[int, AppendResult]],
    ]:
        """The build of a mirrored append's commit and the results of the one that landed."""
        outcome: dict[int, AppendResult] = {}

        def build(state: ShardState) -> Commit | None:
            outcome.clear()
            parts: dict[str, Any] = {}
            gaps: dict[str, list[list[int]]] = {}
            for p, segments in sorted(appends.items()):
                if not segments:
                    continue
                part = state.part(p)
                hwm = part.high_watermark
                end = segments[-1].end_offset
                if hwm != expected[p]:
                    if hwm >= end and hwm > expected[p]:
                        outcome[p] = AppendResult(
                            segments[0].base_offset,
                            end - segments[0].base_offset,
                            state.version,
                            duplicate=True,
                        )
                        continue
                    raise MirrorPositionMovedError(
                        f"mirror link {link!r}: partition {self.topic}-{p} is at offset {hwm}, "
                        f"not {expected[p]} as planned; plan the copy again"
                    )
                placed, holes, at = [], [], hwm
                for seg in segments:
                    if seg.base_offset < at:
                        raise CorruptRecordError(
                            f"mirror link {link!r}: segment at {seg.base_offset} of "
                            f"{self.topic}-{p} overlaps offsets below {at}"
                        )
                    if seg.base_offset > at:
                        holes.append([at, seg.base_offset])
                    placed.append(seg.to_json())
                    at = seg.end_offset
                change: dict[str, Any] = {"append": placed}
                if holes and holes[0][0] == hwm and part.log_start_offset == hwm:
                    change["lso"] = holes[0][1]
                if holes:
                    gaps[str(p)] = holes
                parts[str(p)] = change
                outcome[p] = AppendResult(segments[0].base_offset, at - segments[0].base_offset, 0)
            if not parts:
                return None
            mirror: dict[str, Any] = {"link": link}
            if gaps:
                mirror["gaps"] = gaps
            return {
                "kind": "mirror",
                "parts": parts,
                "ts": self.clock_ms(),
                "epoch": state.leader_epoch,
                "mirror": mirror,
            }

        def finish(commit: Commit | None) -> dict[int, AppendResult]:
            if commit is not None:
                for key in commit["parts"]:
                    done = outcome[int(key)]
                    outcome[int(key)] = AppendResult(
                        done.base_offset, done.record_count, commit["v"]
                    )
            return outcome

        return build, finish

    def replace_segments(
        self,
        partition: int,
        build: Callable[[LogState], tuple[list[int], list[Segment], int | None] | None],
        kind: str,
        leader_epoch: int | None = None,
    ) -> Commit | None:
        """Commit a maintenance change of one partition: remove segments, add others."""

        def commit_for(state: ShardState) -> Commit | None:
            self._check_epoch(state, leader_epoch)
            change = build(LogState(state, partition))
            if change is None:
                return None
            remove, add, log_start = change
            entry: dict[str, Any] = {"remove": remove, "add": [s.to_json() for s in add]}
            if log_start is not None:
                entry["lso"] = log_start
            commit: Commit = {"kind": kind, "parts": {str(partition): entry}}
            commit["epoch"] = state.leader_epoch
            return commit

        return self.commit(commit_for)


# -- the partition view ---------------------------------------------------------------------


def _assigns_offsets(body: Commit) -> bool:
    """Whether a change places records or control records at the head (it must follow
    every step a leased journal holds, so it ends the lease)."""
    return any(
        "append" in change or "marker" in change or "skip_to" in change
        for change in (body.get("parts") or {}).values()
    )


def _duplicate_in(part: PartState | None, batch: ProducerBatch, where: str) -> int | None:
    """The dedup rule against one partition's state (none yet: an empty one)."""
    if part is None:
        return duplicate_of({}, batch, where)
    return duplicate_of(part.producers, batch, where, repaired_ms=part.repaired_ms)


class PartitionLog:
    """One partition of a shard log: reads, appends and maintenance commits.

    Several views share one :class:`ShardLog` (and its lock discipline: not
    thread-safe, lock around the shard).
    """

    def __init__(
        self,
        shard: ShardLog,
        partition: int,
        schema_for: SchemaResolver,
        *,
        topic: str = "",
    ) -> None:
        self.shard = shard
        self.partition = partition
        self.topic = topic
        self.schema_for = schema_for

    def __repr__(self) -> str:
        return f"PartitionLog({self.topic!r}, {self.partition})"

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def store(self) -> ObjectStore:
        return self.shard.store

    # -- state -------------------------------------------------------------
    @property
    def state(self) -> LogState:
        return LogState(self.shard.state, self.partition)

    def refresh(self, max_staleness_ms: int = 0) -> LogState:
        """Catch up with commits made by other writers (one probe of the shard log).

        ``max_staleness_ms`` skips the probe when the shard was seen at its head
        that recently (see :data:`READ_PROBE_SHARE_MS`, :data:`IDLE_PROBE_INTERVAL_MS`).
        """
        self.shard.refresh(max_staleness_ms)
        return self.state

    @property
    def high_watermark(self) -> int:
        return self.state.high_watermark

    @property
    def log_start_offset(self) -> int:
        return self.state.log_start_offset

    def watermarks_in_memory(self) -> tuple[int, int]:
        """(high watermark, log start offset) as last read, (-1, -1) if never read: no I/O."""
        loaded = self.shard.loaded_state
        if loaded is None:
            return -1, -1
        state = LogState(loaded, self.partition)
        return state.high_watermark, state.log_start_offset

    @property
    def leader_epoch(self) -> int:
        return self.shard.state.leader_epoch

    def _planned(self, plan: Callable[[LogState], _T]) -> _T:
        """``plan(state)``, once more on a fresh view if the view's snapshot was pruned
        before the chunk the plan needed was read (the log dropped that view)."""
        try:
            return plan(self.state)
        except SnapshotGoneError:
            return plan(self.state)

    def segments(self) -> list[Segment]:
        return self._planned(lambda state: state.segments.all())

    def segments_between(self, start: int, end: int) -> list[Segment]:
        """Live segments covering any offset in ``[start, end)``, in offset order (planning)."""
        return self._planned(lambda state: state.segments.overlapping(start, end))

    def duplicate_of(self, batch: ProducerBatch) -> int | None:
        """Where an idempotent batch landed if committed before; None if it is next."""
        return self.shard.duplicate_of(self.partition, batch)

    # -- commits -----------------------------------------------------------
    def append(
        self,
        segments: Sequence[Segment],
        *,
        leader_epoch: int | None = None,
        producer: ProducerBatch | None = None,
        txn: tuple[str, int] | None = None,
        staged_max_age_ms: int = STAGED_OBJECT_MAX_AGE_MS,
    ) -> AppendResult:
        """Commit staged segments at the high watermark; return the assigned offsets."""
        results = self.shard.append(
            {self.partition: segments},
            leader_epoch=leader_epoch,
            producers={self.partition: producer} if producer is not None else None,
            txn=txn,
            staged_max_age_ms=staged_max_age_ms,
        )
        return results[self.partition]

    def bump_epoch(self, new_epoch: int | None = None) -> int:
        return self.shard.bump_epoch(new_epoch)

    def replace_segments(
        self,
        build: Callable[[LogState], tuple[list[int], list[Segment], int | None] | None],
        kind: str,
        leader_epoch: int | None = None,
    ) -> Commit | None:
        return self.shard.replace_segments(self.partition, build, kind, leader_epoch)

    # -- reads -------------------------------------------------------------
    def iter_batches(
        self,
        start: int,
        end: int | None = None,
        *,
        max_bytes: int | None = None,
        batch_rows: int = 0,
        batch_bytes: int = 0,
    ) -> Iterator[pa.RecordBatch]:
        """Records with offsets in ``[start, end)`` as batches with an ``offset`` column.

        Raises OffsetOutOfRangeError if ``start`` is below the log start offset
        or above the high watermark.  ``max_bytes`` stops after the segment
        that crosses it (always returning at least one segment's records).
        ``batch_rows``/``batch_bytes`` join consecutive segments' batches until a
        batch holds that many rows or bytes: a log of small segments (one per
        producer flush) is read as few large batches, with one copy and one
        offset column per batch instead of per segment.
        """

        def plan(state: LogState) -> tuple[int, list[Segment]]:
            hwm = state.high_watermark
            stop = hwm if end is None else min(end, hwm)
            if start < state.log_start_offset or start > hwm:
                raise OffsetOutOfRangeError(
                    f"offset {start} is out of range for partition {self.name}; valid: "
                    f"[{state.log_start_offset}, {hwm}]",
                    state.log_start_offset,
                    hwm,
                )
            return stop, state.segments.overlapping(start, stop)

        stop, planned = self._planned(plan)
        target = self.schema_for("")
        joined = _JoinedPieces(target, batch_rows, batch_bytes)
        read_bytes = 0
        for seg in planned:
            for first, piece in self._pieces(seg, start, stop):
                yield from joined.add(first, piece)
            read_bytes += seg.size_bytes
            if max_bytes is not None and read_bytes >= max_bytes:
                break
        yield from joined.flush()

    def read(self, start: int, end: int | None = None, *, max_bytes: int | None = None) -> pa.Table:
        """Offsets ``[start, end)`` as one table (schema: offset + the topic's record schema)."""
        batches = list(self.iter_batches(start, end, max_bytes=max_bytes))
        schema = pa.schema([OFFSET_FIELD, *self.schema_for("")])
        if not batches:
            return schema.empty_table()
        return pa.Table.from_batches(batches)

    def segment_batches(self, seg: Segment, start: int, stop: int) -> Iterator[pa.RecordBatch]:
        """One segment's records with offsets in ``[start, stop)``, offset column added."""
        target = self.schema_for("")
        for first, piece in self._pieces(seg, start, stop):
            yield _conform(piece if first is None else with_offset_column(first, piece), target)

    def _pieces(
        self, seg: Segment, start: int, stop: int
    ) -> Iterator[tuple[int | None, pa.RecordBatch]]:
        """The segment's stored batches cut to ``[start, stop)``: ``(first offset, batch)``
        for a plain segment (offsets implied), ``(None, batch with its offset column)`` for
        one that stores offsets (compacted: they have gaps)."""
        import pyarrow.compute as pc

        offset = seg.base_offset
        for batch in read_segment(self.store, seg, self.schema_for(seg.schema_id)):
            if seg.has_offsets:
                offsets = batch.column("offset")
                mask = pc.and_(pc.greater_equal(offsets, start), pc.less(offsets, stop))
                chosen = batch.filter(mask)
                if chosen.num_rows:
                    yield None, chosen
                continue
            rows = batch.num_rows
            lo, hi = max(start - offset, 0), min(stop - offset, rows)
            if hi > lo:
                yield offset + lo, batch.slice(lo, hi - lo)
            offset += rows
            if offset >= stop:
                return

    def offset_for_timestamp(self, timestamp_ms: int) -> int:
        """The first offset whose timestamp is at or after ``timestamp_ms``; HWM if none."""
        return self._planned(lambda state: self._offset_for_timestamp(state, timestamp_ms))

    def offset_of_max_timestamp(self) -> int:
        """The first offset holding the log's largest timestamp (Kafka's MAX_TIMESTAMP,
        KIP-734); -1 for an empty log."""
        return self._planned(self._offset_of_max_timestamp)

    def _offset_of_max_timestamp(self, state: LogState) -> int:
        import pyarrow.compute as pc

        table = state.segments.to_table()
        if state.high_watermark <= state.log_start_offset or not table.num_rows:
            return -1
        ends = pc.add(table.column("base_offset"), table.column("offset_span"))
        table = table.filter(pc.greater(ends, state.log_start_offset))
        if not table.num_rows:
            return -1
        top = int(pc.max(table.column("max_timestamp_ms")).as_py())
        found = self._offset_for_timestamp(state, top)
        return -1 if found >= state.high_watermark else found

    def _offset_for_timestamp(self, state: LogState, timestamp_ms: int) -> int:
        seg = state.segments.first_with_max_timestamp_at_least(timestamp_ms)
        while seg is not None:
            found = self._first_at_or_after(seg, timestamp_ms)
            if found is not None:
                return max(found, state.log_start_offset)
            later = state.segments.overlapping(seg.end_offset, state.high_watermark)
            seg = next((s for s in later if s.max_timestamp_ms >= timestamp_ms), None)
        return state.high_watermark

    def _first_at_or_after(self, seg: Segment, timestamp_ms: int) -> int | None:
        """The offset of the segment's first record stamped at or after ``timestamp_ms``.

        One comparison over the whole segment's timestamps, not a kernel (and an
        offset column) per record batch: a segment of many small batches costs
        its decoding, nothing per batch beyond it.
        """
        import pyarrow.compute as pc

        batches = read_segment(self.store, seg, self.schema_for(seg.schema_id))
        if not batches:
            return None
        stamps = pa.chunked_array(
            [b.column("timestamp") for b in batches], batches[0].schema.field("timestamp").type
        )
        hits = pc.indices_nonzero(
            pc.greater_equal(stamps.cast(pa.int64()).combine_chunks(), timestamp_ms)
        )
        if not len(hits):
            return None
        row = hits[0].as_py()
        if not seg.has_offsets:
            return seg.base_offset + int(row)
        offsets = pa.chunked_array([b.column("offset") for b in batches], pa.int64())
        return int(offsets[row].as_py())


class _JoinedPieces:
    """Consecutive plain pieces of one stored schema joined into batches of about
    ``rows`` rows or ``size_bytes`` bytes (0 and 0: every piece a batch of its own)."""

    def __init__(self, target: pa.Schema, rows: int, size_bytes: int) -> None:
        self.target, self.rows, self.size_bytes = target, rows, size_bytes
        self._pending: list[pa.RecordBatch] = []
        self._first = self._rows = self._bytes = 0

    def add(self, first: int | None, piece: pa.RecordBatch) -> Iterator[pa.RecordBatch]:
        if self._pending and (
            first != self._first + self._rows or not piece.schema.equals(self._pending[0].schema)
        ):
            yield from self.flush()
        if first is None:
            yield _conform(piece, self.target)
            return
        if not self._pending:
            self._first = first
        self._pending.append(piece)
        self._rows += piece.num_rows
        self._bytes += piece.get_total_buffer_size()
        if self._rows >= self.rows or (self.size_bytes and self._bytes >= self.size_bytes):
            yield from self.flush()

    def flush(self) -> Iterator[pa.RecordBatch]:
        pending = self._pending
        if not pending:
            return
        joined = pending[0] if len(pending) == 1 else pa.concat_batches(pending)
        self._pending, self._rows, self._bytes = [], 0, 0
        yield _conform(with_offset_column(self._first, joined), self.target)


def _conform(batch: pa.RecordBatch, target: pa.Schema) -> pa.RecordBatch:
    """Bring a batch written under an older typed schema to the current one."""
    schema = pa.schema([OFFSET_FIELD, *target])
    if batch.schema.equals(schema):
        return batch
    columns = []
    for f in schema:
        column = batch.column(f.name)
        if not column.type.equals(f.type) and pa.types.is_struct(f.type):
            present = {column.type.field(i).name for i in range(column.type.num_fields)}
            children = [
                column.field(c.name).cast(c.type)
                if c.name in present
                else pa.nulls(len(column), c.type)
                for c in f.type
            ]
            column = pa.StructArray.from_arrays(
                children, fields=list(f.type), mask=column.is_null()
            )
        elif not column.type.equals(f.type):
            column = column.cast(f.type)
        columns.append(column)
    return pa.RecordBatch.from_arrays(columns, schema=schema)
