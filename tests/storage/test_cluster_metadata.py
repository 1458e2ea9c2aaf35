"""The cluster metadata log: topics as appends to one log, answered from an in-memory image.

Runs on every backend (file, memory, S3).  Request counts go through
``tests/support/counting_store.RequestCounter``, never times.
"""

from __future__ import annotations

import json

import pytest

from sparklog.errors import (
    InvalidConfigurationError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from sparklog.storage import make_batch, open_root
from sparklog.storage.cluster_metadata import METADATA_FORMAT, METADATA_LOG_PREFIX
from sparklog.storage.documents import VersionedDocument
from sparklog.storage.metalog import decode_commit
from sparklog.topic_partition import TopicPartition
from tests.support.counting_store import RequestCounter


@pytest.fixture
def root(root_spec):
    url, options = root_spec
    return open_root(url, options, create=True)


def _commits(root) -> list[dict]:
    names = sorted(n for n in root.store.list_names(METADATA_LOG_PREFIX) if n.endswith(".json"))
    return [decode_commit(root.store.get(f"{METADATA_LOG_PREFIX}/{n}"), n) for n in names]


def test_every_topic_change_is_one_append_seen_by_every_handle(root):
    other = open_root(root.url, root.store.storage_options)
    root.create_topic("a", 2)
    root.create_topic("b", 1, {"retention.ms": 1000})
    root.alter_topic_config("b", {"retention.ms": 2000})
    root.add_partitions("a", 5)
    root.delete_topic("b")
    kinds = [[r["type"] for r in c["records"]] for c in _commits(root)]
    assert kinds == [["format", "topic"], ["topic"], ["topic"], ["topic"], ["topic_deleted"]]
    assert other.list_topics() == ["a"] and other.describe_topic("a").partitions == 5
    assert root.store.list_names("topics") == []  # no per-topic documents any more
    with pytest.raises(UnknownTopicOrPartitionError):
        other.describe_topic("b")
    with pytest.raises(TopicAlreadyExistsError):
        other.create_topic("a", 1)


def test_reads_probe_one_version_and_never_list(root):
    for i in range(20):
        root.create_topic(f"t{i}", 4)
    reader = open_root(root.url, root.store.storage_options)
    reader.list_topics()  # opens the log (snapshot + commits)
    counter = RequestCounter(reader.store)
    assert len(reader.list_topics()) == 20
    assert reader.describe_topic("t7").partitions == 4
    assert counter.counts["LIST"] == 0
    assert counter.counts["GET"] <= 2 * (1 + (0 if root.store.is_remote else 4))


def test_a_follower_answers_from_memory_and_catches_up_with_one_probe(root):
    root.create_topic("t", 3)
    follower = open_root(root.url, root.store.storage_options, metadata_max_staleness_ms=None)
    follower.list_topics()
    counter = RequestCounter(follower.store)
    for _ in range(50):
        assert follower.list_topics() == ["t"]
        assert follower.describe_topic("t").partitions == 3
    assert counter.total == 0
    root.create_topic("u", 1)
    assert follower.list_topics() == ["t"]  # not yet: nothing probed
    follower.metadata.refresh()
    assert follower.list_topics() == ["t", "u"]
    assert counter.counts["LIST"] == 0 and counter.counts["GET"] >= 1


def test_opening_costs_the_same_whatever_the_log_length(root_spec):
    url, options = root_spec
    root = open_root(url, options, create=True, snapshot_interval=8)
    costs = []
    for total in (30, 62):  # the same distance past a snapshot (6 commits) each time
        while len(root.list_topics()) < total:
            root.create_topic(f"t{len(root.list_topics())}", 1)
        fresh = open_root(url, options, snapshot_interval=8)
        counter = RequestCounter(fresh.store)
        assert len(fresh.list_topics()) == total
        assert counter.counts["LIST"] == 0  # the hint names the snapshot
        costs.append(counter.total)
    assert costs[0] == costs[1]


def _legacy_root(root):
    """A root as the code before the metadata log wrote it: a topic document per topic."""
    doc = {
        "format": 2,
        "name": "old",
        "id": "0123456789abcdef0123456789abcdef",
        "partitions": 2,
        "config": {"retention.ms": 86_400_000},
        "created_ms": 1_700_000_000_000,
        "value_schema_id": "",
        "value_schemas": {},
    }
    assert VersionedDocument(root.store, "topics/old/meta").write(0, doc)
    deleted = {"name": "gone", "id": "f" * 32, "deleted": True, "deleted_ms": 1}
    assert VersionedDocument(root.store, "topics/gone/meta").write(0, deleted)


def test_a_root_of_the_previous_format_is_upgraded_once_keeping_everything(root):
    _legacy_root(root)
    topic = root.topic("old")  # read through the legacy documents
    for p in range(2):
        topic.append(p, make_batch([f"v{p}-{i}".encode() for i in range(3 + p)]))
    root.groups.commit("g", {TopicPartition("old", 1): 2})
    assert not root.store.list_names(METADATA_LOG_PREFIX)  # reads write nothing

    upgraded = open_root(root.url, root.store.storage_options)
    upgraded.metadata.upgrade()
    upgraded.metadata.upgrade()  # once: the second is a no-op
    commits = _commits(upgraded)
    assert len(commits) == 1
    assert [r["type"] for r in commits[0]["records"]] == ["format", "topic"]
    assert commits[0]["records"][0]["format"] == METADATA_FORMAT
    fresh = open_root(root.url, root.store.storage_options)
    assert fresh.list_topics() == ["old"]
    info = fresh.describe_topic("old")
    assert info.topic_id == "0123456789abcdef0123456789abcdef" and info.partitions == 2
    reread = fresh.topic("old")
    assert [r["value"] for r in reread.partition(1).read(0).to_pylist()] == [
        b"v1-0",
        b"v1-1",
        b"v1-2",
        b"v1-3",
    ]
    assert reread.partition(0).high_watermark == 3
    assert fresh.groups.fetch("g")[TopicPartition("old", 1)].offset == 2
    fresh.create_topic("new", 1)
    assert open_root(root.url, root.store.storage_options).list_topics() == ["new", "old"]


def test_the_first_write_to_a_legacy_root_upgrades_it_in_the_same_commit(root):
    _legacy_root(root)
    root.create_topic("new", 1)
    (commit,) = _commits(root)
    assert [r["type"] for r in commit["records"]] == ["format", "topic", "topic"]
    with pytest.raises(TopicAlreadyExistsError):
        open_root(root.url, root.store.storage_options).create_topic("old", 1)


def test_a_root_of_a_newer_metadata_format_is_refused_clearly(root):
    root.create_topic("t", 1)
    root.metadata.append(lambda image: [{"type": "format", "format": METADATA_FORMAT + 1}])
    fresh = open_root(root.url, root.store.storage_options)
    with pytest.raises(InvalidConfigurationError) as err:
        fresh.list_topics()
    message = str(err.value)
    assert f"format {METADATA_FORMAT + 1}" in message and "upgrade sparklog" in message
    assert METADATA_LOG_PREFIX in message
    with pytest.raises(InvalidConfigurationError):
        fresh.create_topic("u", 1)


def test_keyed_sections_set_and_delete_entries(root):
    root.metadata.append(
        lambda image: [
            {"type": "acl", "key": "k1", "value": {"principal": "User:a"}},
            {"type": "client_quota", "key": "user=a", "value": {"producer_byte_rate": 10}},
        ]
    )
    root.metadata.append(lambda image: [{"type": "acl", "key": "k1", "value": None}])
    image = open_root(root.url, root.store.storage_options).metadata.image()
    assert image.acls == {} and image.client_quotas == {"user=a": {"producer_byte_rate": 10}}
    json.dumps(image.topics)  # the image is plain data


def test_the_metadata_log_is_pruned_behind_its_newest_snapshot(root_spec):
    """Issue 37: 10,000 topic creations and deletions left 19,994 files in the log.
    Pruning keeps the newest snapshot and what follows it; a reader opening the root
    afterwards sees the same image, with no LIST."""
    from sparklog.clock import now_ms
    from sparklog.storage.maintenance import prune_metadata_log

    url, options = root_spec
    root = open_root(url, options, create=True, snapshot_interval=8)
    for i in range(30):
        root.create_topic(f"t{i}", 1)
        if i % 2:
            root.delete_topic(f"t{i}")
    before = len(root.store.list_names(METADATA_LOG_PREFIX))
    assert before > 50
    assert prune_metadata_log(root, now=now_ms()).deleted == []  # all inside the window
    later = now_ms() + 24 * 3_600_000
    pruned = prune_metadata_log(root, now=later)
    left = root.store.list_names(METADATA_LOG_PREFIX)
    assert len(pruned.deleted) == before - len(left) and len(left) <= 8 + 3
    fresh = open_root(url, options, snapshot_interval=8)
    counter = RequestCounter(fresh.store)
    assert fresh.list_topics() == root.list_topics() == sorted(f"t{i}" for i in range(0, 30, 2))
    assert counter.counts["LIST"] == 0
    fresh.create_topic("after", 1)  # the log goes on from its head
    assert "after" in root.list_topics()


def test_a_whole_config_set_replaces_what_the_log_holds_not_what_a_handle_saw(root):
    """Kafka's AlterConfigs (``replace``): every key not given returns to its default, as
    the log holds the topic at the change; a handle opened before another writer's change
    (a broker's cached topic) decided that before, so a key set meanwhile survived."""
    root.create_topic("c", 1, {"retention.ms": 1000})
    stale = open_root(root.url, root.store.storage_options)
    stale.describe_topic("c")  # this handle's image: retention.ms only
    root.alter_topic_config("c", {"cleanup.policy": "compact"})  # another writer
    info = stale.alter_topic_config("c", {"retention.ms": 2000}, replace=True)
    assert info.config == {"retention.ms": 2000}
    assert root.describe_topic("c").config == info.config
