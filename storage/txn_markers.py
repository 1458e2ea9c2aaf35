"""Transactions in a partition: open transactions, control records, aborted ranges.

Kafka's transactional producers append records as they come; a coordinator
later writes a *control record* (a commit or abort marker) to every partition
of the transaction.  Here a partition's part of the shard state keeps, in one
``txn`` dict (JSON, copied into snapshots as is):

* ``open``: producer id -> ``{"n": transaction number, "first": first offset,
  "ranges": [[start, end), ...]}`` — the offsets its open transaction wrote;
* ``closed``: producer id -> the number of its last ended transaction: a write
  of that transaction (or an older one) arriving late is refused, so it can
  never join the next transaction (KIP-890's hanging/torn transactions);
* ``controls``: ``[offset, producer id, epoch, committed]`` per control record;
  a control record takes one offset, as in Kafka, but has no segment: readers
  see a gap there, the Kafka listener encodes a control batch;
* ``aborted``: ``[start, end)`` offset ranges of aborted transactions' records.

The last stable offset is the first offset of the oldest open transaction (the
high watermark when none is open).  Entries below the log start offset are
dropped when retention moves it, so the lists stay bounded by the log.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from sparklog.errors import InvalidTxnStateError

__all__ = [
    "Marker",
    "apply_close",
    "apply_marker",
    "apply_txn_append",
    "check_txn_append",
    "drop_aborted",
    "ended_txn",
    "last_stable_offset",
    "prune_below",
]


@dataclass(frozen=True)
class Marker:
    """End of one transaction in one partition: ``committed`` or aborted."""

    producer_id: int
    producer_epoch: int
    txn_number: int
    committed: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.producer_id,
            "epoch": self.producer_epoch,
            "n": self.txn_number,
            "commit": self.committed,
        }


def empty() -> dict[str, Any]:
    return {"open": {}, "closed": {}, "controls": [], "aborted": []}


def ended_txn(txn: Mapping[str, Any], producer_id: int) -> int:
    """The number of ``producer_id``'s last transaction ended in this partition (-1: none)."""
    return int((txn.get("closed") or {}).get(str(producer_id), -1))


def check_txn_append(txn: Mapping[str, Any], producer_id: int, number: int, where: str) -> None:
    """Refuse a transactional write of a transaction that has ended in this partition."""
    if number <= ended_txn(txn, producer_id):
        raise InvalidTxnStateError(
            f"producer {producer_id}: transaction {number} has ended in partition {where}; "
            "a late write of an ended transaction is refused"
        )


def apply_txn_append(
    txn: dict[str, Any], producer_id: int, number: int, start: int, end: int
) -> None:
    """Offsets ``[start, end)`` were written by ``producer_id``'s open transaction ``number``."""
    opened = dict(txn.get("open") or {})
    entry = opened.get(str(producer_id))
    if entry is None or entry["n"] != number:
        entry = {"n": number, "first": start, "ranges": []}
    ranges = list(entry["ranges"])
    if ranges and ranges[-1][1] == start:
        ranges[-1] = [ranges[-1][0], end]
    else:
        ranges.append([start, end])
    opened[str(producer_id)] = {**entry, "ranges": ranges}
    txn["open"] = opened


def apply_close(txn: dict[str, Any], producer_id: int, number: int) -> None:
    closed = dict(txn.get("closed") or {})
    closed[str(producer_id)] = max(int(closed.get(str(producer_id), -1)), number)
    txn["closed"] = closed


def apply_marker(txn: dict[str, Any], marker: Mapping[str, Any], offset: int) -> None:
    """A control record at ``offset`` ends the producer's open transaction."""
    pid = str(marker["id"])
    opened = dict(txn.get("open") or {})
    entry = opened.pop(pid, None)
    txn["open"] = opened
    if entry is not None and not marker["commit"]:
        txn["aborted"] = [*(txn.get("aborted") or []), *entry["ranges"]]
    txn["controls"] = [
        *(txn.get("controls") or []),
        [offset, int(marker["id"]), int(marker["epoch"]), bool(marker["commit"])],
    ]
    apply_close(txn, int(marker["id"]), int(marker["n"]))


def prune_below(txn: dict[str, Any], log_start_offset: int) -> None:
    """Drop control records and aborted ranges wholly below the log start offset."""
    txn["controls"] = [c for c in txn.get("controls") or [] if c[0] >= log_start_offset]
    txn["aborted"] = [r for r in txn.get("aborted") or [] if r[1] > log_start_offset]


def last_stable_offset(txn: Mapping[str, Any] | None, high_watermark: int) -> int:
    """The first offset of the oldest open transaction, or the high watermark."""
    firsts = [int(e["first"]) for e in ((txn or {}).get("open") or {}).values()]
    return min([high_watermark, *firsts])


def controls_between(txn: Mapping[str, Any] | None, start: int, stop: int) -> list[list[Any]]:
    """Control records with offsets in ``[start, stop)``, in offset order."""
    controls = (txn or {}).get("controls") or []
    offsets = [c[0] for c in controls]
    lo = bisect.bisect_left(offsets, start)
    hi = bisect.bisect_left(offsets, stop)
    return [list(c) for c in controls[lo:hi]]


def aborted_between(txn: Mapping[str, Any] | None, start: int, stop: int) -> list[tuple[int, int]]:
    """Aborted ranges overlapping ``[start, stop)``."""
    return [(int(a), int(b)) for a, b in (txn or {}).get("aborted") or [] if a < stop and b > start]


def drop_aborted(
    batches: Iterable[pa.RecordBatch], aborted: list[tuple[int, int]]
) -> list[pa.RecordBatch]:
    """The batches without the records whose offsets lie in an aborted range."""
    import pyarrow.compute as pc  # on use: every planning process imports this module

    out = []
    for batch in batches:
        if not aborted or batch.num_rows == 0:
            out.append(batch)
            continue
        offsets = batch.column("offset")
        first, last = offsets[0].as_py(), offsets[batch.num_rows - 1].as_py()
        mine = [(a, b) for a, b in aborted if a <= last and b > first]
        if not mine:
            out.append(batch)
            continue
        keep = pa.array([True] * batch.num_rows)
        for a, b in mine:
            inside = pc.and_(pc.greater_equal(offsets, a), pc.less(offsets, b))
            keep = pc.and_(keep, pc.invert(inside))
        kept = batch.filter(keep)
        if kept.num_rows:
            out.append(kept)
    return out


def committed_only(
    batches: Iterable[pa.RecordBatch], txn: Mapping[str, Any] | None, last_stable: int
) -> list[pa.RecordBatch]:
    """What a read_committed reader gets of ``batches``: below the last stable
    offset, without aborted transactions' records."""
    import pyarrow.compute as pc

    below = []
    for batch in batches:
        if batch.num_rows == 0:
            continue
        offsets = batch.column("offset")
        if offsets[0].as_py() >= last_stable:
            break
        if offsets[batch.num_rows - 1].as_py() >= last_stable:
            batch = batch.filter(pc.less(offsets, last_stable))
        below.append(batch)
    if not below:
        return []
    first = below[0].column("offset")[0].as_py()
    return drop_aborted(below, aborted_between(txn, first, last_stable))


ISOLATION_LEVELS = ("read_uncommitted", "read_committed")


def check_isolation_level(level: str) -> bool:
    """Whether ``level`` is read_committed; anything but Kafka's two levels is refused."""
    if level not in ISOLATION_LEVELS:
        from sparklog.errors import InvalidConfigurationError

        raise InvalidConfigurationError(
            f"isolation_level={level!r} is not accepted; accepted: {', '.join(ISOLATION_LEVELS)}"
        )
    return level == "read_committed"


def read_committed_from(
    read: Callable[[int], list[pa.RecordBatch]],
    offset: int,
    txn: Mapping[str, Any] | None,
    last_stable: int,
) -> list[pa.RecordBatch]:
    """The first visible records at or after ``offset`` for a read_committed reader.

    ``read(offset)`` returns raw batches from an offset (some, not necessarily
    all).  Reading goes on past aborted records, so an empty answer means that
    nothing in ``[offset, last_stable)`` is visible: the reader may move its
    position to the last stable offset (markers and aborted records are gaps).
    """
    while offset < last_stable:
        raw = [b for b in read(offset) if b.num_rows]
        if not raw:
            return []
        visible = committed_only(raw, txn, last_stable)
        if visible:
            return visible
        offset = int(raw[-1].column("offset")[raw[-1].num_rows - 1].as_py()) + 1
    return []
