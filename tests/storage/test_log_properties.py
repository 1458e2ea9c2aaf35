"""Property-based tests of the log's invariants under any interleaving of several writers.

Each writer has its own handle (its own, possibly stale, view of the log), so
the generated order of operations decides who loses which commit race.
"""

from __future__ import annotations

import uuid

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparklog.storage import make_batch, open_root

record = st.tuples(
    st.one_of(st.none(), st.binary(max_size=12)),  # key
    st.one_of(st.none(), st.binary(max_size=40)),  # value (None = tombstone)
    st.integers(min_value=0, max_value=2**41),  # timestamp ms
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
