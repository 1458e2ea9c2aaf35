"""Writing a transaction's end (commit/abort markers) to partitions, each by its leader.

A marker is a commit of the partition's shard log (see
:meth:`sparklog.storage.log.ShardLog.end_transactions`); partitions of one shard get
their markers in one.  The shard's leader writes them, under the shard's lock with its
leader epoch and, holding the shard's lease, as a step of its journal: the coordinator
writes those of the shards it leads and hands the others to their leaders (Kafka's
WriteTxnMarkers, Flight action ``write_txn_markers``, :func:`write_led_markers` on the
leader).  A leader that cannot be reached or refuses is written around: the markers
are committed to its shard log directly, with the log's optimistic concurrency (which
revokes the shard from the leader's journal; the leader leases it again at its next
write).  Writing markers is idempotent, so a call whose answer was lost may be followed
by the direct write.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from sparklog.broker_lite.logs import fields
from sparklog.broker_lite.partition_state import ShardState, storage_call
from sparklog.errors import InvalidRequestError, NotLeaderOrFollowerError
from sparklog.protocol import actions
from sparklog.storage.txn_markers import Marker

if TYPE_CHECKING:
    from sparklog.broker_lite.transactions.host import PartitionHost, TransactionHost

log = logging.getLogger("sparklog.broker_lite.transactions")


def end_transactions(
    broker: TransactionHost, topic_name: str, ends: Mapping[int, Marker]
) -> dict[int, int]:
    """Write ``ends`` (partition -> marker): partition -> control record offset (-1: none)."""
    topic = broker.topic(topic_name)
    by_shard: dict[int, dict[int, Marker]] = {}
    shards = topic.info.shards
    for p, marker in ends.items():
        by_shard.setdefault(p % shards, {})[p] = marker
    placed: dict[int, int] = {}
    for shard, group in by_shard.items():
        handed = _to_leader(broker, topic_name, shard, group)
        placed.update(handed if handed is not None else _write_here(broker, topic_name, group))
    return placed


def _to_leader(
    broker: TransactionHost, topic: str, shard: int, group: Mapping[int, Marker]
) -> dict[int, int] | None:
    """The markers of one shard written by its leader when that is another live broker;
    None when this broker is to write them (it leads, no leader is known, or the leader
    did not take them)."""
    cluster = broker.cluster
    if cluster is None or not broker.peers.can_log_in:
        return None
    leader = cluster.shard_leader(topic, shard)
    if leader is None or leader.broker_id == broker.config.broker_id:
        return None
    markers = [
        [p, m.producer_id, m.producer_epoch, m.txn_number, m.committed]
        for p, m in sorted(group.items())
    ]
    try:
        answer = broker.peers.call(
            leader.location, actions.WRITE_TXN_MARKERS, topic=topic, markers=markers
        )
    except Exception as exc:  # unreachable, refused, or moved: write them here
        log.info(
            "transaction markers written to the shard log directly",
            extra=fields(topic=topic, shard=shard, leader=leader.broker_id, error=str(exc)),
        )
        return None
    return {int(p): int(offset) for p, offset in answer.items()}


def _write_here(
    broker: TransactionHost, topic_name: str, group: Mapping[int, Marker]
) -> dict[int, int]:
    """The markers of partitions of one shard, written by this broker."""
    topic = broker.topic(topic_name)
    states = {p: broker.partition_state(topic, p) for p in group}
    shard = next(iter(states.values())).shard
    with shard.lock:
        placed: dict[int, int] = storage_call(functools.partial(_end, shard, group))
    for st in states.values():
        with st.changed:
            st.changed.notify_all()
    broker.count_commit()
    return placed


def write_led_markers(broker: TransactionHost, topic: str, markers: list[Any]) -> dict[str, int]:
    """Flight ``write_txn_markers`` on a partition's leader: ``markers`` ([partition, producer
    id, epoch, transaction number, committed], partitions of one shard) written here, if
    this broker leads them; {partition: control record offset}."""
    try:
        ends = {
            int(p): Marker(int(pid), int(epoch), int(n), bool(committed))
            for p, pid, epoch, n, committed in markers
        }
    except (TypeError, ValueError):
        raise InvalidRequestError(
            "markers are not accepted; accepted: [[partition, producer id, producer epoch, "
            "transaction number, committed], ...]"
        ) from None
    cluster = broker.cluster
    data = broker.topic(topic)
    if not ends or len({p % data.info.shards for p in ends}) != 1:
        raise InvalidRequestError("markers are accepted for partitions of one shard only")
    if cluster is not None and not all(cluster.is_leader(topic, p) for p in ends):
        raise NotLeaderOrFollowerError(f"this broker does not lead {topic} {sorted(ends)}")
    return {str(p): offset for p, offset in _write_here(broker, topic, ends).items()}


def _end(shard: ShardState, group: Mapping[int, Marker]) -> dict[int, int]:
    placed: dict[int, int] = shard.log.end_transactions(group, leader_epoch=shard.epoch)
    return placed


def transactions_view(
    broker: PartitionHost, topic_name: str, partition: int
) -> tuple[int, int, dict[str, Any]]:
    """(high watermark, last stable offset, transactions) of a partition, as held here.

    While a transaction is open the shard log is re-read at most once per
    ``fetch_refresh_ms``: its end may have been written by another broker.
    """
    topic = broker.topic(topic_name)
    st = broker.partition_state(topic, partition)
    with st.lock:
        state = st.log.state
        if state.last_stable_offset < state.high_watermark:
            storage_call(lambda: st.refresh(broker.config.fetch_refresh_ms / 1000))
            state = st.log.state
        return int(state.high_watermark), int(state.last_stable_offset), state.transactions
