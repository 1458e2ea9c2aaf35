"""Transactional ids' state: a log per id, journalled by the id's coordinator (format 3).

``transactions/<id key>/log/<v:020d>.json`` (the key escaped as a group's,
:func:`~sparklog.storage.groups.group_key_name`) holds one transactional id's state, the
dict :mod:`sparklog.broker_lite.transactions.coordinator` keeps::

    {"pid", "epoch", "state", "n", "timeout_ms", "started_ms", "updated_ms",
     "partitions": [[topic, partition], ...], "groups": {group: [...]}}

Each change (InitProducerId, a transaction's begin, AddPartitionsToTxn,
AddOffsetsToTxn, the decision, Complete) is a ``txn`` change holding the whole new
state (a few hundred bytes): a journal step of the id's coordinator, riding the
broker's flushes and folded into the log every ``fold_interval_ms``, or, from a broker
that does not coordinate the id, a commit of the log that folds the journal's steps
first (:class:`~sparklog.storage.journalled_logs.JournalledLogs`, the machine a group's
log uses).  The cluster metadata log keeps a registry of the ids only
(``transactional_id`` records ``{"pid", "epoch", "timeout_ms"}``, written when
InitProducerId or an abort's fencing changes them), which discovery, listings and the
producer-id-to-id lookup read; the id's log is the authority on its state.

A registry record written before (an older broker's) holds the whole state: it is the
id's state until the id's log has one, and its next change moves it there
(:func:`registered_state`).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sparklog.errors import CorruptRecordError
from sparklog.storage.groups import group_key_name
from sparklog.storage.journal import JournalRef
from sparklog.storage.journalled_logs import (
    JournalledLogs,
    LeasedState,
    apply_journal_steps,
    apply_leased_commit,
)
from sparklog.storage.metalog import DEFAULT_SNAPSHOT_INTERVAL, Commit, MetaLog
from sparklog.storage.objectstore import ObjectStore

#: the fields of a registry record (the rest of a state lives in the id's log)
REGISTRY_FIELDS = ("pid", "epoch", "timeout_ms")


def transaction_key(tid: str) -> str:
    """The storage prefix of transactional id ``tid``'s objects."""
    return f"transactions/{group_key_name(tid)}"


@dataclass
class TxnLogState(LeasedState):
    """A transactional id's log at one version: the id's state (None: never written)."""

    version: int = -1
    commits_since_snapshot: int = 0
    journal: JournalRef | None = None
    folded: int = -1
    txn: dict[str, Any] | None = None

    def overlaid(self, steps: Sequence[Sequence[Any]]) -> TxnLogState:
        """A copy of this state with the journal ``steps`` after ``folded`` applied."""
        view = dataclasses.replace(self)
        apply_journal_steps(view, self.journal, steps, apply_change)
        return view


def apply_change(state: TxnLogState, change: Mapping[str, Any]) -> None:
    """One change (a commit's or a journal step's): the id's whole new state."""
    txn = change.get("txn")
    if txn is not None:
        state.txn = dict(txn)


class TxnCodec:
    """Applies a transactional id's commits; snapshots are the whole state as JSON."""

    def empty(self) -> TxnLogState:
        return TxnLogState()

    def apply(self, state: TxnLogState, commit: Commit) -> None:
        apply_leased_commit(state, commit, apply_change)

    def snapshot(self, state: TxnLogState) -> bytes:
        doc: dict[str, Any] = {"version": state.version, "txn": state.txn}
        if state.journal is not None:
            doc["journal"] = state.journal.to_json()
            doc["folded"] = state.folded
        return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()

    def restore(self, payload: memoryview, where: str) -> TxnLogState:
        try:
            doc = json.loads(bytes(payload))
            txn = doc["txn"]
            return TxnLogState(
                version=int(doc["version"]),
                txn=dict(txn) if txn is not None else None,
                journal=JournalRef.from_json(doc.get("journal")),
                folded=int(doc.get("folded", -1)),
            )
        except (ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
            raise CorruptRecordError(f"snapshot {where} cannot be decoded: {exc}") from None


class TxnLog(MetaLog[TxnLogState]):
    """One transactional id's log.  Not thread-safe: :class:`TransactionStore` locks."""

    def __init__(
        self, store: ObjectStore, tid: str, snapshot_interval: int = DEFAULT_SNAPSHOT_INTERVAL
    ) -> None:
        super().__init__(
            store,
            f"{transaction_key(tid)}/log",
            TxnCodec(),
            name=f"transactional id {tid}",
            snapshot_interval=snapshot_interval,
        )


class TransactionStore(JournalledLogs[TxnLogState]):
    """The transactional ids' logs under one root (thread-safe; see the module doc).

    A journalled change probes the log's head first (``probe_before_step``): a change
    is built from the state it replaces whole, so it must see a direct commit another
    broker made meanwhile.  Its journal commit starts at once (``urgent_steps``): a
    transaction's begin, add and decision are each waited for in turn, and waiting
    out the flush interval (50 ms) for each cost a single producer 15x its
    transaction rate; concurrent steps, and records being flushed, still share one
    journal commit.
    """

    def __init__(
        self, store: ObjectStore, *, snapshot_interval: int = DEFAULT_SNAPSHOT_INTERVAL
    ) -> None:
        super().__init__(
            store,
            "txns",
            lambda tid: TxnLog(store, tid, snapshot_interval),
            probe_before_step=True,
            urgent_steps=True,
        )

    def state(self, tid: str) -> dict[str, Any] | None:
        """``tid``'s state as its log and journal have it now (one probe of the log)."""
        found = self._view(tid).txn
        return dict(found) if found is not None else None

    def held_state(self, tid: str) -> dict[str, Any] | None:
        """``tid``'s state from this process's memory, when its log is leased to our
        journal (we are its coordinator and only writer); else None."""
        view = self._held_view(tid)
        return dict(view.txn) if view is not None and view.txn is not None else None

    def leased_here(self, tid: str) -> bool:
        """Whether ``tid``'s log names our journal as this process last read it."""
        return self._held_view(tid) is not None

    def write(
        self, tid: str, build: Callable[[dict[str, Any] | None], dict[str, Any] | None]
    ) -> dict[str, Any] | None:
        """Write ``build(current state or None) -> new state`` (None: no change), as a
        journal step where this process coordinates ``tid``, else a commit of its log;
        the new state written, or None if nothing was."""

        def change(state: TxnLogState) -> Commit | None:
            new = build(dict(state.txn) if state.txn is not None else None)
            return None if new is None else {"kind": "txn", "txn": new}

        written = self._change(tid, change)
        return dict(written["txn"]) if written is not None else None


def registered_state(record: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The state a registry record gives an id whose log holds none: an older broker's
    record is the whole state; a registry record alone is an id with no transaction."""
    if record is None:
        return None
    if "state" in record:  # written by a broker before the ids' logs: the whole state
        return dict(record)
    return {
        "pid": int(record["pid"]),
        "epoch": int(record["epoch"]),
        "state": "Empty",
        "n": 0,
        "timeout_ms": int(record.get("timeout_ms", 60_000)),
        "started_ms": -1,
        "partitions": [],
        "groups": {},
    }


def registry_record(state: Mapping[str, Any]) -> dict[str, Any]:
    """The registry's record of an id in ``state``."""
    return {name: int(state[name]) for name in REGISTRY_FIELDS}


def transaction_states(
    registry: Mapping[str, Mapping[str, Any]], transactions: TransactionStore
) -> dict[str, dict[str, Any]]:
    """Every registered id's state: its log's, else what its registry record gives."""
    out: dict[str, dict[str, Any]] = {}
    for tid, record in sorted(registry.items()):
        found = transactions.state(tid) or registered_state(record)
        if found is not None:
            out[tid] = found
    return out
