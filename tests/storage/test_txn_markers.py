"""Transactions in the shard log: control records, the last stable offset, aborted records.

A hypothesis test interleaves transactional producers (appends, commits,
aborts), plain producers, retention (DeleteRecords up to the last stable
offset), compaction and reopenings of the log (snapshots every few commits), on file, memory
and S3 (moto) roots, and checks what Kafka promises a read_committed reader: it never
sees an aborted or open record, it sees every committed one, control records
take offsets but are never returned, and the last stable offset never goes back.
"""

from __future__ import annotations

import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparklog.errors import InvalidTxnStateError
from sparklog.storage import ProducerBatch, make_batch, open_root
from sparklog.storage.maintenance import compact, delete_records
from sparklog.storage.txn_markers import Marker, aborted_between, drop_aborted
from tests.support.s3 import MotoS3

# (kind, producer 0-2): kinds: "txn" write, "commit", "abort", "plain" write, "reopen"
operation = st.tuples(
    st.sampled_from(["txn", "txn", "commit", "abort", "plain", "reopen", "retention", "compact"]),
    st.integers(0, 2),
)


class Writer:
    """One transactional producer's state as its coordinator would keep it."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.seq = 0
        self.number = 1
        self.open: list[tuple[bytes, int]] = []


def _visible(topic, partition: int) -> tuple[list[bytes], int, int]:
    log = topic.partition(partition)
    state = log.state
    lso = state.last_stable_offset
    batches = (
        list(log.iter_batches(log.log_start_offset, lso)) if lso > log.log_start_offset else []
    )
    kept = drop_aborted(batches, aborted_between(state.transactions, 0, lso))
    values = [v for b in kept for v in b.column("value").to_pylist()]
    return values, lso, state.high_watermark


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(operation, min_size=1, max_size=25), st.sampled_from(["file", "memory"]))
def test_read_committed_sees_exactly_the_committed_records(tmp_path_factory, ops, kind) -> None:
    url = (
        f"memory://txn-{uuid.uuid4().hex}"
        if kind == "memory"
        else f"file://{tmp_path_factory.mktemp('txn')}"
    )
    _check_read_committed(url, {}, ops)


@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(st.lists(operation, min_size=1, max_size=20))
def test_read_committed_sees_exactly_the_committed_records_on_s3(moto_s3: MotoS3, ops) -> None:
    """The same on S3 (moto's server through s3fs): conditional creates, listings, snapshots."""
    _check_read_committed(moto_s3.fresh_root(), moto_s3.storage_options, ops)


def _check_read_committed(url: str, options: dict, ops: list[tuple[str, int]]) -> None:
    def reopen():
        return open_root(url, options, snapshot_interval=3)

    # compacted and deleted, every record keyed by its own value: compaction may drop
    # aborted records and must keep every committed one, and stay below open ones
    reopen().create_topic("t", 1, {"cleanup.policy": "compact,delete"})
    topic = reopen().topic("t")
    writers = [Writer(1000 + i) for i in range(3)]
    committed: list[tuple[bytes, int]] = []
    aborted: set[bytes] = set()
    last_lso = 0
    controls = 0
    plain = 0
    compacted = 0
    for kind, who in ops:
        w = writers[who]
        if kind == "reopen":
            topic = reopen().topic("t")
        elif kind == "plain":
            value = f"plain-{plain}".encode()
            plain += 1
            landed = topic.append(0, make_batch([value], keys=[value]))
            committed.append((value, landed.base_offset))
        elif kind == "txn":
            value = f"{w.pid}-{w.number}-{w.seq}".encode()
            staged = topic.write({0: make_batch([value], keys=[value])})
            shard = topic.shard(0)
            landed = shard.append(
                {0: [staged[0]]},
                producers={0: ProducerBatch(w.pid, 0, w.seq, 1)},
                transactions={0: w.number},
            )
            w.seq += 1
            w.open.append((value, landed[0].base_offset))
        elif kind == "compact":
            compacted += compact(topic, 0).records_before > 0
        elif kind == "retention":
            log = topic.partition(0)
            state = log.state
            target = (state.log_start_offset + state.last_stable_offset + 1) // 2
            delete_records(log, target)
        else:
            ended = topic.shard(0).end_transactions(
                {0: Marker(w.pid, 0, w.number, kind == "commit")}
            )
            if ended[0] >= 0:
                controls += 1
            if kind == "commit":
                committed.extend(w.open)  # (value, offset) pairs
            else:
                aborted.update(v for v, _ in w.open)
            w.open = []
            w.number += 1
        values, lso, hwm = _visible(topic, 0)
        assert lso >= last_lso, "the last stable offset went back"
        last_lso = lso
        assert not aborted & set(values), "an aborted record was visible"
        open_values = {v for x in writers for v, _ in x.open}
        assert not open_values & set(values), "an open transaction's record was visible"
        start = topic.partition(0).log_start_offset
        if not open_values:
            assert lso == hwm
            assert sorted(values) == sorted(v for v, o in committed if o >= start)
    # control records take offsets, and are never returned as records
    log = open_root(url, options).topic("t").partition(0)
    if log.log_start_offset == 0:
        everything = log.read(0)
        if compacted:  # aborted records may be gone; their offsets are not re-used
            assert log.high_watermark >= everything.num_rows + controls
        else:
            assert log.high_watermark == everything.num_rows + controls


def test_a_late_write_of_an_ended_transaction_is_refused(tmp_path) -> None:
    root = open_root(f"file://{tmp_path}")
    root.create_topic("t", 1)
    topic = root.topic("t")
    shard = topic.shard(0)
    staged = topic.write({0: make_batch([b"a"])})
    shard.append({0: [staged[0]]}, producers={0: ProducerBatch(7, 0, 0, 1)}, transactions={0: 1})
    assert shard.end_transactions({0: Marker(7, 0, 1, True)}) == {0: 1}
    assert shard.end_transactions({0: Marker(7, 0, 1, True)}) == {0: -1}  # idempotent
    late = topic.write({0: make_batch([b"late"])})
    with pytest.raises(InvalidTxnStateError):
        shard.append({0: [late[0]]}, producers={0: ProducerBatch(7, 0, 1, 1)}, transactions={0: 1})
    # the next transaction is accepted, and blocks the last stable offset until it ends
    shard.append({0: [late[0]]}, producers={0: ProducerBatch(7, 0, 1, 1)}, transactions={0: 2})
    state = topic.partition(0).state
    assert (state.last_stable_offset, state.high_watermark) == (2, 3)
    shard.end_transactions({0: Marker(7, 0, 2, False)})
    state = open_root(f"file://{tmp_path}").topic("t").partition(0).state
    assert (state.last_stable_offset, state.high_watermark) == (4, 4)
    assert [tuple(r) for r in state.transactions["aborted"]] == [(2, 3)]


def test_compaction_drops_aborted_records_and_leaves_open_transactions_alone(tmp_path) -> None:
    from sparklog.storage.maintenance import compact

    root = open_root(f"file://{tmp_path}")
    root.create_topic("c", 1, {"cleanup.policy": "compact"})
    topic = root.topic("c")
    shard = topic.shard(0)

    def txn_write(key: bytes, value: bytes, seq: int, number: int) -> None:
        staged = topic.write({0: make_batch([value], keys=[key])})
        shard.append(
            {0: [staged[0]]}, producers={0: ProducerBatch(9, 0, seq, 1)}, transactions={0: number}
        )

    topic.append(0, make_batch([b"committed"], keys=[b"k"]))  # offset 0
    txn_write(b"k", b"aborted", 0, 1)  # offset 1
    shard.end_transactions({0: Marker(9, 0, 1, False)})  # marker at 2
    txn_write(b"k", b"open", 1, 2)  # offset 3: open, above the last stable offset
    compact(topic, 0)
    log = open_root(f"file://{tmp_path}").topic("c").partition(0)
    state = log.state
    assert state.last_stable_offset == 3
    everything = log.read(0)
    assert dict(
        zip(
            everything.column("offset").to_pylist(),
            everything.column("value").to_pylist(),
            strict=True,
        )
    ) == {
        0: b"committed",  # not shadowed by the aborted record of the same key
        3: b"open",  # untouched: its transaction may still commit or abort
    }


def test_spark_source_read_committed_ends_at_the_lso_without_aborted_records(tmp_path) -> None:
    """The Spark source's planning and executor read (no Spark session needed for these)."""
    from sparklog.spark.offsets import RootView, resolve_positions
    from sparklog.spark.options import OffsetSpec, parse_source_options
    from sparklog.spark.plan import ReadRange, ReadTask
    from sparklog.spark.read import read_task
    from sparklog.spark.schema import arrow_schema, source_schema
    from sparklog.topic_partition import TopicPartition

    url = f"file://{tmp_path}"
    root = open_root(url)
    root.create_topic("t", 1)
    topic = root.topic("t")
    shard = topic.shard(0)

    def txn_write(value: bytes, seq: int, number: int) -> None:
        staged = topic.write({0: make_batch([value])})
        shard.append(
            {0: [staged[0]]}, producers={0: ProducerBatch(5, 0, seq, 1)}, transactions={0: number}
        )

    topic.append(0, make_batch([b"plain"]))  # 0
    txn_write(b"aborted", 0, 1)  # 1
    shard.end_transactions({0: Marker(5, 0, 1, False)})  # 2
    txn_write(b"committed", 1, 2)  # 3
    shard.end_transactions({0: Marker(5, 0, 2, True)})  # 4
    txn_write(b"open", 2, 3)  # 5: open
    tp = TopicPartition("t", 0)
    for level, end, values in (
        ("read_committed", 5, [b"plain", b"committed"]),
        ("read_uncommitted", 6, [b"plain", b"aborted", b"committed", b"open"]),
    ):
        opts = parse_source_options(
            {"root": url, "subscribe": "t", "kafka.isolation.level": level}, streaming=False
        )
        view = RootView(open_root(url), opts.subscription, read_committed=opts.read_committed)
        assert resolve_positions(OffsetSpec("latest"), view, [tp], which="ending") == {tp: end}
        task = ReadTask(
            index=0,
            root_url=url,
            storage_options={},
            topics={"t": open_root(url).describe_topic("t")},
            ranges=[ReadRange("t", 0, 0, end)],
            read_committed=opts.read_committed,
        )
        target = arrow_schema(source_schema(None, False))
        got = [v for b in read_task(task, target) for v in b.column("value").to_pylist()]
        assert got == values
