"""Format 3's offset commits (issue 37 item 4): a broker journals the offset commits of
the groups it coordinates, one journal commit per flush for all of them, and folds
each group's commits into its log every ``fold_interval_ms``: an offset commit costs
no write of its own."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

from sparklog.storage import open_root
from sparklog.topic_partition import TopicPartition
from tests.chaos.inproc import inproc_broker


def _count_writes(store, prefixes: tuple[str, ...]) -> list[str]:
    """Record the keys ``store`` creates or puts under ``prefixes`` (instrumentation of
    the broker's own store object, not a stand-in)."""
    written: list[str] = []
    lock = threading.Lock()
    for name in ("create", "put"):
        original = getattr(store, name)

        def counted(key, data, _original=original):
            if key.startswith(prefixes):
                with lock:
                    written.append(key)
            return _original(key, data)

        setattr(store, name, counted)
    return written


def test_offset_commits_of_a_hundred_groups_cost_a_tenth_of_a_write_each(tmp_path) -> None:
    url = f"file://{tmp_path}/root"
    open_root(url).create_topic("t", 2)
    settings = {"offsets_flush_interval_ms": 200, "fold_interval_ms": 3_600_000}
    with inproc_broker(url, **settings) as (server, _):
        broker = server.broker
        groups = [f"g{i}" for i in range(100)]
        written = _count_writes(broker.root.store, ("groups/", "cluster/journal/"))

        def commit_round(offset: int) -> None:
            def commit(group: str) -> None:
                broker.groups.commit_offsets(group, -1, "", {TopicPartition("t", 0): offset})

            with ThreadPoolExecutor(20) as pool:
                list(pool.map(commit, groups))

        commit_round(1)  # each group's first commit also writes its lease, once
        leases = len(written)
        for offset in range(2, 7):  # 500 commits
            commit_round(offset)
        per_commit = (len(written) - leases) / 500
        assert per_commit <= 0.1, per_commit  # format 2: 1.0 (a group-log commit each)
        reader = open_root(url).groups  # no broker: the logs, then the journal's tail
        assert {g: reader.fetch(g)[TopicPartition("t", 0)].offset for g in groups} == dict.fromkeys(
            groups, 6
        )
    # a graceful stop folded every group and deleted the journal
    assert list((tmp_path / "root" / "cluster" / "journal").rglob("*.json")) == []
    state = open_root(url).groups.log("g42")[0].refresh()
    assert state.offsets["t:0"]["offset"] == 6


def test_a_killed_coordinators_journalled_commits_survive_its_restart(tmp_path) -> None:
    """SIGKILL leaves the journal unfolded: the restarted broker (a fresh journal) seals
    the old one and folds the group's commits before it journals again; a reader
    without a broker sees them throughout."""
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as KafkaTopicPartition

    from tests.support.brokers import Cluster

    url = f"file://{tmp_path}/root"
    open_root(url).create_topic("t", 2)
    cluster = Cluster(tmp_path, url)
    try:
        cluster.start(0, fold_interval_ms=3_600_000)
        config = {"bootstrap.servers": cluster.kafka_bootstrap, "group.id": "g"}

        def commit(offsets: dict[int, int]) -> None:
            consumer = Consumer(config)
            try:
                parts = [KafkaTopicPartition("t", p, o) for p, o in offsets.items()]
                consumer.commit(offsets=parts, asynchronous=False)
            finally:
                consumer.close()

        def committed() -> dict[int, int]:
            consumer = Consumer(config)
            try:
                found = consumer.committed([KafkaTopicPartition("t", p) for p in (0, 1)], 30)
                return {tp.partition: tp.offset for tp in found}
            finally:
                consumer.close()

        commit({0: 5, 1: 7})
        commit({0: 6})
        state = open_root(url).groups.log("g")[0].refresh()
        assert state.offsets == {} and state.journal is not None  # journalled, not folded
        cluster.kill(0)
        assert {tp.partition: c.offset for tp, c in open_root(url).groups.fetch("g").items()} == {
            0: 6,
            1: 7,
        }
        cluster.restart(0)
        assert committed() == {0: 6, 1: 7}
        commit({1: 9})  # the restarted broker leases the group: seals and folds first
        folded = open_root(url).groups.log("g")[0].refresh()
        assert {k: v["offset"] for k, v in folded.offsets.items()} == {"t:0": 6, "t:1": 7}
        assert folded.journal != state.journal
        assert committed() == {0: 6, 1: 9}
    finally:
        cluster.stop_all()
