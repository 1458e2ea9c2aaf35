"""Brokerless writers hand their commits to the broker whose journal leases the shard
(issue 37 item 3), and commit directly when that broker cannot take them.

A direct commit of a leased shard revokes it from the leader's journal: the leader's
in-flight steps of the shard fail and its next write leases the shard again, bumping the
leader epoch. Handed over, the commit is a step of the leader's journal and the lease
stays. Counted here in the journals' revoke versions and the shard's leader epoch.
"""

from __future__ import annotations

import functools
import json
import logging
import pathlib

import pytest

from sparklog import Producer
from sparklog.broker_lite.handed_commits import commit_handed_over
from sparklog.client import handover
from sparklog.errors import InvalidRequestError, NotLeaderOrFollowerError, UnknownTopicIdError
from sparklog.storage import make_batch, open_root
from tests.chaos.inproc import inproc_broker


def revokes(root: pathlib.Path) -> int:
    """How many revoke versions the brokers' journals under ``root`` hold."""
    return sum(
        json.loads(path.read_bytes()).get("c", {}).get("kind") == "revoke"
        for path in (root / "cluster/journal").glob("*/*/*.json")
    )


def journal_versions(root: pathlib.Path) -> int:
    return len(list((root / "cluster/journal").glob("*/*/*.json")))


def values(url: str, topic: str, partition: int) -> list[bytes]:
    """The partition's values as a reader without a broker sees them (log, then the
    leased journal's tail)."""
    log = open_root(url).topic(topic).partition(partition)
    return [bytes(v) for v in log.read(0).column("value").to_pylist()]


def test_an_embedded_producer_and_a_marked_commit_go_through_the_leaders_journal(
    tmp_path: pathlib.Path,
) -> None:
    folder = tmp_path / "root"
    url = f"file://{folder}"
    with inproc_broker(url) as (server, _):
        broker = server.broker
        broker.create_topic("t", 2)
        broker.produce("t", [(0, make_batch([b"a"]))])  # the leader leases 0's shard
        state = broker.state
        shard = state.partition_state(state.topic("t"), 0).shard
        epoch = shard.log.leader_epoch
        broker.produce("t", [(1, make_batch([b"a1"]))])  # and 1's, another shard
        assert state.topic("t").info.shard_of(1) != state.topic("t").info.shard_of(0)
        versions = journal_versions(folder)
        with Producer(url, linger_ms=60_000) as producer:
            sent = [producer.send("t", b"b", partition=0), producer.send("t", b"b1", partition=1)]
            producer.flush()
            for future in sent:
                future.get(timeout=30)
        assert journal_versions(folder) == versions + 1  # both shards in one journal commit
        broker.produce("t", [(0, make_batch([b"c"]))])
        # the Spark sink's path: staged objects committed under an (app id, version)
        # marker; the same marker handed over again (a replayed batch) lands nothing
        topic = open_root(url).topic("t")
        staged = topic.write({0: make_batch([b"d"])})
        first = handover.commit(topic.root, topic, staged, txn=("app", 7))
        again = handover.commit(topic.root, topic, staged, txn=("app", 7))
        assert not first[0].duplicate and again[0].duplicate
        assert revokes(folder) == 0
        assert shard.log.leader_epoch == epoch  # never leased again
        assert values(url, "t", 0) == [b"a", b"b", b"c", b"d"]
        assert values(url, "t", 1) == [b"a1", b"b1"]


def test_a_leader_that_cannot_be_reached_is_written_around(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The lease's broker is registered but its listener is gone: the writer commits
    directly (revoking the shard, as before hand-overs), and every record is kept."""
    folder = tmp_path / "root"
    url = f"file://{folder}"
    with inproc_broker(url) as (server, _):
        broker = server.broker
        broker.create_topic("t", 1)
        broker.produce("t", [(0, make_batch([b"a"]))])
        server.shutdown()  # the Flight listener stops; the broker stays registered
        with (
            caplog.at_level(logging.INFO, "sparklog.client.handover"),
            Producer(url, linger_ms=1) as producer,
        ):
            producer.send("t", b"b", partition=0).get(timeout=30)
        assert any("not handed to the broker" in r.getMessage() for r in caplog.records)
        assert revokes(folder) == 1
        assert values(url, "t", 0) == [b"a", b"b"]


def test_a_leader_refuses_commits_it_cannot_vouch_for(tmp_path: pathlib.Path) -> None:
    """A segment naming an object that does not exist, a topic since created again, a
    committed (not staged) segment, a partition it does not lead: refused, naming why,
    and nothing is committed."""
    url = f"file://{tmp_path}/root"
    with inproc_broker(url) as (server, _):
        broker = server.broker
        broker.create_topic("t", 1)
        topic = open_root(url).topic("t")
        segment = topic.write({0: make_batch([b"x"])})[0].to_json()
        topic_id = topic.info.topic_id
        commit = functools.partial(commit_handed_over, broker.state, "t", producers={}, txn=None)
        with pytest.raises(InvalidRequestError, match="does not exist"):
            commit(topic_id, {"0": [{**segment, "object_key": "data/nothing.arrow"}]})
        with pytest.raises(UnknownTopicIdError, match="created again"):
            commit("another-id", {"0": [segment]})
        with pytest.raises(InvalidRequestError, match="only staged segments"):
            commit(topic_id, {"0": [{**segment, "base_offset": 0}]})
        with pytest.raises(InvalidRequestError, match="accepted"):
            commit(topic_id, {"0": [{"object_key": 7}]})
        cluster = broker.state.cluster
        assert cluster is not None
        cluster.is_leader = lambda topic, partition: False  # type: ignore[method-assign]
        with pytest.raises(NotLeaderOrFollowerError):
            commit(topic_id, {"0": [segment]})
        assert values(url, "t", 0) == []


def test_a_writer_commits_itself_beside_a_leader_whose_flight_listener_asks_for_users(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The broker's registration says its Flight listener is SASL: a writer holding no
    credentials does not call it (each call would be a failed login the broker delays and
    logs), and commits directly."""
    folder = tmp_path / "root"
    url = f"file://{folder}"
    with inproc_broker(url, flight_security_protocol="SASL_PLAINTEXT") as (server, _):
        broker = server.broker
        broker.create_topic("t", 1)
        broker.produce("t", [(0, make_batch([b"a"]))])
        image = open_root(url).metadata.image()
        assert image.broker(broker.config.broker_id)["flight_security"] == "SASL_PLAINTEXT"
        with (
            caplog.at_level(logging.INFO, "sparklog.client.handover"),
            Producer(url, linger_ms=1) as producer,
        ):
            producer.send("t", b"b", partition=0).get(timeout=30)
        assert not any("not handed" in r.getMessage() for r in caplog.records)  # not tried
        assert revokes(folder) == 1
        assert values(url, "t", 0) == [b"a", b"b"]
