"""Property-based tests of the log's invariants under any interleaving of several writers.

Each writer has its own handle (its own, possibly stale, view of the log), so
the generated order of operations decides who loses which commit race.
"""

from __future__ import annotations

import uuid

import pyarrow as pa
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from sparklog.storage import make_batch, open_root

#: 2023-11-14: the latest timestamp the generated records carry
PAST_MS = 1_700_000_000_000
record = st.tuples(
    st.one_of(st.none(), st.binary(max_size=12)),  # key
    st.one_of(st.none(), st.binary(max_size=40)),  # value (None = tombstone)
    # timestamp ms, in the past: a topic refuses records stamped over an hour ahead
    # (message.timestamp.after.max.ms, Kafka 4's default)
    st.integers(min_value=0, max_value=PAST_MS),
    st.lists(
        st.tuples(st.text(max_size=5), st.one_of(st.none(), st.binary(max_size=5))), max_size=2
    ),
)
operation = st.tuples(
    st.integers(0, 2),  # writer
    st.integers(0, 1),  # partition
    st.lists(record, min_size=1, max_size=5),
    st.sampled_from(["none", "zstd", "lz4"]),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(operation, min_size=1, max_size=14), st.sampled_from(["memory", "file"]))
def test_offsets_unique_gapless_ordered_and_acked_bytes_read_back(tmp_path_factory, ops, kind):
    url = (
        f"memory://prop-{uuid.uuid4().hex}"
        if kind == "memory"
        else f"file://{tmp_path_factory.mktemp('prop')}"
    )
    open_root(url, snapshot_interval=3).create_topic("t", 2)
    writers = [open_root(url, snapshot_interval=3).topic("t") for _ in range(3)]
    acked: dict[int, dict[int, tuple]] = {0: {}, 1: {}}
    for writer, partition, records, codec in ops:
        result = writers[writer].append(
            partition,
            make_batch(
                [r[1] for r in records],
                keys=[r[0] for r in records],
                timestamps_ms=[r[2] for r in records],
                headers=[r[3] for r in records],
            ),
            compression=codec,
        )
        for i, rec in enumerate(records):
            assert result.base_offset + i not in acked[partition], "offset assigned twice"
            acked[partition][result.base_offset + i] = rec
    reader = open_root(url).topic("t")
    for partition, expected in acked.items():
        log = reader.partition(partition)
        assert sorted(expected) == list(range(log.high_watermark)), "gap or hole in offsets"
        table = log.read(0)
        stamps = table.column("timestamp").cast(pa.int64()).to_pylist()
        rows = table.to_pylist()
        assert [r["offset"] for r in rows] == list(range(len(expected)))
        got = {
            r["offset"]: (
                r["key"],
                r["value"],
                stamps[i],
                [(h["key"], h["value"]) for h in r["headers"] or []],
            )
            for i, r in enumerate(rows)
        }
        assert got == {o: (k, v, t, list(h)) for o, (k, v, t, h) in expected.items()}


# -- idempotent producers, epoch bumps and maintenance interleaved with appends ---------------

step = st.one_of(
    st.tuples(st.just("append"), st.integers(0, 2), st.integers(0, 2), st.integers(1, 4)),
    st.tuples(st.just("idempotent"), st.integers(0, 2), st.integers(0, 2), st.integers(0, 1)),
    st.tuples(st.just("retry"), st.integers(0, 2), st.integers(0, 2), st.integers(0, 1)),
    st.tuples(st.just("bump_producer"), st.integers(0, 2), st.integers(0, 2), st.integers(0, 1)),
    st.tuples(st.just("leader_epoch"), st.integers(0, 2), st.integers(0, 2), st.integers(0, 1)),
    st.tuples(st.just("maintenance"), st.integers(0, 2), st.integers(0, 2), st.integers(0, 1)),
)


def _check_interleaving(url: str, options: dict, steps: list) -> None:
    from sparklog.errors import FencedError
    from sparklog.storage import ProducerBatch
    from sparklog.storage.maintenance import merge_small_segments, run_maintenance

    open_root(url, options, snapshot_interval=3).create_topic(
        "t", 3, {"commit.shards": 2, "segment.bytes": 4096}
    )
    writers = [open_root(url, options, snapshot_interval=3).topic("t") for _ in range(3)]
    acked: dict[int, dict[int, bytes]] = {p: {} for p in range(3)}
    producers = {0: [0, 0], 1: [0, 0]}  # pid -> [epoch, next sequence]
    last_batch: dict[tuple[int, int], tuple[ProducerBatch, int, bytes]] = {}
    epochs = [None, None, None]
    counter = 0
    for kind, writer, partition, arg in steps:
        topic = writers[writer]
        counter += 1
        value = f"r{counter}".encode()
        if kind == "append":
            values = [value + bytes([i]) for i in range(arg)]
            try:
                result = topic.append(partition, make_batch(values), leader_epoch=epochs[writer])
            except FencedError:
                epochs[writer] = None
                continue
            for i, v in enumerate(values):
                assert result.base_offset + i not in acked[partition], "offset assigned twice"
                acked[partition][result.base_offset + i] = v
        elif kind in ("idempotent", "bump_producer"):
            pid = arg
            if kind == "bump_producer":
                producers[pid] = [producers[pid][0] + 1, 0]
                last_batch = {k: v for k, v in last_batch.items() if k[0] != pid}
            epoch, seq = producers[pid]
            if (pid, partition) in last_batch or kind == "bump_producer" or seq == 0:
                pass
            batch_seq = last_batch.get((pid, partition), (None, -1, b""))[1] + 1
            batch = ProducerBatch(pid, epoch, batch_seq, 1)
            result = topic.append(partition, make_batch([value]), producer=batch)
            assert not result.duplicate
            acked[partition][result.base_offset] = value
            last_batch[(pid, partition)] = (batch, batch_seq, value)
        elif kind == "retry":
            found = last_batch.get((arg, partition))
            if found is None:
                continue
            batch, _, value = found
            result = topic.append(partition, make_batch([value]), producer=batch)
            assert result.duplicate, "a retried idempotent batch was appended twice"
            assert acked[partition][result.base_offset] == value
        elif kind == "leader_epoch":
            epochs[writer] = topic.partition(partition).bump_epoch()
        else:
            if arg:
                run_maintenance(topic, partition)
            else:
                merge_small_segments(topic, partition)
    reader = open_root(url, options).topic("t")
    for partition, expected in acked.items():
        log = reader.partition(partition)
        assert sorted(expected) == list(range(log.high_watermark)), "gap or hole in offsets"
        rows = log.read(0).to_pylist()
        assert {r["offset"]: r["value"] for r in rows} == expected


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(step, min_size=1, max_size=16), st.sampled_from(["memory", "file"]))
# found by this test: a shard snapshot taken while one partition had no segment yet
@example(
    steps=[
        ("append", 0, 2, 1),
        ("append", 0, 2, 1),
        ("append", 0, 2, 1),
        ("leader_epoch", 0, 0, 0),
        ("leader_epoch", 1, 0, 0),
        ("append", 0, 0, 1),
        ("append", 0, 2, 1),
    ],
    kind="memory",
)
def test_producers_epochs_and_maintenance_interleaved(tmp_path_factory, steps, kind):
    url = (
        f"memory://prop-{uuid.uuid4().hex}"
        if kind == "memory"
        else f"file://{tmp_path_factory.mktemp('prop')}"
    )
    _check_interleaving(url, {}, steps)


@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(st.lists(step, min_size=1, max_size=10))
def test_producers_epochs_and_maintenance_interleaved_on_s3(moto_s3, steps):
    _check_interleaving(moto_s3.fresh_root(), moto_s3.storage_options, steps)


@given(
    first=st.integers(min_value=0, max_value=2**62),
    count=st.one_of(st.integers(0, 70_000), st.sampled_from([65_535, 65_536, 65_537, 131_073])),
)
@settings(max_examples=40, deadline=None)
def test_offset_column_counts_up_from_first(first, count):
    """Offsets read back are first, first + 1, ... (built in chunks of a cached ramp)."""
    from sparklog.storage.records import offset_column

    column = offset_column(first, count)
    assert column.type == pa.int64() and column.null_count == 0 and len(column) == count
    if count:
        values = column.to_numpy()
        assert values[0] == first and values[-1] == first + count - 1
        assert (values[1:] - values[:-1] == 1).all()


records = st.lists(
    st.tuples(
        st.binary(max_size=40),
        st.one_of(st.none(), st.binary(max_size=8)),
        st.one_of(st.none(), st.integers(0, PAST_MS)),
        st.one_of(st.none(), st.lists(st.tuples(st.text(max_size=4), st.binary(max_size=6)))),
    ),
    max_size=12,
)


@given(rows=records, log_append_time=st.booleans(), max_bytes=st.integers(1, 80))
@settings(max_examples=80, deadline=None)
def test_batches_already_in_shape_normalize_as_tables_do(rows, log_append_time, max_bytes):
    """A record batch already in the stored shape is passed through unchanged (no rebuild):
    the records, the filled-in timestamps and the size refusals are those of the general
    path, which a table takes."""
    from sparklog.errors import InvalidRecordError
    from sparklog.storage.records import normalize, record_schema

    batch = make_batch(
        [r[0] for r in rows],
        keys=[r[1] for r in rows],
        timestamps_ms=[r[2] for r in rows],
        headers=[r[3] for r in rows],
    )

    def outcome(data):
        try:
            out = normalize(
                data,
                record_schema(None),
                log_append_time=log_append_time,
                max_message_bytes=max_bytes,
                append_time_ms=1_700_000_000_000,
            )
        except InvalidRecordError as exc:
            return str(exc)
        return pa.Table.from_batches(out, schema=record_schema(None)).to_pylist()

    assert outcome(batch) == outcome(pa.Table.from_batches([batch]))


@given(
    parts=st.lists(
        st.tuples(records, st.sampled_from(["batch", "table", "strings"])), min_size=1, max_size=8
    ),
    max_bytes=st.integers(30, 200),
)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_normalising_many_inputs_at_once_is_normalising_each(parts, max_bytes):
    """``Topic.normalize_many`` (one normalisation per request) gives each input the
    records ``Topic.normalize`` gives it alone, or refuses as it does; inputs of mixed
    shapes (batches, tables, string tables without timestamps) are grouped by schema."""
    from sparklog.errors import InvalidRecordError

    root = open_root(f"memory://sparklog-{uuid.uuid4().hex}")
    root.create_topic("t", 1, {"max.message.bytes": max_bytes})
    topic = root.topic("t")
    inputs: list[pa.RecordBatch | pa.Table] = []
    for rows, shape in parts:
        batch = make_batch(
            [r[0] for r in rows],
            keys=[r[1] for r in rows],
            timestamps_ms=[r[2] if r[2] is not None else 5 for r in rows],
            headers=[r[3] for r in rows],
        )
        if shape == "batch":
            inputs.append(batch)
        elif shape == "table":
            inputs.append(pa.Table.from_batches([batch]))
        else:
            inputs.append(pa.table({"value": [r[0].hex() for r in rows]}))

    def rows_of(batches: list[pa.RecordBatch]) -> list[dict]:
        table = pa.Table.from_batches(batches, schema=topic.info.record_schema)
        return table.drop_columns(["timestamp"]).to_pylist()

    alone, refusals = [], []
    for data in inputs:
        try:
            alone.append(rows_of(topic.normalize(data)))
        except InvalidRecordError as exc:
            refusals.append(str(exc))
    if refusals:  # refused naming one refused input's own record (groups go by schema)
        try:
            topic.normalize_many(inputs)
        except InvalidRecordError as together:
            assert str(together) in refusals
            return
        raise AssertionError("normalize_many accepted what normalize refused")
    together = topic.normalize_many(inputs)
    assert [rows_of(n.batches) for n in together] == alone
    stamped = [pa.Table.from_batches(n.batches).column("timestamp") for n in together]
    assert all(column.null_count == 0 for column in stamped)
