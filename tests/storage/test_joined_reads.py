"""Reads that join small segments into large batches (what Spark's executors ask for)
return exactly what per-segment reads return, whatever the segments, gaps and range.

Gaps between plain segments come from transaction markers (a marker takes an offset
and stores no records); compaction makes segments that store their offsets."""

from __future__ import annotations

import uuid

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparklog.storage import ProducerBatch, make_batch, open_root
from sparklog.storage.maintenance import compact
from sparklog.storage.txn_markers import Marker

NOW_MS = 1_700_000_000_000


def rows(batches: list[pa.RecordBatch]) -> list[tuple]:
    table = pa.Table.from_batches(batches) if batches else None
    if table is None:
        return []
    return list(
        zip(
            table.column("offset").to_pylist(),
            table.column("key").to_pylist(),
            table.column("value").to_pylist(),
            strict=True,
        )
    )


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    appends=st.lists(
        st.tuples(
            st.booleans(),  # in a transaction, followed by its commit marker
            st.lists(
                st.tuples(st.sampled_from([b"a", b"b", b"c"]), st.binary(max_size=30)),
                min_size=1,
                max_size=8,
            ),
        ),
        min_size=1,
        max_size=12,
    ),
    compacted=st.booleans(),
    batch_rows=st.integers(1, 20),
    batch_bytes=st.sampled_from([0, 1, 200, 1 << 20]),
    cut=st.tuples(st.integers(0, 60), st.integers(0, 60)),
)
def test_joined_batches_hold_exactly_the_per_segment_records(
    appends, compacted, batch_rows, batch_bytes, cut
) -> None:
    root = open_root(f"memory://joined-{uuid.uuid4().hex}")
    config = {"cleanup.policy": "compact", "segment.bytes": 1024} if compacted else None
    root.create_topic("t", 1, config=config)
    topic = root.topic("t")
    shard = topic.shard(0)
    sequence = 0
    for number, (in_transaction, records) in enumerate(appends):
        batch = make_batch(
            [v for _, v in records],
            keys=[k for k, _ in records],
            timestamps_ms=[NOW_MS] * len(records),
        )
        if not in_transaction:
            topic.append(0, batch)
            continue
        staged = topic.write({0: batch})
        shard.append(
            {0: [staged[0]]},
            producers={0: ProducerBatch(7, 0, sequence, len(records))},
            transactions={0: number},
        )
        sequence += len(records)
        shard.end_transactions({0: Marker(7, 0, number, True)})
    if compacted:  # segments that store their offsets, with gaps between them
        compact(topic, 0, now=NOW_MS)
    log = topic.partition(0)
    start = min(max(cut[0], log.log_start_offset), log.high_watermark)
    end = start + cut[1]
    plain = list(log.iter_batches(start, end))
    joined = list(log.iter_batches(start, end, batch_rows=batch_rows, batch_bytes=batch_bytes))
    assert rows(joined) == rows(plain)
    assert len(joined) <= len(plain)
    assert all(b.schema == plain[0].schema for b in joined)
