"""A mirror link's copier hands its commits to the broker whose journal leases the
destination's shard (Flight ``commit_mirrored``), as the Spark sink and embedded producers
hand theirs (issue 37 item 3; docs/mirroring.md).

The leased mirror topic here is the fail-back's: the old primary's topic, written through
its broker (so its shards are leased to the broker's journal), turned into a mirror topic
of the reverse link by ``mirror reverse``. Committed directly, the reverse link's first copy
revoked the shard from the broker's journal (its in-flight steps failed) and ended the
lease; handed over, the copy is one step of the leader's journal and the lease stays.
"""

from __future__ import annotations

import functools
import logging
import pathlib
from dataclasses import replace

import pyarrow as pa
import pytest

from sparklog.broker_lite.handed_commits import commit_mirrored_handed_over
from sparklog.client import handover
from sparklog.client.transports.flight_client import BrokerClient
from sparklog.errors import InvalidRequestError, UnknownTopicIdError
from sparklog.mirror.copier import Mirror, promote, reverse, write_with_offsets
from sparklog.mirror.links import create_link, get_link
from sparklog.storage import LogRoot, open_root
from sparklog.storage.log import MirrorPositionMovedError
from tests.broker_lite.test_handed_commits import revokes
from tests.chaos.inproc import inproc_broker
from tests.mirror.support import assert_same, records


def through_broker(
    location: str, topic: str, partition: int, start: int = 0
) -> list[tuple[int, bytes | None]]:
    """(offset, value) of every record of the partition from offset ``start`` (its log
    start), fetched from the broker."""
    out: list[tuple[int, bytes | None]] = []
    with BrokerClient(location) as client:
        while True:
            got = client.fetch(topic, partition, out[-1][0] + 1 if out else start, max_wait_ms=0)
            rows = [row for batch in got.batches for row in batch.to_pylist()]
            out += [(int(row["offset"]), row["value"]) for row in rows]
            if not rows or out[-1][0] + 1 >= got.high_watermark:
                return out


def without_broker(
    root: LogRoot, topic: str, partition: int, start: int = 0
) -> list[tuple[int, bytes | None]]:
    """(offset, value) of every record of the partition from offset ``start`` (its log
    start), read from the root (the shard log, then the leased journal's tail)."""
    table = open_root(root.url).topic(topic).partition(partition).read(start)
    offsets, values = table.column("offset").to_pylist(), table.column("value").to_pylist()
    return list(zip(offsets, values, strict=True))


def test_a_fail_back_copy_into_a_leased_shard_is_journalled_by_its_leader(
    tmp_path: pathlib.Path,
) -> None:
    east_folder = tmp_path / "east"
    east_url = f"file://{east_folder}"
    west = open_root(f"file://{tmp_path}/west", {}, create=True)
    with inproc_broker(east_url) as (server, location):
        broker = server.broker
        broker.create_topic("orders", 2)
        for r in range(2):  # written through east's broker: its journal leases the shards
            broker.produce("orders", [(p, records(p, r * 5, 5)) for p in range(2)])
        east = open_root(east_url)
        create_link(west, "dr", source=east.url, topics="orders")
        assert Mirror(west, get_link(west, "dr")).step().records == 20
        promote(west, "orders")  # east is lost; west takes writes
        west.topic("orders").produce({0: records(0, 10, 4), 1: records(1, 10, 2)})
        # east is back: its topic becomes the reverse link's mirror topic
        assert reverse(west, "dr")[1] == ["orders"]
        state = broker.state
        topic = state.topic("orders")
        shards = {
            shard.key: shard for shard in (state.partition_state(topic, p).shard for p in (0, 1))
        }
        epochs = {key: shard.log.leader_epoch for key, shard in shards.items()}
        assert revokes(east_folder) == 0

        assert state.journal is not None
        journal_commits = state.journal.commits
        back = Mirror(east, get_link(east, "dr-back"))
        report = back.step()

        assert report.records == 6
        assert state.journal.commits == journal_commits + 1  # both shards: one journal commit
        assert revokes(east_folder) == 0  # the lease stays: nothing revoked the shards
        for key, shard in shards.items():
            assert shard.log.leader_epoch == epochs[key]  # never leased again
            lease = open_root(east_url).topic("orders").shard(key[2]).refresh().journal
            assert lease == state.journal.ref
        assert assert_same(west, east, "orders") == 26  # without a broker, at west's offsets
        for p in range(2):
            assert through_broker(location, "orders", p) == without_broker(west, "orders", p)
        assert back.step().records == 0


def test_a_handed_mirror_copy_lands_once_and_a_moved_end_is_refused_alike(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The broker refuses a copy planned from an end that moved with the direct commit's
    MirrorPositionMovedError; a handed copy whose answer was lost, followed by the direct
    commit (the leader's listener gone), is found in place: a duplicate, written once."""
    folder = tmp_path / "dest"
    url = f"file://{folder}"
    source = open_root(f"file://{tmp_path}/src", {}, create=True)
    source.create_topic("orders", partitions=1)
    source.topic("orders").produce({0: records(0, 0, 5)})
    with (
        caplog.at_level(logging.INFO, "sparklog.client.handover"),
        inproc_broker(url) as (server, location),
    ):
        dest = open_root(url)
        create_link(dest, "dr", source=source.url, topics="orders")
        mirror = Mirror(dest, get_link(dest, "dr"))
        assert mirror.step().records == 5
        state = server.broker.state
        shard = state.partition_state(state.topic("orders"), 0).shard
        shard.epoch = shard.log.bump_epoch()  # the leader leases the shard
        source.topic("orders").produce({0: records(0, 5, 3)})
        assert mirror.step().records == 3  # handed over

        stale = dest.topic("orders")  # a copier's handle, before what follows
        stale.shard(0).refresh()
        copied = stale.partition(0).segments_between(5, 8)[0]
        with pytest.raises(MirrorPositionMovedError, match="at offset 8, not 5 as planned"):
            handover.commit_mirrored(
                dest, stale, {0: [replace(copied, base_offset=8)]}, link="dr", expected={0: 5}
            )

        assert not any("not handed" in r.getMessage() for r in caplog.records)  # the leader's

        source.topic("orders").produce({0: records(0, 8, 2)})
        segment = write_with_offsets(stale, 0, source.topic("orders").partition(0).read(8))
        answer = commit_mirrored_handed_over(  # journalled; its answer never reaches us
            state, "orders", stale.info.topic_id, {"0": [segment.to_json()]}, "dr", {"0": 8}
        )
        assert answer == {"0": [8, 2, answer["0"][2], False]}
        server.shutdown()  # the leader's listener goes away (it stays registered)
        try:
            again = handover.commit_mirrored(
                dest, stale, {0: [segment]}, link="dr", expected={0: 8}
            )
        finally:
            handover._paused.pop(location, None)  # the port may serve another test's broker
        assert again[0].duplicate
        assert any("not handed" in r.getMessage() for r in caplog.records)  # committed directly
        assert revokes(folder) == 0
        assert [o for o, _ in without_broker(dest, "orders", 0)] == list(range(10))
        assert assert_same(source, dest, "orders") == 10


def test_a_leader_refuses_mirror_copies_it_cannot_vouch_for(tmp_path: pathlib.Path) -> None:
    """No planned end, an unplaced segment, an object that does not exist, a topic since
    created again, no link: refused, naming why, and nothing is committed."""
    url = f"file://{tmp_path}/root"
    with inproc_broker(url) as (server, _):
        server.broker.create_topic("t", 1)
        topic = open_root(url).topic("t")
        table = pa.Table.from_batches([records(0, 0, 2)])
        table = table.add_column(0, "offset", pa.array([3, 4], pa.int64()))
        segment = write_with_offsets(topic, 0, table).to_json()
        commit = functools.partial(commit_mirrored_handed_over, server.broker.state, "t")
        topic_id = topic.info.topic_id
        with pytest.raises(InvalidRequestError, match="partition 0 has no expected end"):
            commit(topic_id, {"0": [segment]}, "l", {})
        with pytest.raises(InvalidRequestError, match="only placed segments"):
            commit(topic_id, {"0": [{**segment, "base_offset": -1}]}, "l", {"0": 0})
        with pytest.raises(InvalidRequestError, match="does not exist"):
            commit(topic_id, {"0": [{**segment, "object_key": "x/none.arrow"}]}, "l", {"0": 0})
        with pytest.raises(InvalidRequestError, match="accepted"):
            commit(topic_id, {"0": [segment]}, "l", {"0": "three"})
        with pytest.raises(InvalidRequestError, match="names no link"):
            commit(topic_id, {"0": [segment]}, "", {"0": 0})
        with pytest.raises(UnknownTopicIdError, match="created again"):
            commit("another-id", {"0": [segment]}, "l", {"0": 0})
        assert open_root(url).topic("t").partition(0).refresh().high_watermark == 0
        landed = commit(topic_id, {"0": [segment]}, "l", {"0": 0})  # a gap before offset 3
        assert landed["0"][:2] == [3, 2]
        assert open_root(url).topic("t").partition(0).refresh().mirror_gaps == [(0, 3)]
