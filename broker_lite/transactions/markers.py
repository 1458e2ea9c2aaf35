"""Writing a transaction's end (commit/abort markers) to partitions through this broker.

A marker is a commit of the partition's shard log (see
:meth:`sparklog.storage.log.ShardLog.end_transactions`), made under the shard's
lock with this broker's leader epoch when it leads the shard, and with the
log's optimistic concurrency otherwise (as brokerless writers commit): the
leader then sees it at its next commit or refresh.  Partitions of one shard
get their markers in one commit.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from sparklog.broker_lite.partition_state import ShardState, storage_call
from sparklog.storage.txn_markers import Marker

if TYPE_CHECKING:
    from sparklog.broker_lite.transactions.host import TransactionHost


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
    for group in by_shard.values():
        states = {p: broker.partition_state(topic, p) for p in group}
        shard = next(iter(states.values())).shard
        with shard.lock:
            placed.update(storage_call(functools.partial(_end, shard, group)))
        for st in states.values():
            with st.changed:
                st.changed.notify_all()
    broker.count_commit()
    return placed


def _end(shard: ShardState, group: Mapping[int, Marker]) -> dict[int, int]:
    placed: dict[int, int] = shard.log.end_transactions(group, leader_epoch=shard.epoch)
    return placed


def transactions_view(
    broker: TransactionHost, topic_name: str, partition: int
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
