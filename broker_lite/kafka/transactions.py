"""Kafka's transaction APIs on the Kafka listener, answered by the broker's coordinator.

InitProducerId with a transactional id, AddPartitionsToTxn (v0-3, the client's
form), AddOffsetsToTxn, TxnOffsetCommit, EndTxn, and for operators
DescribeTransactions, ListTransactions and DescribeProducers.  The state and
its rules are in :mod:`sparklog.broker_lite.transactions.coordinator`.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from kio.index import load_response_schema

from sparklog.broker_lite.kafka.messages import errno_of, make, ms, nested
from sparklog.broker_lite.kafka.offsets import commit_response
from sparklog.broker_lite.logs import fields
from sparklog.broker_lite.transactions.markers import transactions_view
from sparklog.errors import (
    InvalidProducerEpochError,
    ProducerFencedError,
    SparklogError,
    UnknownTopicOrPartitionError,
)

if TYPE_CHECKING:
    from sparklog.broker_lite.kafka.api_types import (
        AddOffsetsToTxnRequest,
        AddOffsetsToTxnResponse,
        AddPartitionsToTxnRequest,
        AddPartitionsToTxnResponse,
        DescribeProducersRequest,
        DescribeProducersResponse,
        DescribeTransactionsRequest,
        DescribeTransactionsResponse,
        EndTxnRequest,
        EndTxnResponse,
        InitProducerIdRequest,
        InitProducerIdResponse,
        ListTransactionsRequest,
        ListTransactionsResponse,
        TxnOffsetCommitRequest,
        TxnOffsetCommitResponse,
    )
    from sparklog.broker_lite.kafka.context import BrokerView, HandlerContext


#: Kafka's OPERATION_NOT_ATTEMPTED: the other partitions of a refused AddPartitionsToTxn
OPERATION_NOT_ATTEMPTED = 55

#: the first version of each transaction API whose client knows PRODUCER_FENCED (KIP-588);
#: older versions get INVALID_PRODUCER_EPOCH for it, as Kafka answers them (kafkajs 2.2
#: sends AddPartitionsToTxn v1 and reports code 90 as an unknown error)
PRODUCER_FENCED_SINCE = {22: 4, 24: 2, 25: 2, 26: 2, 28: 3}
TRANSACTION_APIS = {
    22: "InitProducerId",
    24: "AddPartitionsToTxn",
    25: "AddOffsetsToTxn",
    26: "EndTxn",
    28: "TxnOffsetCommit",
}
log = logging.getLogger("sparklog.broker_lite.transactions")


def txn_errno(ctx: HandlerContext, api_key: int, exc: BaseException, transactional_id: str) -> int:
    """Kafka's error code for ``exc`` in the answer to ``api_key`` at the request's version.

    Every refusal is logged once at WARNING: a refused transactional request
    aborts the client's transaction (or kills it), so the broker says why.
    """
    log.warning(
        "transactional request refused",
        extra=fields(
            api=TRANSACTION_APIS.get(api_key, api_key),
            transactional_id=transactional_id,
            error=type(exc).__name__,
            reason=str(exc),
        ),
    )
    return _code(ctx, api_key, exc)


def _code(ctx: HandlerContext, api_key: int, exc: BaseException) -> int:
    if isinstance(exc, ProducerFencedError) and ctx.api_version < PRODUCER_FENCED_SINCE[api_key]:
        return int(InvalidProducerEpochError.errno)
    return errno_of(exc)


def init_transactional(
    ctx: HandlerContext, request: InitProducerIdRequest
) -> InitProducerIdResponse:
    """InitProducerId for a transactional id: its producer id and a new (fencing) epoch."""
    cls = load_response_schema(22, ctx.api_version)
    try:
        producer = ctx.broker.transactions.init_producer(
            str(request.transactional_id),
            ms(request.transaction_timeout),
            int(getattr(request, "producer_id", -1)),
            int(getattr(request, "producer_epoch", -1)),
        )
    except SparklogError as exc:
        return make(
            cls,
            throttle_time=0,
            error_code=txn_errno(ctx, 22, exc, str(request.transactional_id)),
            producer_id=-1,
            producer_epoch=-1,
        )
    return make(
        cls,
        throttle_time=0,
        error_code=0,
        producer_id=producer.producer_id,
        producer_epoch=producer.producer_epoch,
    )


def handle_add_partitions_to_txn(
    ctx: HandlerContext, request: AddPartitionsToTxnRequest
) -> AddPartitionsToTxnResponse:
    cls = load_response_schema(24, ctx.api_version)
    topic_cls = nested(cls, "AddPartitionsToTxnTopicResult")
    part_cls = nested(cls, "AddPartitionsToTxnPartitionResult")
    topics = request.v3_and_below_topics
    wanted = [(t.name, int(p)) for t in topics for p in t.partitions]
    try:
        found = ctx.broker.transactions.add_partitions(
            request.v3_and_below_transactional_id,
            int(request.v3_and_below_producer_id),
            int(request.v3_and_below_producer_epoch),
            wanted,
        )
        refused = [e for e in found.values() if e is not None]
        if refused:  # logged once for the request
            txn_errno(ctx, 24, refused[0], str(request.v3_and_below_transactional_id))
        untouched = OPERATION_NOT_ATTEMPTED if refused else 0
        codes = {tp: _code(ctx, 24, e) if e is not None else untouched for tp, e in found.items()}
    except SparklogError as exc:
        code = txn_errno(ctx, 24, exc, str(request.v3_and_below_transactional_id))
        codes = {tp: code for tp in wanted}
    by_topic: dict[str, list[Any]] = {}
    for (topic, p), code in codes.items():
        by_topic.setdefault(topic, []).append(
            make(part_cls, partition_index=p, partition_error_code=code)
        )
    return make(
        cls,
        throttle_time=0,
        error_code=0,
        results_by_topic_v3_and_below=tuple(
            make(topic_cls, name=name, results_by_partition=tuple(parts))
            for name, parts in by_topic.items()
        ),
    )


def handle_add_offsets_to_txn(
    ctx: HandlerContext, request: AddOffsetsToTxnRequest
) -> AddOffsetsToTxnResponse:
    cls = load_response_schema(25, ctx.api_version)
    try:
        ctx.broker.transactions.add_offsets(
            request.transactional_id,
            int(request.producer_id),
            int(request.producer_epoch),
            str(request.group_id),
        )
        code = 0
    except SparklogError as exc:
        code = txn_errno(ctx, 25, exc, str(request.transactional_id))
    return make(cls, throttle_time=0, error_code=code)


def handle_txn_offset_commit(
    ctx: HandlerContext, request: TxnOffsetCommitRequest
) -> TxnOffsetCommitResponse:
    cls = load_response_schema(28, ctx.api_version)
    topic_cls = nested(cls, "TxnOffsetCommitResponseTopic")
    part_cls = nested(cls, "TxnOffsetCommitResponsePartition")
    offsets: dict[tuple[str, int], tuple[int, str]] = {
        (t.name, int(p.partition_index)): (int(p.committed_offset), p.committed_metadata or "")
        for t in request.topics
        for p in t.partitions
    }
    try:
        ctx.broker.transactions.txn_offset_commit(
            request.transactional_id,
            str(request.group_id),
            int(request.producer_id),
            int(request.producer_epoch),
            offsets,
        )
        code = 0
    except SparklogError as exc:
        code = txn_errno(ctx, 28, exc, str(request.transactional_id))
    return commit_response(cls, topic_cls, part_cls, request.topics, code)


def handle_end_txn(ctx: HandlerContext, request: EndTxnRequest) -> EndTxnResponse:
    cls = load_response_schema(26, ctx.api_version)
    try:
        ctx.broker.transactions.end(
            request.transactional_id,
            int(request.producer_id),
            int(request.producer_epoch),
            bool(request.committed),
        )
        code = 0
    except SparklogError as exc:
        code = txn_errno(ctx, 26, exc, str(request.transactional_id))
    return make(cls, throttle_time=0, error_code=code)


def handle_describe_transactions(
    ctx: HandlerContext, request: DescribeTransactionsRequest
) -> DescribeTransactionsResponse:
    cls = load_response_schema(65, ctx.api_version)
    state_cls = nested(cls, "TransactionState")
    topic_cls = nested(cls, "TopicData")
    known = ctx.broker.transactions.list()
    out = []
    for tid in request.transactional_ids:
        state = known.get(tid)
        if state is None:
            out.append(
                make(
                    state_cls,
                    error_code=105,
                    transactional_id=tid,
                    transaction_state="",
                    transaction_timeout=0,
                    transaction_start_time=0,
                    producer_id=-1,
                    producer_epoch=-1,
                    topics=(),
                )
            )
            continue
        by_topic: dict[str, list[int]] = {}
        for topic, p in state.get("partitions", []):
            by_topic.setdefault(topic, []).append(int(p))
        out.append(
            make(
                state_cls,
                error_code=0,
                transactional_id=tid,
                transaction_state=state["state"],  # Kafka's state names
                transaction_timeout=int(state["timeout_ms"]),
                transaction_start_time=max(int(state.get("started_ms", 0)), 0),
                producer_id=int(state["pid"]),
                producer_epoch=int(state["epoch"]),
                topics=tuple(
                    make(topic_cls, topic=t, partitions=tuple(ps)) for t, ps in by_topic.items()
                ),
            )
        )
    return make(cls, throttle_time=0, transaction_states=tuple(out))


def handle_list_transactions(
    ctx: HandlerContext, request: ListTransactionsRequest
) -> ListTransactionsResponse:
    cls = load_response_schema(66, ctx.api_version)
    state_cls = nested(cls, "TransactionState")
    states = set(request.state_filters or ())
    pids = {int(p) for p in request.producer_id_filters or ()}
    out = []
    for tid, state in sorted(ctx.broker.transactions.list().items()):
        if states and state["state"] not in states:
            continue
        if pids and int(state["pid"]) not in pids:
            continue
        out.append(
            make(
                state_cls,
                transactional_id=tid,
                producer_id=int(state["pid"]),
                transaction_state=state["state"],
            )
        )
    return make(
        cls, throttle_time=0, error_code=0, unknown_state_filters=(), transaction_states=tuple(out)
    )


def handle_describe_producers(
    ctx: HandlerContext, request: DescribeProducersRequest
) -> DescribeProducersResponse:
    """The producers of each partition: their epochs, last sequences and open transactions."""
    cls = load_response_schema(61, ctx.api_version)
    topic_cls = nested(cls, "TopicResponse")
    part_cls = nested(cls, "PartitionResponse")
    state_cls = nested(cls, "ProducerState")
    topics = []
    for t in request.topics:
        parts = []
        for p in t.partition_indexes:
            try:
                producers = _producers(ctx.broker, t.name, int(p))
                parts.append(
                    make(
                        part_cls,
                        partition_index=p,
                        error_code=0,
                        error_message=None,
                        active_producers=tuple(make(state_cls, **one) for one in producers),
                    )
                )
            except SparklogError as exc:
                parts.append(
                    make(
                        part_cls,
                        partition_index=p,
                        error_code=errno_of(exc),
                        error_message=str(exc),
                        active_producers=(),
                    )
                )
        topics.append(make(topic_cls, name=t.name, partitions=tuple(parts)))
    return make(cls, throttle_time=0, topics=tuple(topics))


def _producers(broker: BrokerView, topic: str, partition: int) -> list[dict[str, Any]]:
    try:
        st = broker.partition_state(broker.topic(topic), partition)
    except SparklogError:
        raise UnknownTopicOrPartitionError(f"{topic}-{partition} does not exist") from None
    _hwm, _lso, txn = transactions_view(broker, topic, partition)
    with st.lock:
        producers = dict(st.log.state.producers)
    opened = txn.get("open") or {}
    out = []
    for pid, entry in sorted(producers.items()):
        start = opened.get(pid)
        out.append(
            {
                "producer_id": int(pid),
                "producer_epoch": int(entry["epoch"]),
                "last_sequence": int(entry.get("last_seq", -1)),
                "last_timestamp": int(entry.get("ts", -1)),
                "coordinator_epoch": 0,
                "current_txn_start_offset": int(start["first"]) if start else -1,
            }
        )
    return out
