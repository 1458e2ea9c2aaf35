"""A brokerless writer's commit, handed to the broker whose journal leases the shard.

The Spark sink and embedded producers write their own objects and commit them into the
shard logs.  A shard a broker leads is leased to that broker's journal (format 3); a
direct commit of it would revoke the lease, fail the leader's in-flight steps of the
shard and make it lease the shard again.  So, per shard, a writer that finds a lease
hands the commit, marker and producer batches included, to the lease's broker (Flight
``commit_staged``), which journals it like its own flushes.  Where no lease names a
journal, or its broker is not registered, cannot be reached or refuses, the writer
commits directly as it always did: the log's optimistic concurrency keeps that right
(docs/architecture.md, "Brokerless writers hand their commits to the leader").  A
mirror link's copier does the same with its copies (:func:`commit_mirrored`, Flight
``commit_mirrored``): segments at the source's offsets, each partition's planned end
checked by the leader as the direct commit checks it.

A handed commit whose answer is lost is followed by the direct commit: a Spark batch's
``(app id, version)`` marker and an idempotent producer's sequences make that land once;
a writer with neither may land the records twice, as a Kafka producer without
idempotence may on a retry.  The call goes without credentials, in plain gRPC, so only
to a broker whose registration says its Flight listener is PLAINTEXT; a broker that
refuses it anyway or cannot be reached is not asked again for :data:`REFUSED_PAUSE_S`.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pyarrow.flight as flight

from sparklog.errors import CorruptRecordError, SparklogError
from sparklog.protocol import actions
from sparklog.protocol import flight as wire
from sparklog.storage import Segment, Topic
from sparklog.storage.catalog import LogRoot
from sparklog.storage.journal import JournalRef
from sparklog.storage.log import AppendResult, MirrorPositionMovedError, ProducerBatch

log = logging.getLogger(__name__)

#: how long a broker that could not take a handed commit is not asked again
REFUSED_PAUSE_S = 60.0
#: a handed commit's deadline: a journal commit, and a lease before it at worst
HAND_OVER_TIMEOUT_S = 10.0

_lock = threading.Lock()
_clients: dict[str, flight.FlightClient] = {}
_pid = os.getpid()
_paused: dict[str, float] = {}


def commit(
    root: LogRoot,
    topic: Topic,
    staged: Mapping[int, Segment | Sequence[Segment]],
    *,
    producers: Mapping[int, ProducerBatch] | None = None,
    txn: tuple[str, int] | None = None,
) -> dict[int, AppendResult]:
    """:meth:`Topic.commit` of ``staged`` (one atomic commit per shard), the shards a
    broker's journal leases handed to that broker (:func:`hand_over`), the others
    committed directly."""
    out, left = hand_over(root, topic, staged, producers=producers, txn=txn)
    if left:
        batches = {p: b for p, b in (producers or {}).items() if p in left}
        out.update(topic.commit(left, producers=batches, txn=txn))
    return out


def hand_over(
    root: LogRoot,
    topic: Topic,
    staged: Mapping[int, Segment | Sequence[Segment]],
    *,
    producers: Mapping[int, ProducerBatch] | None = None,
    txn: tuple[str, int] | None = None,
) -> tuple[dict[int, AppendResult], dict[int, Sequence[Segment]]]:
    """Hand the shards of ``staged`` that a broker's journal leases to that broker (one
    ``commit_staged`` call, one journal commit, for all of a broker's shards); (the
    handed partitions' results, the partitions the caller is to commit directly).  The
    caller holds the shards' handles (their views are read and refreshed)."""
    batches = producers or {}

    def send(location: str, appends: Mapping[int, Sequence[Segment]]) -> Handed:
        return _hand_over(
            location,
            actions.COMMIT_STAGED,
            topic,
            appends,
            producers={
                str(p): [b.producer_id, b.producer_epoch, b.first_sequence, b.record_count]
                for p, b in batches.items()
                if p in appends
            },
            txn=list(txn) if txn is not None else None,
        )

    return _route(root, topic, staged, send)


def commit_mirrored(
    root: LogRoot,
    topic: Topic,
    appends: Mapping[int, Sequence[Segment]],
    *,
    link: str,
    expected: Mapping[int, int],
) -> dict[int, AppendResult]:
    """:meth:`Topic.append_mirrored` of a mirror link's copy (segments at the source's
    offsets, each partition's commit landing only while its end is still ``expected``),
    the shards a broker's journal leases handed to that broker (``commit_mirrored``),
    the others committed directly.  A moved end comes back as the direct commit's
    :class:`MirrorPositionMovedError` (an overlap as its ``CorruptRecordError``), not
    retried directly; a handed copy whose answer was lost is found in place by the
    direct commit that follows (``duplicate``)."""

    def send(location: str, parts: Mapping[int, Sequence[Segment]]) -> Handed:
        return _hand_over(
            location,
            actions.COMMIT_MIRRORED,
            topic,
            parts,
            verdicts=(MirrorPositionMovedError, CorruptRecordError),
            link=link,
            expected={str(p): expected[p] for p in parts},
        )

    out, left = _route(root, topic, appends, send)
    if left:
        out.update(topic.append_mirrored(left, link=link, expected={p: expected[p] for p in left}))
    return out


#: what a broker made of a handed commit: its partitions' results; None: it did not
#: take it (unreachable, refused, no longer leading, or the answer was lost)
Handed = dict[int, AppendResult] | None


def _route(
    root: LogRoot,
    topic: Topic,
    appends: Mapping[int, Segment | Sequence[Segment]],
    send: Callable[[str, Mapping[int, Sequence[Segment]]], Handed],
) -> tuple[dict[int, AppendResult], dict[int, Sequence[Segment]]]:
    """Send the shards of ``appends`` that a broker's journal leases to that broker, one
    ``send`` per broker for all its shards; (the handed partitions' results, the
    partitions left to commit directly).  A shard its leaser did not take is tried once
    more after re-reading its log (the lease may have moved; a commit that landed though
    its answer was lost is in the view the caller's direct commit is built on)."""
    by_shard: dict[int, dict[int, Sequence[Segment]]] = {}
    for p, segments in appends.items():
        listed = [segments] if isinstance(segments, Segment) else segments
        by_shard.setdefault(topic.info.shard_of(p), {})[p] = listed
    out: dict[int, AppendResult] = {}
    tried: dict[int, str] = {}  # shard -> the location that did not take it
    left = sorted(by_shard)
    for attempt in range(2):
        by_location: dict[str, list[int]] = {}
        for shard in left:
            view = topic.shard(shard)
            ref = view.state.journal if attempt == 0 else view.refresh().journal
            location = _location(root, ref)
            if location is not None and location != tried.get(shard):
                by_location.setdefault(location, []).append(shard)
        left = []
        for location, shards in sorted(by_location.items()):
            handed = send(location, {p: segs for s in shards for p, segs in by_shard[s].items()})
            if handed is None:
                tried.update(dict.fromkeys(shards, location))
                left.extend(shards)
            else:
                out.update(handed)
                for s in shards:
                    del by_shard[s]
        if not left:
            break
    return out, {p: segs for parts in by_shard.values() for p, segs in parts.items()}


def _location(root: LogRoot, ref: JournalRef | None) -> str | None:
    """The Flight location of the broker writing journal ``ref``; None: no lease, or its
    broker is unregistered, fenced, or not to be asked now."""
    if ref is None:
        return None
    entry = root.metadata.image().broker(ref.broker)
    if entry is None or entry.get("fenced"):
        return None
    if entry.get("flight_security", "PLAINTEXT") != "PLAINTEXT":
        return None  # it asks for users or TLS: a writer without credentials commits itself
    location = str(entry["location"])
    return None if _is_paused(location) else location


def _hand_over(
    location: str,
    action: actions.Action[dict[str, Any]],
    topic: Topic,
    appends: Mapping[int, Sequence[Segment]],
    *,
    verdicts: tuple[type[SparklogError], ...] = (),
    **body: Any,
) -> Handed:
    """The commit of ``appends`` (``action``, with ``body``'s other fields) as the broker
    at ``location`` made it; None: it did not.  A refusal of a class in ``verdicts`` is
    the commit's own answer (a direct commit would be refused alike): raised as it is."""
    try:
        answer = _call(
            location,
            action,
            topic=topic.name,
            topic_id=topic.info.topic_id,
            appends={str(p): [s.to_json() for s in segs] for p, segs in appends.items()},
            **body,
        )
    except Exception as exc:
        refused = wire.decode(str(exc)) if isinstance(exc, flight.FlightError) else None
        if isinstance(refused, verdicts):
            raise refused from None
        log.info("commit of %s not handed to the broker at %s: %s", topic.name, location, exc)
        return None
    return {
        int(p): AppendResult(int(base), int(count), int(version), bool(duplicate))
        for p, (base, count, version, duplicate) in answer.items()
    }


def _call(location: str, action: actions.Action[dict[str, Any]], **body: Any) -> dict[str, Any]:
    options = flight.FlightCallOptions(timeout=HAND_OVER_TIMEOUT_S)
    request = flight.Action(action.name, action.build(**body))
    try:
        results = list(_client(location).do_action(request, options))
    except (
        flight.FlightUnauthenticatedError,
        flight.FlightUnauthorizedError,
        flight.FlightUnavailableError,  # nothing listens there, or it speaks TLS
    ):
        _pause(location)
        raise
    return action.result(wire.decode_result(results[0].body.to_pybytes()))


def _client(location: str) -> flight.FlightClient:
    global _pid
    with _lock:
        if _pid != os.getpid():  # a forked child (a Spark Python worker): the parent's
            _clients.clear()  # gRPC channels are not usable here
            _pid = os.getpid()
        client = _clients.get(location)
        if client is None:
            client = _clients[location] = flight.FlightClient(f"grpc://{location}")
        return client


def _is_paused(location: str) -> bool:
    with _lock:
        return _paused.get(location, 0.0) > time.monotonic()


def _pause(location: str) -> None:
    with _lock:
        _paused[location] = time.monotonic() + REFUSED_PAUSE_S
