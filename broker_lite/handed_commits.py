"""Commits that brokerless writers hand to the shard's leader (Flight ``commit_staged``,
and ``commit_mirrored`` for a mirror link's copy).

The Spark sink and embedded producers upload their own objects; a commit of those
objects written into a shard log that a broker's journal leases would revoke the shard
from that journal (the leader's in-flight steps of it fail, and it leases the shard
again, bumping the epoch, at its next write).  So a writer that finds a lease hands its
commit to the lease's broker, which journals it as a step of its journal under the
shard's lock, like its own flushes (docs/architecture.md, "Brokerless writers hand their
commits to the leader").  The writer's ``(app id, version)`` marker and idempotent
producer batches are checked against the leader's view, so a commit handed over twice,
or handed over and then written directly after a lost answer, lands once.

The segments name objects the writer wrote; each is checked to exist, so a commit
cannot make the leader publish a reference to nothing.  A call may carry partitions of
several shards the broker leads (a Spark batch's commit of a topic): they share one
journal commit, each shard's step atomic, as a flush's.  The action is a writer of the
root's (``CLUSTER_ACTION``): whoever may call it may write the root.

A mirror link's copier writes the destination's objects too, with the source's offsets
(docs/mirroring.md); its commit is handed over the same way, checked the same way, and
journalled with the position check of :meth:`ShardLog.append_mirrored`: each partition's
planned end must still be the leader's, else the same ``MirrorPositionMovedError`` the
direct commit raises comes back (or ``duplicate``, when that copy is in place already:
a lost answer followed by the direct commit lands once).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Mapping
from typing import Any

from sparklog.broker_lite.broker_state import BrokerState
from sparklog.broker_lite.partition_state import ShardState, storage_call
from sparklog.errors import (
    InvalidRequestError,
    NotLeaderOrFollowerError,
    UnknownTopicIdError,
)
from sparklog.storage import Segment, Topic
from sparklog.storage.log import AppendResult, ProducerBatch, ShardLog
from sparklog.storage.metalog import Commit

#: turns a shard's journalled body (None: nothing to write) into its partitions' results
Finish = Callable[[Commit | None], dict[int, AppendResult]]
#: a shard's step: its log's staged body against the leader's view, and its :data:`Finish`
Stage = Callable[[ShardLog, Mapping[int, list[Segment]]], tuple[Commit | None, Finish]]
#: a shard's commit to its log, where this broker journals no records (format 2)
Direct = Callable[[ShardState, Mapping[int, list[Segment]]], dict[int, AppendResult]]


def commit_handed_over(
    state: BrokerState,
    topic_name: str,
    topic_id: str,
    appends: Mapping[str, Any],
    producers: Mapping[str, Any],
    txn: list[Any] | None,
) -> dict[str, list[Any]]:
    """Flight ``commit_staged`` on the leader of ``appends``' partitions (of one or more
    shards of the topic): each shard's commit a step of ONE journal commit of this
    broker; {partition: [base offset, records, version, duplicate]}."""
    topic = _topic(state, topic_name, topic_id)
    staged, batches, marker = _parse(appends, producers, txn)

    def stage(log: ShardLog, parts: Mapping[int, list[Segment]]) -> tuple[Commit | None, Finish]:
        mine = {p: b for p, b in batches.items() if p in parts}
        return log.stage_append(parts, producers=mine, txn=marker)

    def direct(shard: ShardState, parts: Mapping[int, list[Segment]]) -> dict[int, AppendResult]:
        mine = {p: b for p, b in batches.items() if p in parts}
        return shard.log.append(parts, leader_epoch=shard.epoch, producers=mine, txn=marker)

    return _commit_as_leader(state, topic, staged, stage, direct, "commit_staged")


def commit_mirrored_handed_over(
    state: BrokerState,
    topic_name: str,
    topic_id: str,
    appends: Mapping[str, Any],
    link: str,
    expected: Mapping[str, Any],
) -> dict[str, list[Any]]:
    """Flight ``commit_mirrored`` on the leader of ``appends``' partitions: a mirror
    link's copy (segments at the source's offsets) journalled as one step per shard in
    ONE journal commit, each partition's ``expected`` end checked against this leader's
    view as :meth:`ShardLog.append_mirrored` checks it (a moved end is refused with the
    same :class:`MirrorPositionMovedError`; a copy already in place is a duplicate);
    {partition: [base offset, records, version, duplicate]}."""
    topic = _topic(state, topic_name, topic_id)
    mirrored, ends = _parse_mirrored(appends, link, expected)

    def stage(log: ShardLog, parts: Mapping[int, list[Segment]]) -> tuple[Commit | None, Finish]:
        return log.stage_append_mirrored(parts, link=link, expected={p: ends[p] for p in parts})

    def direct(shard: ShardState, parts: Mapping[int, list[Segment]]) -> dict[int, AppendResult]:
        return shard.log.append_mirrored(parts, link=link, expected={p: ends[p] for p in parts})

    return _commit_as_leader(state, topic, mirrored, stage, direct, "commit_mirrored")


def _topic(state: BrokerState, topic_name: str, topic_id: str) -> Topic:
    topic = state.topic(topic_name)
    if topic.info.topic_id != topic_id:
        raise UnknownTopicIdError(
            f"topic {topic_name!r} has id {topic.info.topic_id}, not {topic_id}: it was "
            "deleted and created again"
        )
    return topic


def _commit_as_leader(
    state: BrokerState,
    topic: Topic,
    appends: Mapping[int, list[Segment]],
    stage: Stage,
    direct: Direct,
    action: str,
) -> dict[str, list[Any]]:
    """The checks every handed commit gets (it names partitions, this broker leads them,
    their objects exist), then each shard's step in one journal commit under the shards'
    locks (taken in key order, as a flush takes them); waiting fetches are woken."""
    if not appends:
        raise InvalidRequestError(f"{action} names no partition; accepted: one or more")
    for p in appends:
        state.check_leader(topic.name, p)
    _check_objects_exist(topic, appends)
    states = {p: state.partition_state(topic, p) for p in appends}
    by_shard: dict[tuple[str, str, int], tuple[ShardState, dict[int, list[Segment]]]] = {}
    for p, segments in appends.items():
        shard = states[p].shard
        by_shard.setdefault(shard.key, (shard, {}))[1][p] = segments
    groups = [by_shard[key] for key in sorted(by_shard)]
    with contextlib.ExitStack() as locked:
        for shard, _ in groups:
            locked.enter_context(shard.lock)
        results = storage_call(functools.partial(_commit, state, groups, stage, direct))
    fresh = [p for p, r in results.items() if not r.duplicate]
    for p in fresh:
        with states[p].changed:
            states[p].changed.notify_all()
    state.count_commit()
    for hook in state.commit_hooks if fresh else ():
        hook(topic.name, fresh)
    return {
        str(p): [r.base_offset, r.record_count, r.version, r.duplicate] for p, r in results.items()
    }


def _parse(
    appends: Mapping[str, Any], producers: Mapping[str, Any], txn: list[Any] | None
) -> tuple[dict[int, list[Segment]], dict[int, ProducerBatch], tuple[str, int] | None]:
    try:
        staged = {
            int(p): [Segment.from_json(raw) for raw in segments] for p, segments in appends.items()
        }
        batches = {
            int(p): ProducerBatch(int(pid), int(epoch), int(first), int(count))
            for p, (pid, epoch, first, count) in producers.items()
        }
        marker = (str(txn[0]), int(txn[1])) if txn is not None else None
    except (TypeError, ValueError, IndexError):
        raise InvalidRequestError(
            "commit_staged is not accepted; accepted: appends {partition: [segment, ...]}, "
            "producers {partition: [producer id, epoch, first sequence, records]}, "
            "txn [app id, version]"
        ) from None
    for p, segments in staged.items():
        if any(seg.base_offset != -1 or ".." in seg.object_key.split("/") for seg in segments):
            raise InvalidRequestError(
                f"partition {p}: only staged segments (base_offset -1) of the root's objects "
                "are accepted"
            )
    return staged, batches, marker


def _parse_mirrored(
    appends: Mapping[str, Any], link: str, expected: Mapping[str, Any]
) -> tuple[dict[int, list[Segment]], dict[int, int]]:
    """``commit_mirrored``'s segments (placed: ``base_offset`` at the source's offset, in
    order) and each partition's planned end, every one named."""
    if not link:
        raise InvalidRequestError("commit_mirrored names no link; accepted: the link's name")
    try:
        mirrored = {
            int(p): [Segment.from_json(raw) for raw in segments] for p, segments in appends.items()
        }
        ends = {int(p): int(end) for p, end in expected.items()}
    except (TypeError, ValueError, KeyError):
        raise InvalidRequestError(
            "commit_mirrored is not accepted; accepted: appends {partition: [segment, ...]}, "
            "expected {partition: planned end offset}"
        ) from None
    for p, segments in mirrored.items():
        if p not in ends:
            raise InvalidRequestError(
                f"commit_mirrored: partition {p} has no expected end; accepted: the end its "
                "copy was planned from"
            )
        if any(seg.base_offset < 0 or ".." in seg.object_key.split("/") for seg in segments):
            raise InvalidRequestError(
                f"partition {p}: only placed segments (base_offset 0 or more) of the root's "
                "objects are accepted"
            )
    return mirrored, ends


def _check_objects_exist(topic: Topic, staged: Mapping[int, list[Segment]]) -> None:
    keys = {seg.object_key for segments in staged.values() for seg in segments}
    for key in sorted(keys):
        store, path = topic.store.locate(key)
        if not storage_call(functools.partial(store.exists, path)):
            raise InvalidRequestError(f"object {key} of {topic.name} does not exist")


def _commit(
    state: BrokerState,
    groups: list[tuple[ShardState, dict[int, list[Segment]]]],
    stage: Stage,
    direct: Direct,
) -> dict[int, AppendResult]:
    """Every shard's commit as a step of one journal commit (each shard leased first if
    needed); shard log commits where the broker journals no records (format 2).  A shard
    a direct writer revoked meanwhile is leased again and journalled once more."""
    writer = state.journal
    results: dict[int, AppendResult] = {}
    if writer is None or not state.config.journal_records:
        for shard, appends in groups:
            results.update(direct(shard, appends))
        return results
    pending = groups
    for _ in range(2):
        staged = []
        for shard, appends in pending:
            body, finish = stage(shard.log, appends)
            shard.epoch = shard.log.leader_epoch
            if body is None:
                results.update(finish(None))
            else:
                staged.append((shard, appends, body, finish))
        if not staged:
            return results
        landed = writer.write_shards({shard.log.journal_key: body for shard, _, body, _ in staged})
        pending = []
        for shard, appends, body, finish in staged:
            if shard.log.journal_key in landed.revoked:
                pending.append((shard, appends))  # lease again, on the revoker's commit
                continue
            results.update(finish(shard.log.journalled(landed.ref, landed.version, body)))
        if not pending:
            return results
    for shard, _ in pending:
        shard.epoch = None
    raise NotLeaderOrFollowerError(
        f"{pending[0][0].log.name}: revoked by another writer twice; commit directly",
        leader_location="",
    )
