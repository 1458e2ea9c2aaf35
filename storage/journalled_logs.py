"""Small logs journalled by the broker that coordinates them (format 3): one machine,
several codecs.

A consumer group's log (:mod:`sparklog.storage.groups`, journal section ``groups``) and a
transactional id's log (:mod:`sparklog.storage.transactions`, section ``txns``) are
kept the same way: in a broker with a journal, the changes of the keys it coordinates
are journal steps riding the broker's flushes (one journal commit per flush, whatever
the number of keys), folded into each key's log every ``fold_interval_ms``
(:meth:`JournalledLogs.fold_due`).  A log names the journal that holds its newer
changes in a lease commit (``journal``, ``from``) and the last journal version folded
into it (``folded``); a reader applies the journal's steps after that.  Taking over a
log leased by another journal seals that journal first (nothing more is acknowledged
from it) and folds what it holds for the key; a process that does not coordinate the
key commits to its log directly, folding the journal's steps in the same commit, so
its change lands after every step acknowledged before it (docs/architecture.md,
"Storage format 3").
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic, Literal, Self, TypeVar

from sparklog.storage.journal import (
    Journal,
    JournalRef,
    JournalSealedError,
    JournalWriter,
    journal_steps,
    read_versions,
)
from sparklog.storage.metalog import Commit, LogStateBase, MetaLog
from sparklog.storage.objectstore import ObjectStore

#: the journal's sections of keyed logs: a flush body holds ``{section: {key: [change]}}``
KeyedSection = Literal["groups", "txns"]


class LeasedState(LogStateBase):
    """What a journalled log's state holds besides its content: the journal its lease
    names (None: never leased) and the last version of it folded into the log."""

    journal: JournalRef | None
    folded: int

    def overlaid(self, steps: Sequence[Sequence[Any]]) -> Self:
        """A copy of the state with the journal ``steps`` after ``folded`` applied."""
        raise NotImplementedError


S = TypeVar("S", bound=LeasedState)


def apply_journal_steps(
    state: S,
    journal: JournalRef | None,
    steps: Sequence[Sequence[Any]],
    apply_change: Callable[[S, Mapping[str, Any]], None],
) -> None:
    """Journal ``steps`` (``[version, change]``, in order) of the lease's journal that
    are past ``state.folded``, each by ``apply_change``; a fold repeated (a lost answer,
    the next leader) is a no-op."""
    if journal is None or journal != state.journal:
        return
    through = state.folded
    for version, change in steps:
        if int(version) > state.folded:
            apply_change(state, change)
            through = max(through, int(version))
    state.folded = through


def apply_leased_commit(
    state: S, commit: Commit, apply_change: Callable[[S, Mapping[str, Any]], None]
) -> None:
    """A journalled log's commit: the journal's steps it folds first, a lease, then its
    own change (the codecs of every journalled log apply commits this way)."""
    fold = commit.get("fold")
    if fold:  # the journal's changes up to here come first
        journal = JournalRef.from_json(fold["journal"])
        apply_journal_steps(state, journal, fold["steps"], apply_change)
    if commit.get("kind") == "lease":
        state.journal = JournalRef.from_json(commit["journal"])
        state.folded = int(commit["from"]) - 1
    apply_change(state, commit)


#: journal steps of one key held in memory by the journal's writer: (journal, version,
#: change), oldest first
PendingSteps = list[tuple[JournalRef, int, Commit]]


class JournalledLogs(Generic[S]):
    """The logs of one kind of key (groups, transactional ids) under one root, each
    journalled by the process that coordinates it (thread-safe; see the module doc).

    ``open_log(key)`` opens a key's log (its state a :class:`LeasedState`); ``section``
    names the keys' part of a journal commit.  With ``probe_before_step`` a journalled
    change re-reads the log's head first (one probe), so a direct commit another
    process made since is under the change's check (transaction state, where a stale
    check would undo it); without, the change is checked against the log as this
    process last read it (offset commits: their checks are generation numbers only the
    coordinator writes).  With ``urgent_steps`` a step's journal commit starts at once
    (gathering whatever else is pending) rather than up to the journal's flush interval
    later: a transaction waits for each of its steps in turn, a consumer's offset commit
    for one.
    """

    def __init__(
        self,
        store: ObjectStore,
        section: KeyedSection,
        open_log: Callable[[str], MetaLog[S]],
        *,
        probe_before_step: bool = False,
        urgent_steps: bool = False,
    ) -> None:
        self.store = store
        self.section: KeyedSection = section
        self._open_log = open_log
        self._probe_before_step = probe_before_step
        self._urgent_steps = urgent_steps
        self._lock = threading.Lock()
        self._logs: dict[str, tuple[MetaLog[S], threading.Lock]] = {}
        self._writer: JournalWriter | None = None
        self._coordinates: Callable[[str], bool] = lambda key: False
        #: journalled steps not yet folded, per key (the writer's memory)
        self._pending: dict[str, PendingSteps] = {}
        #: monotonic time of each key's oldest unfolded step
        self._pending_since: dict[str, float] = {}
        #: this process's own journals that are retired: everything in them is folded
        self._retired: set[JournalRef] = set()
        #: fold commits written (for tests and metrics)
        self.folds = 0

    # -- the journal (format 3) ---------------------------------------------------------

    def use_journal(self, writer: JournalWriter, coordinates: Callable[[str], bool]) -> None:
        """Journal the changes of the keys ``coordinates`` says this process leads."""
        self._writer = writer
        self._coordinates = coordinates

    @property
    def journalled(self) -> bool:
        """Whether this process journals the keys it coordinates."""
        return self._writer is not None

    def coordinates(self, key: str) -> bool:
        """Whether this process journals ``key``'s changes (it coordinates the key)."""
        return self._writer is not None and self._coordinates(key)

    def _pending_steps(self, key: str, state: S) -> list[list[Any]]:
        """The key's steps after the log's folded position, from memory (our journal)
        or read from the journal the log's lease names (another broker's)."""
        ref = state.journal
        if ref is None or ref in self._retired:
            return []
        with self._lock:
            mine: list[list[Any]] = [[v, c] for r, v, c in self._pending.get(key, ()) if r == ref]
        if mine or (self._writer is not None and ref == self._writer.ref):
            return [step for step in mine if step[0] > state.folded]
        return self._read_tail(ref, state.folded + 1, key)

    def _read_tail(self, ref: JournalRef, first: int, key: str) -> list[list[Any]]:
        """``key``'s steps in journal ``ref`` from version ``first`` to its end."""
        return journal_steps(read_versions(self.store, ref, first), self.section, key)

    @staticmethod
    def _overlaid(state: S, steps: list[list[Any]]) -> S:
        return state.overlaid(steps) if steps else state

    def _view(self, key: str) -> S:
        """The key's state now: its log (one probe) and the journal after it.

        A journal is deleted once everything in it is folded, so a reader that finds
        nothing after its folded position reads the log once more: a fold and the
        deletion may both have happened since its first read.
        """
        log, lock = self.log(key)
        with lock:
            state = log.refresh()
            steps = self._pending_steps(key, state)
            if not steps and state.journal is not None and not self._is_mine(state.journal):
                before = (state.journal, state.folded)
                state = log.refresh()
                if (state.journal, state.folded) != before:
                    steps = self._pending_steps(key, state)
        return self._overlaid(state, steps)

    def _held_view(self, key: str) -> S | None:
        """The key's state as this process holds it (no request), when the log is leased
        to our journal (we are its only journal writer); else None."""
        with self._lock:
            found = self._logs.get(key)
        if found is None or self._writer is None:
            return None
        state = found[0].loaded_state  # not under the key's lock: a step may be flushing
        if state is None or state.journal != self._writer.ref:
            return None
        return self._overlaid(state, self._pending_steps(key, state))

    def _is_mine(self, ref: JournalRef) -> bool:
        return ref in self._retired or (self._writer is not None and ref == self._writer.ref)

    def rotate_journal(self, also_folded: Callable[[JournalRef], bool] | None = None) -> None:
        """Start a fresh journal, fold every step of the old one, then delete it (so a
        journal's versions never outlive the steps they hold).  ``also_folded(old)``
        folds what else the journal holds (shards' records, other keyed logs) and says
        whether all of it is folded."""
        assert self._writer is not None
        if self._writer.next_version == 0:  # nothing written: nothing to replace (no LIST)
            return
        old = self._writer.rotate()
        left = not self.fold_all(old)
        if also_folded is not None and not also_folded(old):
            left = True
        if left:  # a fold failed: the next rotation tries again
            return
        self.store.delete_prefix(old.prefix)

    def fold_all(self, ref: JournalRef) -> bool:
        """Fold every key's journalled steps; whether journal ``ref`` (one of ours, no
        longer written) holds no more of ours, which then counts as retired."""
        self.fold_due(0, everything=True)
        with self._lock:
            left = any(r == ref for steps in self._pending.values() for r, _, _ in steps)
            if not left:
                self._retired.add(ref)
        return not left

    def close_journal(self, also_folded: Callable[[JournalRef], bool] | None = None) -> None:
        """A graceful stop: fold everything journalled, then delete the journal."""
        if self._writer is None:
            return
        self._writer.close()
        ref = self._writer.ref
        done = self.fold_all(ref)
        done = (also_folded is None or also_folded(ref)) and done
        if done and self._writer.next_version > 0:
            self.store.delete_prefix(ref.prefix)

    def _lease(self, log: MetaLog[S], key: str) -> None:
        """Name our journal in the key's log (with the lock held), folding first what
        the previous journal holds for the key: a journal of another broker (or an
        older one of ours) is sealed, so nothing more is acknowledged from it."""
        assert self._writer is not None
        writer = self._writer

        def build(state: S) -> Commit | None:
            if state.journal == writer.ref:
                return None
            commit = writer.lease()
            old = state.journal
            if old is not None and old not in self._retired:
                with self._lock:
                    mine: list[list[Any]] = [
                        [v, c] for r, v, c in self._pending.get(key, ()) if r == old
                    ]
                if not mine:
                    read, _ = Journal(self.store, old).seal(
                        state.folded + 1, by=f"broker {writer.broker_id}"
                    )
                    mine = journal_steps(read, self.section, key)
                steps = [step for step in mine if step[0] > state.folded]
                if steps:
                    commit["fold"] = {"journal": old.to_json(), "steps": steps}
            return commit

        log.commit(build)
        with self._lock:
            self._pending.pop(key, None)
            self._pending_since.pop(key, None)

    def _journalled_commit(
        self, key: str, build: Callable[[S], Commit | None], *, urgent: bool = False
    ) -> Commit | None:
        """Journal ``build(the key's state)`` (None: nothing to write); the step written.
        ``urgent`` (or ``urgent_steps``): its journal commit starts at once."""
        assert self._writer is not None
        log, lock = self.log(key)
        with lock:
            held = None if self._probe_before_step else log.loaded_state
            state = held or log.refresh()
            if state.journal != self._writer.ref:
                self._lease(log, key)
                state = log.state
            change = build(self._overlaid(state, self._pending_steps(key, state)))
            if change is None:
                return None
            ref, version = self._writer.write_step(
                self.section, key, change, urgent=urgent or self._urgent_steps
            )
            if ref != state.journal:
                # the journal was sealed and restarted between our lease and this step:
                # the step is in a journal the log does not name, so it is not committed
                raise JournalSealedError(
                    f"{self.section} {key!r}: the broker's journal changed; commit again"
                )
            with self._lock:
                self._pending.setdefault(key, []).append((ref, version, change))
                self._pending_since.setdefault(key, time.monotonic())
            return change

    def _direct_commit(self, key: str, build: Callable[[S], Commit | None]) -> Commit | None:
        """Commit to the key's log, folding first the journal steps after its folded
        position (so a change made here lands after every step acknowledged before it)."""
        log, lock = self.log(key)
        folded_ref: list[JournalRef | None] = [None]

        def with_fold(state: S) -> Commit | None:
            steps = self._pending_steps(key, state)
            commit = build(self._overlaid(state, steps))
            folded_ref[0] = None
            if commit is not None and steps and state.journal is not None:
                commit["fold"] = {"journal": state.journal.to_json(), "steps": steps}
                folded_ref[0] = state.journal
            return commit

        with lock:
            commit = log.commit(with_fold)
            if folded_ref[0] is not None:
                self._drop_folded(key, log.state)
        return commit

    def _change(
        self, key: str, build: Callable[[S], Commit | None], *, urgent: bool = False
    ) -> Commit | None:
        """``build(the key's state)`` (None: no change): journalled where this process
        coordinates the key (``urgent``: its journal commit starts at once), else
        committed to its log; the change written."""
        if self.coordinates(key):
            return self._journalled_commit(key, build, urgent=urgent)
        return self._direct_commit(key, build)

    def _drop_folded(self, key: str, state: S) -> None:
        with self._lock:
            left = [
                (r, v, c)
                for r, v, c in self._pending.get(key, ())
                if r == state.journal and v > state.folded
            ]
            if left:
                self._pending[key] = left
            else:
                self._pending.pop(key, None)
                self._pending_since.pop(key, None)

    def fold_due(self, fold_interval_ms: int, *, everything: bool = False) -> int:
        """Fold the keys whose oldest journalled step is ``fold_interval_ms`` old
        (every key with steps if ``everything``); the number of folds written."""
        now = time.monotonic()
        with self._lock:
            due = [
                key
                for key, since in self._pending_since.items()
                if everything or (now - since) * 1000 >= fold_interval_ms
            ]
        written = 0
        for key in due:
            if self._fold(key):
                written += 1
        return written

    def _fold(self, key: str) -> bool:
        log, lock = self.log(key)

        def build(state: S) -> Commit | None:
            with self._lock:
                ours = any(r == state.journal for r, _, _ in self._pending.get(key, ()))
            if not ours or state.journal is None:  # leased since by another journal
                return None
            steps = self._pending_steps(key, state)
            if not steps:
                return None
            return {"kind": "fold", "fold": {"journal": state.journal.to_json(), "steps": steps}}

        with lock:
            commit = log.commit(build)
            self._drop_folded(key, log.state)
        if commit is not None:
            self.folds += 1
        return commit is not None

    def retire_journal(self, ref: JournalRef) -> None:
        """Forget a journal of ours that was sealed or replaced: its steps are folded by
        whoever leases each key next (a sealer, or us again)."""
        with self._lock:
            for key in list(self._pending):
                left = [step for step in self._pending[key] if step[0] != ref]
                if left:
                    self._pending[key] = left
                else:
                    del self._pending[key]
                    self._pending_since.pop(key, None)

    def unfolded_steps(self, key: str) -> int:
        """How many journal steps of ``key`` this process wrote and has not folded."""
        with self._lock:
            return len(self._pending.get(key, ()))

    def pending_keys(self) -> int:
        """Keys with journalled steps not yet folded."""
        with self._lock:
            return len(self._pending)

    # -- the logs -----------------------------------------------------------------------

    def log(self, key: str) -> tuple[MetaLog[S], threading.Lock]:
        """The key's (cached) log and the lock to hold while using it."""
        with self._lock:
            found = self._logs.get(key)
            if found is None:
                found = (self._open_log(key), threading.Lock())
                self._logs[key] = found
            return found

    def _forget(self, key: str) -> None:
        """Drop the key's cached log and journalled steps (its objects are deleted)."""
        with self._lock:
            self._logs.pop(key, None)
            self._pending.pop(key, None)
            self._pending_since.pop(key, None)
