"""Embedded (brokerless) writers commit per shard, as a broker's flush does (issue #22 item 5).

One flush of a ``Producer`` on a root writes one object and one commit per shard
touched, whatever the partition count; the commit is atomic across the shard's
partitions, and an idempotent producer's retried flush is recognised per
partition.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from sparklog import Producer
from sparklog.client.transports.base import ProducerIdentity
from sparklog.client.transports.embedded import EmbeddedBackend
from sparklog.storage import make_batch, open_root
from tests.support.counting_s3 import CountingProxy
from tests.support.s3 import MotoS3


@pytest.fixture
def counted_s3(moto_s3: MotoS3) -> Iterator[tuple[str, dict, CountingProxy]]:
    """A fresh S3 root whose requests pass through a counting proxy."""
    proxy = CountingProxy(moto_s3.endpoint_url)
    try:
        yield moto_s3.fresh_root(), proxy.storage_options(), proxy
    finally:
        proxy.close()


@pytest.fixture(params=["file", "memory", "s3"])
def root_url(request, tmp_path) -> tuple[str, dict]:
    if request.param == "file":
        return f"file://{tmp_path}/root", {}
    if request.param == "memory":
        return f"memory://sparklog-{uuid.uuid4().hex}", {}
    s3: MotoS3 = request.getfixturevalue("moto_s3")
    return s3.fresh_root(), s3.storage_options


@pytest.mark.parametrize("partitions", [1, 16, 64])
def test_producer_flush_costs_two_requests_whatever_the_partition_count(counted_s3, partitions):
    url, options, proxy = counted_s3
    open_root(url, options).create_topic("t", partitions)
    with Producer(url, storage_options=options, linger_ms=60_000) as producer:

        def flush() -> None:
            futures = [producer.send("t", b"v", partition=p) for p in range(partitions)]
            producer.flush()
            assert all(f.get(timeout=30).partition == p for p, f in enumerate(futures))

        flush()  # opens the shard log (its first read is not a flush's cost)
        costs = [proxy.delta(flush) for _ in range(3)]
    # One object and one shard-log commit per flush, the same at every partition count
    # (a writer committing on top of its own commit skips the probe of the next
    # version).  Before, one commit per partition: 17-19 PUTs at 16, 69 at 64.
    for cost in costs:
        assert cost == {"PUT": 2}, cost


def test_a_flush_is_one_commit_per_shard_and_retries_are_duplicates(root_url):
    url, options = root_url
    root = open_root(url, options)
    root.create_topic("t", 6, {"commit.shards": 2})
    backend = EmbeddedBackend(url, options)
    try:
        parts = {p: [make_batch([f"{p}-{i}".encode() for i in range(p + 1)])] for p in range(6)}
        identity = ProducerIdentity(7, 0, dict.fromkeys(range(6), 0))
        first = backend.produce("t", parts, producer=identity)
        assert {p: (r.base_offset, r.record_count, r.duplicate) for p, r in first.items()} == {
            p: (0, p + 1, False) for p in range(6)
        }
        topic = root.topic("t")
        # each shard's three partitions landed in one commit: version 0 of each shard log
        assert [topic.shard(s).refresh().version for s in range(2)] == [0, 0]
        again = backend.produce("t", parts, producer=identity)  # a retried flush
        assert {p: (r.base_offset, r.duplicate) for p, r in again.items()} == {
            p: (0, True) for p in range(6)
        }
        nxt = ProducerIdentity(7, 0, {p: p + 1 for p in range(6)})
        later = backend.produce("t", parts, producer=nxt)
        assert {p: r.base_offset for p, r in later.items()} == {p: p + 1 for p in range(6)}
        assert [topic.shard(s).refresh().version for s in range(2)] == [1, 1]
        for p in range(6):
            values = topic.partition(p).read(0).column("value").to_pylist()
            assert values == [f"{p}-{i}".encode() for i in range(p + 1)] * 2
    finally:
        backend.close()
