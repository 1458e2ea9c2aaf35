"""The cleaner of a real broker process applies retention to the partitions it leads."""

from __future__ import annotations

import time

import pytest

from sparklog.client.transports.flight_client import BrokerClient
from sparklog.errors import OffsetOutOfRangeError
from sparklog.protocol import actions
from sparklog.storage import make_batch
from tests.support.waiting import wait_for


def test_cleaner_applies_retention_on_schedule(file_root, cluster_on):
    cluster = cluster_on(file_root)
    cluster.start(0, cleaner_interval_ms=200, gc_grace_ms=0)
    with BrokerClient(cluster.bootstrap) as client:
        # kept at first (two hours), so no cleaner pass can race the produces below; the
        # fresh record's segment is over segment.bytes, so merging (which runs every pass)
        # cannot join it to the old ones (CI at load once saw them merged into one segment
        # whose newest timestamp kept it all)
        client.create_topic("old", 1, config={"retention.ms": 7_200_000, "segment.bytes": 1024})
        long_ago = int(time.time() * 1000) - 3_600_000
        for i in range(3):  # three commits, three segments, all an hour old
            client.produce("old", 0, make_batch([b"x%d" % i] * 4, timestamps_ms=[long_ago] * 4))
        fresh = b"fresh" * 400
        client.produce("old", 0, make_batch([fresh]))
        assert client.fetch("old", 0, 0, max_wait_ms=0).record_count >= 4  # from the tail cache
        client.call(
            actions.ALTER_TOPIC_CONFIG, name="old", updates={"retention.ms": 60_000}
        )  # now they are expired
        wait_for(
            lambda: (
                client.call(actions.LIST_OFFSETS, topic="old", partition=0, spec="earliest") >= 12
            ),
            timeout_s=30,
            what="retention to run",
        )
        with pytest.raises(OffsetOutOfRangeError) as info:
            client.fetch("old", 0, 0, max_wait_ms=0)
        assert info.value.log_start_offset == 12
        got = client.fetch("old", 0, 12, max_wait_ms=0)
        assert [v for b in got.batches for v in b.column("value").to_pylist()] == [fresh]
