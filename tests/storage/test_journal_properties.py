"""Property-based tests of format 3's shard journal under any interleaving of two
leaders (brokers with their own journals, leasing the shard from each other), a
brokerless writer, folds and snapshots: every acknowledged record is read back at
the offset it was acknowledged with, by a reader without a broker, and no offset is
given twice or skipped."""

from __future__ import annotations

import uuid

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from sparklog.errors import NotCoordinatorError
from sparklog.storage import make_batch, open_root
from sparklog.storage.journal import JournalWriter

operation = st.one_of(
    st.tuples(st.just("lead"), st.integers(0, 1), st.booleans()),  # broker, lease first?
    st.tuples(st.just("direct"), st.just(0), st.just(False)),
    st.tuples(st.just("fold"), st.integers(0, 1), st.just(False)),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(operation, min_size=1, max_size=16), st.sampled_from([1, 2]))
# a successor's lease must fold the first leader's journalled record
@example([("lead", 0, True), ("lead", 1, True)], 1)
# a brokerless writer between two leaders' journalled records
@example([("lead", 0, True), ("direct", 0, False), ("lead", 0, False), ("lead", 1, True)], 1)
def test_acknowledged_records_read_back_at_their_offsets(ops, partitions):
    url = f"memory://journal-prop-{uuid.uuid4().hex}"
    open_root(url, snapshot_interval=3).create_topic("t", partitions)
    leaders = []
    for broker in range(2):
        topic = open_root(url, snapshot_interval=3).topic("t")
        handle = topic.open_shard(0)
        handle.use_journal(JournalWriter(topic.store.locate("/")[0], broker, flush_interval_ms=0))
        leaders.append((topic, handle))
    direct = open_root(url, snapshot_interval=3).topic("t")
    acked: dict[int, dict[int, bytes]] = {p: {} for p in range(partitions)}
    for n, (kind, who, lease_first) in enumerate(ops):
        partition = n % partitions
        value = f"v{n}".encode()
        if kind == "direct":
            result = direct.append(partition, make_batch([value]))
        elif kind == "fold":
            leaders[who][1].fold()
            continue
        else:
            topic, handle = leaders[who]
            if lease_first:
                handle.bump_epoch()  # the leader's produce path leases first
            staged = topic.write({partition: make_batch([value])})
            try:
                result = handle.append({partition: [staged[partition]]})[partition]
            except NotCoordinatorError:  # revoked by another writer: not acknowledged
                continue
        assert result.base_offset not in acked[partition], "an offset given twice"
        acked[partition][result.base_offset] = value
        reader = open_root(url).topic("t")  # no broker: the log, then the journal's tail
        for p in range(partitions):
            read = reader.partition(p).read(0)
            got = dict(
                zip(
                    read.column("offset").to_pylist(), read.column("value").to_pylist(), strict=True
                )
            )
            assert got == acked[p]
            assert sorted(got) == list(range(len(got))), "an offset skipped"
