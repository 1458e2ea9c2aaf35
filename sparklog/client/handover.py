"""A brokerless writer's commit, handed to the broker whose journal leases the shard.

The Spark sink and embedded producers write their own objects and commit them into the
shard logs.  A shard a broker leads is leased to that broker's journal (format 3); a
direct commit of it would revoke the lease, fail the leader's in-flight steps of the
shard and make it lease the shard again.  So, per shard, a writer that finds a lease
hands the commit, marker and producer batches included, to the lease's broker (Flight
``commit_staged``), which journals it like its own flushes.  Where no lease names a
journal, or its broker is not registered, cannot be reached or refuses, the writer
commits directly as it always did: the log's optimistic concurrency keeps that right
(docs/architecture.md, "Brokerless writers hand their commits to the leader").

A handed commit whose answer is lost is followed by the direct commit: a Spark batch's
``(app id, version)`` marker and an idempotent producer's sequences make that land once;
a writer with neither may land the records twice, as a Kafka producer without
idempotence may on a retry.  The call goes without credentials, in plain gRPC: a broker
whose Flight listener asks for users or TLS refuses it, and that broker is not asked
again for :data:`REFUSED_PAUSE_S`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow.flight as flight

from sparklog.protocol import actions
from sparklog.protocol import flight as wire
from sparklog.storage import Segment, Topic
from sparklog.storage.catalog import LogRoot
from sparklog.storage.log import AppendResult, ProducerBatch

log = logging.getLogger(__name__)

#: how long a broker that could not take a handed commit is not asked again
REFUSED_PAUSE_S = 60.0
#: a handed commit's deadline: a journal commit, and a lease before it at worst
HAND_OVER_TIMEOUT_S = 10.0

_lock = threading.Lock()
_clients: dict[str, flight.FlightClient] = {}
_paused: dict[str, float] = {}


def commit(
    root: LogRoot,
    topic: Topic,
    staged: Mapping[int, Segment | Sequence[Segment]],
    *,
    producers: Mapping[int, ProducerBatch] | None = None,
    txn: tuple[str, int] | None = None,
) -> dict[int, AppendResult]:
    """:meth:`Topic.commit` of ``staged`` (one atomic commit per shard), each shard's
    handed to the broker whose journal leases it when there is one."""
    by_shard: dict[int, dict[int, Sequence[Segment]]] = {}
    for p, segments in staged.items():
        listed = [segments] if isinstance(segments, Segment) else segments
        by_shard.setdefault(topic.info.shard_of(p), {})[p] = listed
    out: dict[int, AppendResult] = {}
    for shard, appends in sorted(by_shard.items()):
        batches = {p: b for p, b in (producers or {}).items() if p in appends}
        handed = _hand_over(root, topic, shard, appends, batches, txn)
        if handed is None:
            handed = topic.commit(appends, producers=batches, txn=txn)
        out.update(handed)
    return out


def _hand_over(
    root: LogRoot,
    topic: Topic,
    shard: int,
    appends: Mapping[int, Sequence[Segment]],
    producers: Mapping[int, ProducerBatch],
    txn: tuple[str, int] | None,
) -> dict[int, AppendResult] | None:
    """The shard's commit as the leasing broker made it; None: commit it directly.  A
    refusal is tried once more after re-reading the log, in case the lease moved."""
    log_view = topic.shard(shard)
    tried: set[str] = set()
    for attempt in range(2):
        ref = log_view.state.journal if attempt == 0 else log_view.refresh().journal
        if ref is None:
            return None
        entry = root.metadata.image().broker(ref.broker)
        if entry is None or entry.get("fenced"):
            return None
        location = str(entry["location"])
        if location in tried or _is_paused(location):
            return None
        tried.add(location)
        try:
            answer = _call(
                location,
                topic=topic.name,
                topic_id=topic.info.topic_id,
                shard=shard,
                appends={str(p): [s.to_json() for s in segs] for p, segs in appends.items()},
                producers={
                    str(p): [b.producer_id, b.producer_epoch, b.first_sequence, b.record_count]
                    for p, b in producers.items()
                },
                txn=list(txn) if txn is not None else None,
            )
        except Exception as exc:  # unreachable, refused, no longer leading: try, then write
            log.info(
                "commit of %s shard %d not handed to broker %d at %s: %s",
                topic.name,
                shard,
                ref.broker,
                location,
                exc,
            )
            continue
        return {
            int(p): AppendResult(int(base), int(count), int(version), bool(duplicate))
            for p, (base, count, version, duplicate) in answer.items()
        }
    return None


def _call(location: str, **body: Any) -> dict[str, Any]:
    options = flight.FlightCallOptions(timeout=HAND_OVER_TIMEOUT_S)
    request = flight.Action(actions.COMMIT_STAGED.name, actions.COMMIT_STAGED.build(**body))
    try:
        results = list(_client(location).do_action(request, options))
    except (flight.FlightUnauthenticatedError, flight.FlightUnauthorizedError):
        _pause(location)
        raise
    except flight.FlightUnavailableError:  # nothing listens there, or it speaks TLS
        _pause(location)
        raise
    return actions.COMMIT_STAGED.result(wire.decode_result(results[0].body.to_pybytes()))


def _client(location: str) -> flight.FlightClient:
    with _lock:
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
