"""Storage format 2 (shard logs): atomic multi-partition commits, integrity, outcomes, expiry.

Every test runs on file://, memory:// and s3:// (moto) unless it inspects local files.
"""

from __future__ import annotations

import json
import threading

import pytest

from sparklog.clock import now_ms
from sparklog.errors import (
    CommitStateUnknownError,
    CorruptRecordError,
    IllegalGenerationError,
    InvalidConfigurationError,
    OutOfOrderSequenceNumberError,
    StagedObjectExpiredError,
)
from sparklog.storage import ProducerBatch, make_batch, open_root
from sparklog.storage.cluster_metadata import METADATA_LOG_PREFIX, topic_record
from sparklog.storage.log import STAGED_OBJECT_MAX_AGE_MS
from sparklog.storage.maintenance import DEFAULT_LOG_RETENTION_MS, prune_topic_logs
from sparklog.storage.metalog import (
    SNAPSHOT_GRACE_MS,
    SNAPSHOTS_KEPT,
    decode_commit,
    encode_commit,
)


@pytest.fixture
def root(root_spec):
    url, options = root_spec
    return open_root(url, options, snapshot_interval=4)


def shard_files(topic, shard: int = 0) -> list[str]:
    return topic.store.list_names(f"shards/{shard:05d}/log")


def commit_names(topic, shard: int = 0) -> list[str]:
    return [n for n in shard_files(topic, shard) if n.endswith(".json") and n[0].isdigit()]


# -- layout and format --------------------------------------------------------------------


def test_topic_records_format_and_shards(root):
    info = root.create_topic("t", 4, {"commit.shards": 2})
    raw = root.store.get(f"{METADATA_LOG_PREFIX}/{info.version:020d}.json")
    (doc,) = [r["doc"] for r in decode_commit(raw, "x")["records"] if r["type"] == "topic"]
    assert doc["format"] == 2 and doc["config"]["commit.shards"] == 2
    assert [info.shard_of(p) for p in range(4)] == [0, 1, 0, 1]
    with pytest.raises(InvalidConfigurationError, match="commit.shards"):
        root.alter_topic_config("t", {"commit.shards": 3})


@pytest.mark.parametrize("fmt", [1, 99])
def test_topic_of_unknown_format_is_refused_naming_the_file(root, fmt):
    root.create_topic("t", 1)
    doc = {k: v for k, v in root.metadata.image().topics["t"].items() if k != "version"}
    if fmt == 1:
        doc.pop("format")
    else:
        doc["format"] = fmt
    image = root.metadata.append(lambda image: [topic_record(doc)])
    with pytest.raises(InvalidConfigurationError) as err:
        root.topic("t")
    assert f"{METADATA_LOG_PREFIX} (version {image.version})" in str(err.value)
    assert f"format {fmt}" in str(err.value) and "knows formats 2" in str(err.value)


def test_one_flush_of_many_partitions_is_one_object_and_one_commit(root):
    root.create_topic("t", 16)
    topic = root.topic("t")
    results = topic.produce({p: make_batch([f"v{p}".encode()] * (p + 1)) for p in range(16)})
    assert len(commit_names(topic)) == 1
    assert len(topic.store.list_objects("objects")) == 1
    reader = open_root(root.url, root.store.storage_options).topic("t")
    for p in range(16):
        assert results[p].base_offset == 0 and results[p].record_count == p + 1
        assert reader.partition(p).read(0).column("value").to_pylist() == [f"v{p}".encode()] * (
            p + 1
        )


def test_each_shard_gets_one_commit(root):
    root.create_topic("t", 6, {"commit.shards": 3})
    topic = root.topic("t")
    topic.produce({p: make_batch([b"x"]) for p in range(6)})
    assert [len(commit_names(topic, s)) for s in range(3)] == [1, 1, 1]


def test_a_flush_lands_in_all_partitions_of_a_shard_or_none(root):
    root.create_topic("t", 3)
    topic = root.topic("t")
    topic.append(2, make_batch([b"first"]), producer=ProducerBatch(7, 0, 0, 1))
    staged = topic.write({p: make_batch([b"x"]) for p in range(3)})
    # partition 2's producer batch skips a sequence: the whole commit is refused
    with pytest.raises(OutOfOrderSequenceNumberError):
        topic.commit(staged, producers={2: ProducerBatch(7, 0, 5, 1)})
    reader = open_root(root.url, root.store.storage_options).topic("t")
    assert [reader.partition(p).high_watermark for p in range(3)] == [0, 0, 1]
    results = topic.commit(staged, producers={2: ProducerBatch(7, 0, 1, 1)})
    assert {p: r.base_offset for p, r in results.items()} == {0: 0, 1: 0, 2: 1}
    reader = open_root(root.url, root.store.storage_options).topic("t")
    assert [reader.partition(p).high_watermark for p in range(3)] == [1, 1, 2]


def test_spark_marker_is_per_shard_and_makes_a_replay_a_noop(root):
    root.create_topic("t", 2)
    topic = root.topic("t")
    first = topic.commit(topic.write({0: make_batch([b"a"]), 1: make_batch([b"b"])}), txn=("q", 3))
    replay = topic.commit(topic.write({0: make_batch([b"a"]), 1: make_batch([b"b"])}), txn=("q", 3))
    assert not any(r.duplicate for r in first.values())
    assert all(r.duplicate for r in replay.values())
    assert [topic.partition(p).refresh().high_watermark for p in range(2)] == [1, 1]


# -- integrity ----------------------------------------------------------------------------


def _fill(root, commits: int = 6):
    root.create_topic("t", 2)
    topic = root.topic("t")
    for i in range(commits):
        topic.append(i % 2, make_batch([f"v{i}".encode()]))
    return topic


def test_bit_flip_in_a_commit_that_stays_parseable_is_detected(root):
    topic = _fill(root, 3)
    key = "shards/00000/log/00000000000000000001.json"
    raw = topic.store.get(key)
    flipped = raw.replace(b'"base_offset":0', b'"base_offset":1', 1)
    assert flipped != raw
    json.loads(flipped)  # still valid JSON: only the checksum can tell
    topic.store.delete(key)
    topic.store.create(key, flipped)
    with pytest.raises(CorruptRecordError, match="00000000000000000001.json.*checksum"):
        open_root(root.url, root.store.storage_options).topic("t").partition(0).read(0)


@pytest.mark.parametrize("damage", [b"", b"{", b"not json at all", b"\xff\xfe\x00"])
def test_damaged_commit_is_a_corrupt_record_error_naming_it(root, damage):
    topic = _fill(root, 2)
    key = "shards/00000/log/00000000000000000001.json"
    topic.store.delete(key)
    topic.store.create(key, damage)
    with pytest.raises(CorruptRecordError, match="00000000000000000001.json") as err:
        open_root(root.url, root.store.storage_options).topic("t").partition(0).read(0)
    assert not err.value.retriable


@pytest.mark.parametrize("how", ["truncate", "flip", "empty"])
def test_damaged_snapshot_is_a_corrupt_record_error_naming_it(root, how):
    topic = _fill(root, 9)  # snapshot_interval=4: snapshots at versions 3 and 7
    key = "shards/00000/log/00000000000000000007.snapshot"
    raw = topic.store.get(key)
    bad = {"truncate": raw[: len(raw) // 2], "flip": raw[:100] + bytes([raw[100] ^ 1]) + raw[101:]}
    topic.store.delete(key)
    topic.store.create(key, bad.get(how, b""))
    with pytest.raises(CorruptRecordError, match="00000000000000000007.snapshot"):
        open_root(root.url, root.store.storage_options).topic("t").partition(0).read(0)


@pytest.mark.parametrize("hint", [b"", b"{", b'{"snapshot": "x"}', b'{"snapshot": 9999}', b"[1]"])
def test_damaged_hint_never_makes_a_partition_unreadable(root, hint):
    topic = _fill(root, 9)
    topic.store.put("shards/00000/log/_latest.json", hint)
    reader = open_root(root.url, root.store.storage_options).topic("t")
    assert reader.partition(0).read(0).num_rows == 5
    assert reader.partition(1).read(0).num_rows == 4


def test_missing_version_in_the_middle_is_detected_by_readers_and_never_reused(root_spec):
    root = open_root(*root_spec, snapshot_interval=100)
    topic = _fill(root, 3)  # versions 0..2, no snapshot
    stale = open_root(root.url, root.store.storage_options).topic("t")
    assert stale.partition(0).high_watermark == 2  # a writer whose view is at version 2
    topic.append(0, make_batch([b"x"]))  # version 3
    topic.append(1, make_batch([b"y"]))  # version 4
    topic.store.delete("shards/00000/log/00000000000000000003.json")
    with pytest.raises(CorruptRecordError, match="00000000000000000003.json is missing"):
        open_root(root.url, root.store.storage_options).topic("t").partition(0).read(0)
    with pytest.raises(CorruptRecordError, match="00000000000000000003.json is missing"):
        stale.append(0, make_batch([b"would reuse version 3"]))
    assert not topic.store.exists("shards/00000/log/00000000000000000003.json")


# -- outcomes and contention --------------------------------------------------------------


class LostAnswer:
    """Wraps a store's create: applies it, then loses the answer once per armed call."""

    def __init__(self, store, mode: str) -> None:
        self.store, self.mode, self.armed = store, mode, 0
        self.original = store.create

    def create(self, key, data):
        created = self.original(key, data)
        if self.armed and key.endswith(".json") and "/log/" in key:
            self.armed -= 1
            if self.mode == "raise":
                raise CommitStateUnknownError(f"injected: answer for {key} lost")
            return False  # as a retry that found its own object would see it
        return created


@pytest.mark.parametrize("mode", ["raise", "exists"])
def test_commit_whose_answer_was_lost_is_applied_once(root, mode):
    root.create_topic("t", 2)
    topic = root.topic("t")
    topic.append(0, make_batch([b"before"]))
    shard = topic.shard(0)
    wrapper = LostAnswer(shard.store, mode)
    shard.store.create = wrapper.create  # type: ignore[method-assign]
    wrapper.armed = 1
    result = topic.produce({0: make_batch([b"a", b"b"]), 1: make_batch([b"c"])})
    assert result[0].base_offset == 1 and result[1].base_offset == 0
    reader = open_root(root.url, root.store.storage_options).topic("t")
    assert reader.partition(0).read(0).column("value").to_pylist() == [b"before", b"a", b"b"]
    assert reader.partition(1).read(0).column("value").to_pylist() == [b"c"]


def test_two_committers_to_one_shard_both_make_progress(root):
    root.create_topic("t", 2)
    steady = open_root(root.url, root.store.storage_options).topic("t")
    other = open_root(root.url, root.store.storage_options).topic("t")
    stop = threading.Event()
    steady_count = [0]

    def run_steady() -> None:
        while not stop.is_set():
            steady.append(0, make_batch([b"s"]))
            steady_count[0] += 1

    thread = threading.Thread(target=run_steady)
    thread.start()
    try:
        other.shard(0).commit_attempts = 30  # bounded: starvation would raise
        for _ in range(5):
            other.append(1, make_batch([b"o"]))
    finally:
        stop.set()
        thread.join()
    assert steady_count[0] > 0
    assert open_root(root.url, root.store.storage_options).topic("t").partition(1).refresh()
    assert other.partition(1).refresh().high_watermark == 5


# -- expiry and staged objects --------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = now_ms()

    def __call__(self) -> int:
        return self.now


def test_producer_state_expires_without_breaking_a_live_producer(root, monkeypatch):
    day = 86_400_000
    root.create_topic("t", 1, {"producer.id.expiration.ms": day})
    topic = root.topic("t")
    clock = Clock()
    monkeypatch.setattr("sparklog.storage.segments.now_ms", clock)  # objects written "now"
    topic.shard(0).clock_ms = clock
    topic.append(0, make_batch([b"idle"]), producer=ProducerBatch(1, 0, 0, 1))
    topic.append(0, make_batch([b"live"]), producer=ProducerBatch(2, 0, 0, 1))
    for hour in range(1, 30):  # the live producer writes every hour for 29 hours
        clock.now += 3_600_000
        seq = hour
        topic.append(0, make_batch([b"live"]), producer=ProducerBatch(2, 0, seq, 1))
        # a retry of its last batch is still deduplicated
        dup = topic.append(0, make_batch([b"live"]), producer=ProducerBatch(2, 0, seq, 1))
        assert dup.duplicate
    producers = topic.partition(0).refresh().producers
    assert "1" not in producers and "2" in producers
    reader = open_root(root.url, root.store.storage_options).topic("t").partition(0)
    assert set(reader.state.producers) == {"2"}


def test_markers_expire_after_their_window(root, monkeypatch):
    root.create_topic("t", 1, {"marker.retention.ms": 3_600_000})
    topic = root.topic("t")
    clock = Clock()
    monkeypatch.setattr("sparklog.storage.segments.now_ms", clock)
    topic.shard(0).clock_ms = clock
    topic.commit(topic.write({0: make_batch([b"a"])}), txn=("old", 1))
    clock.now += 2 * 3_600_000
    topic.commit(topic.write({0: make_batch([b"b"])}), txn=("new", 1))
    assert set(topic.partition(0).state.txn_versions) == {"new"}


def test_spark_batch_whose_tasks_ran_longer_than_ten_minutes_commits(root):
    root.create_topic("t", 2)
    topic = root.topic("t")
    staged = topic.write({0: make_batch([b"a"]), 1: make_batch([b"b"])})
    clock = Clock()
    topic.shard(0).clock_ms = clock
    clock.now += 25 * 60 * 1000  # tasks ran 25 minutes
    results = topic.commit(staged, txn=("app", 0))
    assert [results[p].base_offset for p in (0, 1)] == [0, 0]
    late = topic.write({0: make_batch([b"c"])})
    clock.now += STAGED_OBJECT_MAX_AGE_MS + 1
    with pytest.raises(StagedObjectExpiredError, match="older than"):
        topic.commit(late)


# -- bounded metadata ---------------------------------------------------------------------


def test_pruning_keeps_the_file_count_bounded_and_the_log_readable(root):
    topic = _fill(root, 40)  # snapshots every 4 commits
    before = len(shard_files(topic))
    far = now_ms() + 2 * DEFAULT_LOG_RETENTION_MS
    report = prune_topic_logs(topic, now=far, dry_run=True)
    assert report.deleted and len(shard_files(topic)) == before
    prune_topic_logs(topic, now=far)
    left = shard_files(topic)
    assert len(left) <= 4 + 2, left  # newest snapshot, commits after it, the hint
    reader = open_root(root.url, root.store.storage_options).topic("t")
    assert reader.partition(0).read(0).num_rows == 20
    topic.append(0, make_batch([b"after"]))
    assert reader.partition(0).refresh().high_watermark == 21


def test_a_writer_deletes_its_old_snapshots_once_their_grace_is_over(root):
    """A busy shard wrote a whole-state snapshot every few commits and kept each for the
    commits' hour of retention: tens of GB in the soak.  The writer now keeps its newest
    two, and older ones only while they are younger than SNAPSHOT_GRACE_MS."""
    root.create_topic("t", 1)
    topic = root.topic("t")
    clock = [now_ms()]
    topic.shard(0).clock_ms = lambda: clock[0]

    def snapshots() -> list[str]:
        return [n for n in shard_files(topic) if n.endswith(".snapshot")]

    for i in range(16):  # snapshot_interval=4: four snapshots, all within the grace
        topic.append(0, make_batch([f"a{i}".encode()]))
    assert len(snapshots()) == 4
    for i in range(24):  # six more, each written a whole grace after the one before
        clock[0] += SNAPSHOT_GRACE_MS // 4
        topic.append(0, make_batch([f"b{i}".encode()]))
    assert 1 <= len(snapshots()) <= SNAPSHOTS_KEPT + 1, snapshots()
    reader = open_root(root.url, root.store.storage_options).topic("t")
    assert reader.partition(0).read(0).num_rows == 40


def test_idle_reader_probes_one_key_per_shard(root):
    root.create_topic("t", 8, {"commit.shards": 2})
    topic = root.topic("t")
    topic.produce({p: make_batch([b"x"]) for p in range(8)})
    reader = open_root(root.url, root.store.storage_options).topic("t")
    for p in range(8):
        reader.partition(p).read(0)
    asked: list[str] = []
    original = reader.store.get_many

    def counting(keys):
        keys = list(keys)
        asked.extend(keys)
        return original(keys)

    for s in range(2):
        reader.shard(s).store.get_many = counting  # type: ignore[method-assign]
    for p in range(8):
        reader.partition(p).refresh()
    assert len(asked) == 8 and len(set(asked)) == 2  # one key per shard, nothing listed


# -- group logs ---------------------------------------------------------------------------


def test_zombie_member_commit_after_rebalance_is_rejected(root):
    groups = root.groups
    groups.set_generation("g", 1)
    groups.commit("g", {("t", 0): 5}, generation=1, member_id="m1")
    other = open_root(root.url, root.store.storage_options).groups
    other.set_generation("g", 2)  # a rebalance elsewhere
    with pytest.raises(IllegalGenerationError, match="generation 1"):
        groups.commit("g", {("t", 0): 9}, generation=1, member_id="m1")
    assert root.groups.fetch("g")[("t", 0)].offset == 5
    other.commit("g", {("t", 0): 7}, generation=2, member_id="m2")
    assert open_root(root.url, root.store.storage_options).groups.fetch("g")[("t", 0)].offset == 7


def test_offset_commits_never_list(root):
    groups = root.groups
    log, _ = groups.log("g")
    listed: list[str] = []
    original = log.store.list_names

    def counting(prefix):
        listed.append(prefix)
        return original(prefix)

    groups.commit("g", {("t", 0): 0})
    log.store.list_names = counting  # type: ignore[method-assign]
    for i in range(1, 20):
        groups.commit("g", {("t", i % 3): i})
    assert listed == []
    fresh = open_root(root.url, root.store.storage_options).groups.fetch("g")
    assert {tp: c.offset for tp, c in fresh.items()} == {("t", 0): 18, ("t", 1): 19, ("t", 2): 17}


def test_commit_file_format_is_checksummed_json():
    raw = encode_commit({"v": 3, "kind": "x"})
    doc = json.loads(raw)
    assert set(doc) == {"sum", "c"} and doc["c"] == {"v": 3, "kind": "x"}


@pytest.mark.parametrize("damage", [b"", b"{", b"[1, 2]", b"\xff\xfe"])
def test_damaged_topic_metadata_is_a_corrupt_record_error_naming_it(root, damage):
    info = root.create_topic("t", 1)
    key = f"{METADATA_LOG_PREFIX}/{info.version:020d}.json"
    root.store.delete(key)
    root.store.create(key, damage)
    fresh = open_root(root.url, root.store.storage_options)
    with pytest.raises(CorruptRecordError, match=f"{info.version:020d}.json") as err:
        fresh.topic("t")
    assert not err.value.retriable


def _count_reads(store, asked: list[str]) -> None:
    """Record on ``asked`` each key ``store`` reads or lists (``LIST <prefix>``)."""
    for name in ("get_or_none", "get_tail", "get_many", "list_names"):
        original = getattr(store, name)

        def counted(*args, _name=name, _call=original, **kwargs):
            if _name == "get_many":
                args = (list(args[0]), *args[1:])
                asked.extend(args[0])
            else:
                asked.append(f"LIST {args[0]}" if _name == "list_names" else args[0])
            return _call(*args, **kwargs)

        setattr(store, name, counted)


def test_opening_a_never_written_log_reads_its_hint_and_one_listing(root):
    """Issue 37: opening a shard log nothing was ever committed to read its hint, listed
    its folder, then read its first five versions anyway: most of a broker's start on a
    root of idle topics.  A listing that finds nothing at all is the log's state; a
    commit made after it is found by the next probe."""
    root.create_topic("t", 2)
    reader = open_root(root.url, root.store.storage_options).topic("t")
    asked: list[str] = []
    _count_reads(reader.shard(0).store, asked)
    assert reader.partition(0).high_watermark == 0
    assert asked == ["shards/00000/log/_latest.json", "LIST shards/00000/log"], asked
    root.topic("t").append(1, make_batch([b"x"]))
    assert reader.partition(1).refresh().high_watermark == 1


def test_a_log_of_four_commits_opens_with_five_reads_of_versions(s3_root_spec):
    """Opening a log reads its first versions in a chunk of four and one ahead; the one
    ahead was read again in a second chunk of seventeen when it was found, so a log of
    exactly four commits cost 22 reads of versions instead of 5 (issue 37: every such
    idle topic at a broker's start).  S3 only: a local root reads one version at a
    time."""
    root = open_root(*s3_root_spec, snapshot_interval=100)
    root.create_topic("t", 4)
    for p in range(4):
        root.topic("t").append(p, make_batch([b"x"]))
    reader = open_root(root.url, root.store.storage_options).topic("t")
    asked: list[str] = []
    _count_reads(reader.shard(0).store, asked)
    assert [reader.partition(p).high_watermark for p in range(4)] == [1, 1, 1, 1]
    versions = [k for k in asked if k.endswith(".json") and "_latest" not in k]
    assert len(versions) == 5, asked
    root.topic("t").append(0, make_batch([b"y"]))
    assert reader.partition(0).refresh().high_watermark == 2
