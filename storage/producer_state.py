"""Idempotent producers' state in a partition (Kafka's ``ProducerStateManager``).

Per producer id: the epoch, the last sequence, the last few batches' sequence
ranges with their base offsets (so a retried batch is answered with where it
landed) and the last write time (for ``producer.id.expiration.ms``).  One dedup
rule, :func:`duplicate_of`, serves storage and the broker; :func:`apply_producer`
is how a commit's producer entry updates that state.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sparklog.errors import OutOfOrderSequenceNumberError, ProducerFencedError

log = logging.getLogger("sparklog.storage.producers")

#: batches per producer whose sequence ranges a partition remembers (Kafka keeps 5)
PRODUCER_RECENT_BATCHES = 5
DEFAULT_PRODUCER_EXPIRATION_MS = 86_400_000


@dataclass(frozen=True)
class ProducerBatch:
    """Identity of an idempotent producer's batch (Kafka's pid/epoch/sequence)."""

    producer_id: int
    producer_epoch: int
    first_sequence: int
    record_count: int

    @property
    def last_sequence(self) -> int:
        return self.first_sequence + self.record_count - 1


def duplicate_of(
    producers: Mapping[str, Mapping[str, Any]],
    batch: ProducerBatch,
    where: str,
    *,
    repaired_ms: int = -1,
) -> int | None:
    """THE dedup rule of idempotent producers (storage and broker both use it).

    Returns None if ``batch`` is the next one in sequence (to be appended), the
    base offset where it landed if it (or a range containing it) was committed
    before; raises ProducerFencedError for an older producer epoch and
    OutOfOrderSequenceNumberError for a gap or a batch too old to place.

    ``repaired_ms`` (>= 0) is when ``sparklog log recover`` gave up offsets of
    this partition: a damaged commit was lost, and with it the sequences of
    whichever producers it held.  A producer whose state predates the repair
    may then continue past a gap (its lost records are gone; nothing it sends
    can duplicate what the log holds, which the remembered batches still
    catch), instead of being refused with OUT_OF_ORDER_SEQUENCE_NUMBER, which
    is fatal to librdkafka's idempotent producer.
    """
    entry = producers.get(str(batch.producer_id))
    gap_allowed = repaired_ms >= 0 and (entry is None or int(entry.get("ts", 0)) <= repaired_ms)
    if entry is not None and batch.producer_epoch < entry["epoch"]:
        raise ProducerFencedError(
            f"producer {batch.producer_id} epoch {batch.producer_epoch} is fenced by epoch "
            f"{entry['epoch']} in partition {where}"
        )
    if entry is None or batch.producer_epoch > entry["epoch"]:
        if batch.first_sequence != 0 and gap_allowed:
            _log_gap(batch, where, "its state was lost")
        elif batch.first_sequence != 0:
            raise OutOfOrderSequenceNumberError(
                f"producer {batch.producer_id} epoch {batch.producer_epoch} is unknown to "
                f"partition {where}; its first sequence must be 0, got {batch.first_sequence}"
            )
        return None
    for first, last, base in entry["recent"]:
        if first <= batch.first_sequence and batch.last_sequence <= last and base >= 0:
            return int(base) + batch.first_sequence - int(first)
    if batch.last_sequence <= entry["last_seq"]:
        raise OutOfOrderSequenceNumberError(
            f"producer {batch.producer_id} batch with sequences {batch.first_sequence}-"
            f"{batch.last_sequence} is older than the last {len(entry['recent'])} batches "
            f"partition {where} remembers (DUPLICATE_SEQUENCE); it was committed before"
        )
    expected = entry["last_seq"] + 1
    if batch.first_sequence > expected and gap_allowed:
        _log_gap(batch, where, f"expected sequence {expected}")
    elif batch.first_sequence != expected:
        raise OutOfOrderSequenceNumberError(
            f"producer {batch.producer_id} sent sequence {batch.first_sequence} to partition "
            f"{where}; expected {expected}"
        )
    return None


def _log_gap(batch: ProducerBatch, where: str, why: str) -> None:
    log.warning(
        "producer %d epoch %d continues at sequence %d in partition %s after a repair gave up "
        "offsets (%s): the records between were lost with the damaged commit",
        batch.producer_id,
        batch.producer_epoch,
        batch.first_sequence,
        where,
        why,
    )


def apply_producer(
    producers: dict[str, dict[str, Any]], producer: Mapping[str, Any], base: int, ts: int
) -> None:
    """Record a committed batch of ``producer`` (its commit entry) landing at ``base``."""
    pid = str(producer["id"])
    entry = producers.get(pid)
    if entry is None or producer["epoch"] > entry["epoch"]:
        entry = {"epoch": producer["epoch"], "last_seq": -1, "recent": []}
    entry["last_seq"] = producer["last_seq"]
    entry["recent"] = [*entry["recent"], [producer["first_seq"], producer["last_seq"], base]][
        -PRODUCER_RECENT_BATCHES:
    ]
    entry["ts"] = ts
    producers[pid] = entry
