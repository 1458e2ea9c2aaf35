"""Deleting a group's committed offsets (Kafka's OffsetDelete) through Admin, in both modes,
and the group log's public call under it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sparklog import Admin, Consumer, Producer, TopicPartition
from sparklog.errors import (
    GroupIdNotFoundError,
    GroupSubscribedToTopicError,
    IllegalGenerationError,
)
from sparklog.storage import open_root
from sparklog.storage.groups import GroupStore
from tests.support.brokers import Cluster
from tests.support.waiting import wait_for


@pytest.fixture(params=["file", "s3", "broker"])
def address(request, tmp_path) -> Iterator[tuple[str, dict]]:
    """(address, storage options) of a file root, an S3 root (moto) and a broker."""
    if request.param == "file":
        yield f"file://{tmp_path}/root", {}
    elif request.param == "s3":
        s3 = request.getfixturevalue("moto_s3")
        yield s3.fresh_root(), s3.storage_options
    else:
        cluster = Cluster(tmp_path, f"file://{tmp_path}/broker-root")
        cluster.start(1)
        try:
            cluster.wait_live(1)
            yield cluster.address, {}
        finally:
            cluster.stop()


def test_delete_consumer_group_offsets(address):
    url, options = address
    with Admin(url, storage_options=options) as admin:
        admin.create_topic("t", 2)
        admin.create_topic("u", 1)
        with Producer(url, storage_options=options) as producer:
            for i in range(4):
                producer.send("t", f"v{i}", partition=i % 2)
            producer.send("u", "w", partition=0)
        admin.alter_consumer_group_offsets("g", {("t", 0): 2, ("t", 1): 1, ("u", 0): 1})

        def held() -> set[tuple[str, int]]:
            return {(tp.topic, tp.partition) for tp in admin.list_consumer_group_offsets("g")}

        done = admin.delete_consumer_group_offsets("g", [TopicPartition("t", 0)])
        assert done == {TopicPartition("t", 0): None}
        assert held() == {("t", 1), ("u", 0)}
        with pytest.raises(GroupIdNotFoundError, match="nobody"):
            admin.delete_consumer_group_offsets("nobody", [("t", 0)])

        member = Consumer(
            "t", address=url, group_id="g", storage_options=options, auto_offset_reset="earliest"
        )
        try:
            wait_for(lambda: member.poll(200) is not None and member.assignment(), 60, "a join")
            answer = admin.delete_consumer_group_offsets("g", [("t", 1), ("u", 0)])
            assert isinstance(answer[TopicPartition("t", 1)], GroupSubscribedToTopicError)
            assert answer[TopicPartition("u", 0)] is None  # nobody consumes u
            assert ("t", 1) in held() and ("u", 0) not in held()
        finally:
            member.close(autocommit=False)
        assert admin.delete_consumer_group_offsets("g", [("t", 1)]) == {
            TopicPartition("t", 1): None
        }
        assert held() == set()


def test_group_log_drops_offsets_for_good(tmp_path):
    url = f"file://{tmp_path}/root"
    root = open_root(url)
    groups = GroupStore(root.store, snapshot_interval=2)  # snapshots soon after the drop
    groups.commit("g", {("t", 0): 5, ("t", 1): 7, ("u", 0): 1})
    assert groups.delete_offsets("g", [("t", 0), ("t", 9)]) == [("t", 0)]
    assert groups.delete_offsets("g", [("t", 0)]) == []  # nothing left to drop
    for offset in range(2, 6):
        groups.commit("g", {("u", 0): offset})
    fresh = GroupStore(open_root(url, create=False).store)
    assert sorted(fresh.fetch("g")) == [("t", 1), ("u", 0)]
    groups.set_generation("g", 3)
    with pytest.raises(IllegalGenerationError):
        groups.delete_offsets("g", [("t", 1)], generation=2)  # a rebalance since the check
    assert sorted(groups.fetch("g")) == [("t", 1), ("u", 0)]
