"""The storage conformance suite: every test runs on file://, memory:// and s3:// (moto)."""

from __future__ import annotations

import pickle
import threading

import pyarrow as pa
import pytest

from sparklog.errors import (
    CorruptionError,
    FencedError,
    InvalidConfigError,
    InvalidRecordError,
    OffsetOutOfRangeError,
    ProducerSequenceError,
    StoreUnavailableError,
    TopicExistsError,
    UnknownTopicError,
)
from sparklog.storage import ObjectStore, ProducerBatch, make_batch, open_root
from sparklog.storage.segments import read_segment
from sparklog.storage.topics import BACKGROUND_CHECK_BYTES


@pytest.fixture
def root(root_spec):
    url, options = root_spec
    return open_root(url, options, snapshot_interval=4)


def values(table: pa.Table) -> list[bytes]:
    return table.column("value").to_pylist()


# -- object store --


def test_create_only_has_exactly_one_winner(root_spec):
    url, options = root_spec
    store = ObjectStore(url, options)
    results: dict[int, bool] = {}
    barrier = threading.Barrier(6)

    def attempt(i: int) -> None:
        mine = ObjectStore(url, options)
        barrier.wait()
        results[i] = mine.create("race/key", f"writer-{i}".encode() * 1000)

    threads = [threading.Thread(target=attempt, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [i for i, won in results.items() if won]
    assert len(winners) == 1
    assert store.get("race/key") == f"writer-{winners[0]}".encode() * 1000


def test_store_pickles_and_reads_ranges(root_spec):
    url, options = root_spec
    store = ObjectStore(url, options)
    assert store.create("a/b.bin", bytes(range(200)))
    clone = pickle.loads(pickle.dumps(store))
    assert clone.get_range("a/b.bin", 10, 20).to_pybytes() == bytes(range(10, 20))
    assert [i.key for i in clone.list_objects("a")] == ["a/b.bin"]
    assert clone.get_or_none("a/missing") is None


# -- topics --


def test_topic_lifecycle(root):
    info = root.create_topic("orders", 2, {"retention.ms": "1000", "cleanup.policy": "compact"})
    assert info.partitions == 2 and info.config["retention.ms"] == 1000
    with pytest.raises(TopicExistsError):
        root.create_topic("orders", 1)
    assert root.list_topics() == ["orders"]
    altered = root.alter_topic_config("orders", {"retention.bytes": 10_000})
    assert altered.config == {
        "retention.ms": 1000,
        "cleanup.policy": "compact",
        "retention.bytes": 10_000,
    }
    assert root.add_partitions("orders", 5).partitions == 5
    with pytest.raises(InvalidConfigError, match="more than the current 5"):
        root.add_partitions("orders", 3)
    root.delete_topic("orders")
    assert root.list_topics() == []
    with pytest.raises(UnknownTopicError, match="orders"):
        root.describe_topic("orders")


@pytest.mark.parametrize("name", ["", ".", "..", "a b", "x" * 250, "topic/sub", "ü"])
def test_invalid_topic_names_are_refused(root, name):
    with pytest.raises(InvalidConfigError, match=r"accepted: 1-249 characters"):
        root.create_topic(name)


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"retention.ms": "soon"}, "config 'retention.ms'='soon' is not accepted; accepted: an"),
        ({"retention.ms": -5}, "'retention.ms'=-5 is not accepted; accepted: an integer >= -1"),
        ({"cleanup.policy": "shred"}, "accepted: delete, compact, compact,delete"),
        ({"message.timestamp.type": "Now"}, "accepted: CreateTime, LogAppendTime"),
        ({"retention.hours": 1}, "unknown topic config key 'retention.hours'"),
    ],
)
def test_bad_config_names_key_and_accepted_values(root, config, message):
    with pytest.raises(InvalidConfigError, match=message):
        root.create_topic("t", 1, config)
    assert root.list_topics() == []


def test_recreated_topic_never_mixes_with_old_data(root):
    root.create_topic("t", 1)
    old = root.topic("t")
    old.append(0, make_batch([b"old"]))
    root.delete_topic("t")
    root.create_topic("t", 1)
    new = root.topic("t")
    assert new.partition(0).high_watermark == 0
    with pytest.raises(UnknownTopicError, match="was deleted"):
        old.reload()


# -- append and read --


def test_round_trip_keys_headers_timestamps(root):
    root.create_topic("t", 1)
    topic = root.topic("t")
    first = topic.append(
        0,
        make_batch(
            [b"v0", None, b""],
            keys=[b"k0", b"k1", None],
            timestamps_ms=[1_000, 2_000, 3_000],
            headers=[[("h", b"1"), ("h2", None)], None, []],
        ),
    )
    second = topic.append(0, make_batch([b"v3"], timestamps_ms=[4_000]), compression="zstd")
    assert (first.base_offset, second.base_offset) == (0, 3)
    table = open_root(root.url, root.store.storage_options).topic("t").partition(0).read(0)
    rows = table.to_pylist()
    assert [r["offset"] for r in rows] == [0, 1, 2, 3]
    assert [r["value"] for r in rows] == [b"v0", None, b"", b"v3"]
    assert [r["key"] for r in rows] == [b"k0", b"k1", None, None]
    assert rows[0]["headers"] == [{"key": "h", "value": b"1"}, {"key": "h2", "value": None}]
    assert [int(r["timestamp"].timestamp() * 1000) for r in rows] == [1000, 2000, 3000, 4000]
    assert values(topic.partition(0).read(1, 3)) == [None, b""]


def test_reads_out_of_range_name_the_valid_range(root):
    root.create_topic("t", 1)
    topic = root.topic("t")
    topic.append(0, make_batch([b"a", b"b"]))
    assert topic.partition(0).read(2).num_rows == 0
    with pytest.raises(OffsetOutOfRangeError, match=r"valid: \[0, 2\]"):
        topic.partition(0).read(3)
    with pytest.raises(UnknownTopicError, match="accepted: 0-0"):
        topic.partition(1)


def test_many_partitions_one_object(root):
    root.create_topic("t", 4)
    topic = root.topic("t")
    results = topic.produce(
        {p: make_batch([f"p{p}-{i}".encode() for i in range(p + 1)]) for p in range(4)}
    )
    assert {p: r.base_offset for p, r in results.items()} == {0: 0, 1: 0, 2: 0, 3: 0}
    objects = {s.object_key for p in range(4) for s in topic.partition(p).segments()}
    assert len(objects) == 1
    assert values(topic.partition(3).read(0)) == [b"p3-0", b"p3-1", b"p3-2", b"p3-3"]


@pytest.mark.parametrize("rows", [2, 12_000], ids=["small", "large"])
def test_oversized_record_is_refused_and_nothing_written(root, rows):
    """A large batch's size check runs beside its object's write (topics.py); the
    object it wrote is removed again, so a refused append leaves nothing behind."""
    root.create_topic("t", 1, {"max.message.bytes": 1000})
    topic = root.topic("t")
    batch = make_batch([b"x" * 100] * (rows - 1) + [b"y" * 1001])
    assert (batch.nbytes >= BACKGROUND_CHECK_BYTES) == (rows > 2)
    with pytest.raises(
        InvalidRecordError,
        match=f"record {rows - 1} of the batch is 1001 bytes; max.message.bytes accepts at "
        "most 1000",
    ):
        topic.append(0, batch)
    assert topic.partition(0).high_watermark == 0
    assert topic.store.list_objects("objects") == []
    topic.append(0, make_batch([b"x" * 100] * (rows - 1)))  # the same records, within bounds
    assert topic.partition(0).high_watermark == rows - 1


def test_many_partitions_normalised_at_once_read_back_as_given(root):
    """``Topic.normalize_many`` (a broker request's partitions normalised as one):
    each partition reads back its own records; records without a timestamp column
    get the append time (they were stored null before), and absent headers cost
    no bytes per record (``pa.nulls`` wrote a child element per record)."""
    root.create_topic("t", 8)
    topic = root.topic("t")
    inputs = [pa.table({"value": [f"{p}-{i}" for i in range(p + 1)]}) for p in range(8)]
    normalized = topic.normalize_many(inputs)
    assert [sum(b.num_rows for b in n.batches) for n in normalized] == list(range(1, 9))
    staged = topic.write({p: n.batches for p, n in enumerate(normalized)}, validated=True)
    topic.commit(staged)
    for p in range(8):
        table = topic.partition(p).read(0)
        assert values(table) == [f"{p}-{i}".encode() for i in range(p + 1)]
        assert table.column("timestamp").null_count == 0
        assert table.column("headers").null_count == p + 1
    # a segment of one record holds one record's bytes, not a share of the request's
    assert staged[0].size_bytes < 1024


def test_offset_for_timestamp(root):
    root.create_topic("t", 1)
    topic = root.topic("t")
    topic.append(0, make_batch([b"a", b"b"], timestamps_ms=[100, 200]))
    topic.append(0, make_batch([b"c", b"d"], timestamps_ms=[300, 400]))
    log = topic.partition(0)
    assert [log.offset_for_timestamp(t) for t in (0, 100, 150, 300, 301, 401)] == [0, 0, 1, 2, 3, 4]


def test_log_append_time_overrides_producer_timestamps(root):
    root.create_topic("t", 1, {"message.timestamp.type": "LogAppendTime"})
    topic = root.topic("t")
    topic.append(0, make_batch([b"a"], timestamps_ms=[5]))
    assert topic.partition(0).read(0).column("timestamp")[0].value > 1_000_000_000_000


# -- commit protocol --


def test_open_after_many_commits_uses_snapshots(root):
    root.create_topic("t", 1)
    topic = root.topic("t")
    for i in range(11):
        topic.append(0, make_batch([f"v{i}".encode()]))
    names = root.store.list_names(f"topics/t/{topic.info.topic_id}/shards/00000/log")
    assert "_latest.json" in names and any(n.endswith(".snapshot") for n in names)
    fresh = open_root(root.url, root.store.storage_options).topic("t").partition(0)
    assert fresh.high_watermark == 11
    assert values(fresh.read(9)) == [b"v9", b"v10"]


def test_two_handles_race_and_both_land(root):
    root.create_topic("t", 1)
    a = root.topic("t")
    b = open_root(root.url, root.store.storage_options).topic("t")
    a.partition(0).refresh()
    b.partition(0).refresh()
    ra = a.append(0, make_batch([b"a1", b"a2"]))
    rb = b.append(0, make_batch([b"b1"]))  # b's view is stale: it loses the race, re-reads
    assert (ra.base_offset, rb.base_offset) == (0, 2)
    assert values(a.partition(0).refresh() and a.partition(0).read(0)) == [b"a1", b"a2", b"b1"]


def test_stale_leader_epoch_is_fenced(root):
    root.create_topic("t", 1)
    old_leader = root.topic("t").partition(0)
    epoch = old_leader.bump_epoch()
    new_leader = open_root(root.url, root.store.storage_options).topic("t").partition(0)
    new_epoch = new_leader.bump_epoch()
    assert new_epoch == epoch + 1
    staged = root.topic("t").write({0: make_batch([b"late"])})[0]
    with pytest.raises(FencedError, match=f"epoch {epoch} is fenced by epoch {new_epoch}"):
        old_leader.append([staged], leader_epoch=epoch)
    assert new_leader.append([staged], leader_epoch=new_epoch).base_offset == 0


def test_idempotent_producer_duplicates_are_not_appended(root):
    root.create_topic("t", 1)
    topic = root.topic("t")
    log = topic.partition(0)
    batch = make_batch([b"a", b"b"])
    first = log.append([topic.write({0: batch})[0]], producer=ProducerBatch(7, 0, 0, 2))
    retry = log.append([topic.write({0: batch})[0]], producer=ProducerBatch(7, 0, 0, 2))
    assert retry.duplicate and retry.base_offset == first.base_offset == 0
    with pytest.raises(ProducerSequenceError, match="expected 2"):
        log.append([topic.write({0: batch})[0]], producer=ProducerBatch(7, 0, 5, 2))
    log.append([topic.write({0: batch})[0]], producer=ProducerBatch(7, 1, 0, 2))
    with pytest.raises(FencedError, match="producer 7 epoch 0 is fenced"):
        log.append([topic.write({0: batch})[0]], producer=ProducerBatch(7, 0, 2, 2))
    assert log.high_watermark == 4


def test_transaction_marker_makes_repeat_a_noop(root):
    root.create_topic("t", 1)
    topic = root.topic("t")
    assert not topic.append(0, make_batch([b"a"]), txn=("query-1", 0)).duplicate
    again = topic.append(0, make_batch([b"a"]), txn=("query-1", 0))
    assert again.duplicate
    topic.append(0, make_batch([b"b"]), txn=("query-1", 1))
    fresh = open_root(root.url, root.store.storage_options).topic("t").partition(0)
    assert values(fresh.read(0)) == [b"a", b"b"]


# -- typed topics --

CLICK = pa.struct([pa.field("user", pa.string(), nullable=False), pa.field("ms", pa.int64())])


def test_typed_topic_validates_and_evolves(root):
    root.create_topic("clicks", 1, value_type=CLICK)
    topic = root.topic("clicks")
    topic.append(0, make_batch([{"user": "u1", "ms": 5}], value_type=CLICK))
    with pytest.raises(InvalidRecordError, match="value field 'ms' has type string"):
        topic.append(0, pa.table({"value": pa.array([{"user": "u", "ms": "x"}])}))
    with pytest.raises(InvalidRecordError, match=r"not in the topic schema"):
        topic.append(0, pa.table({"value": pa.array([{"user": "u", "page": "x"}])}))
    with pytest.raises(InvalidConfigError, match="must be nullable"):
        root.evolve_value_type("clicks", pa.struct([*CLICK, pa.field("p", pa.string(), False)]))
    wider = pa.struct([*CLICK, pa.field("page", pa.string())])
    root.evolve_value_type("clicks", wider)
    topic = root.topic("clicks")
    topic.append(0, pa.table({"value": pa.array([{"user": "u2", "ms": 6, "page": "/"}], wider)}))
    assert values(topic.partition(0).read(0)) == [
        {"user": "u1", "ms": 5, "page": None},
        {"user": "u2", "ms": 6, "page": "/"},
    ]


# -- corruption --


def _corrupt(root, topic, mutate) -> None:
    seg = topic.partition(0).segments()[0]
    data = bytearray(topic.store.get(seg.object_key))
    topic.store.delete(seg.object_key)
    topic.store.create(seg.object_key, bytes(mutate(data, seg)))


def test_flipped_byte_is_detected(root):
    root.create_topic("t", 1)
    topic = root.topic("t")
    topic.append(0, make_batch([b"payload" * 20]))

    def flip(data, seg):
        data[seg.byte_end - 20] ^= 0xFF
        return data

    _corrupt(root, topic, flip)
    with pytest.raises(CorruptionError, match="fail their checksum"):
        open_root(root.url, root.store.storage_options).topic("t").partition(0).read(0)


def test_large_chunks_checksummed_beside_their_write(root):
    """An object's checksums are computed on the background pool beside its write
    (segments.py): objects written by several threads at once read back whole, and a
    flipped byte in a large chunk is still caught."""
    root.create_topic("t", 3)
    topic = root.topic("t")
    big = [bytes([i % 251]) * 1000 for i in range(600)]  # a 600 KB value column

    def produce(p: int) -> None:
        for _ in range(3):
            topic.append(p, make_batch(big, keys=[b"k%d" % i for i in range(600)]))

    writers = [threading.Thread(target=produce, args=(p,)) for p in range(3)]
    for w in writers:
        w.start()
    for w in writers:
        w.join()
    fresh = open_root(root.url, root.store.storage_options).topic("t")
    for p in range(3):
        assert values(fresh.partition(p).read(0)) == big * 3

    def flip(data, seg):
        data[seg.byte_start + (seg.byte_end - seg.byte_start) // 2] ^= 0x01
        return data

    _corrupt(root, topic, flip)
    with pytest.raises(CorruptionError, match="fail their checksum"):
        open_root(root.url, root.store.storage_options).topic("t").partition(0).read(0)


def test_objects_are_written_while_the_background_pool_is_busy(root):
    """An object's checksums, a large batch's size check and the commit's spare file are
    made on the background pool; with every pool thread taken (other writers), the
    writer does them itself rather than wait."""
    from sparklog.storage.background import BACKGROUND_THREADS, background_pool
    from sparklog.storage.topics import BACKGROUND_CHECK_BYTES

    root.create_topic("t", 1)
    topic = root.topic("t")
    big = [bytes([i % 251]) * 1000 for i in range(1200)]
    assert make_batch(big).nbytes >= BACKGROUND_CHECK_BYTES
    release = threading.Event()
    busy = [background_pool().submit(release.wait) for _ in range(BACKGROUND_THREADS)]
    try:
        topic.append(0, make_batch(big))
    finally:
        release.set()
    for task in busy:
        task.result()
    assert (
        values(open_root(root.url, root.store.storage_options).topic("t").partition(0).read(0))
        == big
    )


def test_truncated_object_is_detected(root):
    root.create_topic("t", 1)
    topic = root.topic("t")
    topic.append(0, make_batch([b"payload" * 20]))
    _corrupt(root, topic, lambda data, seg: data[: seg.byte_end - 10])
    with pytest.raises(CorruptionError, match="truncated"):
        open_root(root.url, root.store.storage_options).topic("t").partition(0).read(0)


# -- group offsets --


def test_group_offsets_are_durable_and_merge(root):
    root.groups.commit("g1", {("t", 0): 5, ("t", 1): 7})
    root.groups.commit("g1", {("t", 1): 9})
    fresh = open_root(root.url, root.store.storage_options).groups
    assert {k: v.offset for k, v in fresh.fetch("g1").items()} == {("t", 0): 5, ("t", 1): 9}
    assert fresh.list_groups() == ["g1"]
    fresh.delete("g1")
    assert fresh.fetch("g1") == {} and fresh.list_groups() == []
    with pytest.raises(InvalidConfigError, match="invalid group id"):
        fresh.commit("", {("t", 0): 1})


# -- unreachable storage --


def test_unreachable_s3_endpoint_gives_a_clear_retriable_error():
    import socket

    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    options = {
        "key": "k",
        "secret": "s",
        "client_kwargs": {"endpoint_url": f"http://127.0.0.1:{port}", "region_name": "us-east-1"},
        "config_kwargs": {"retries": {"max_attempts": 1}, "connect_timeout": 1},
        # the metadata log's commit retries the outage this long (default 120 s) first
        "commit_deadline_ms": 3_000,
    }
    root = open_root("s3://nowhere/root", options)
    with pytest.raises(StoreUnavailableError, match="s3://nowhere/root") as info:
        root.create_topic("t", 1)
    assert info.value.retriable


# -- objects shared by topics (one broker flush; storage/shared_objects.py) --


def _shared_write(root, parts_by_topic, compression="none"):
    from sparklog.storage.shared_objects import write_shared_object

    sections = []
    for name, parts in parts_by_topic.items():
        topic = root.topic(name)
        batches = {p: topic.normalize(make_batch(vs)) for p, vs in parts.items()}
        sections.append((topic, topic.section(batches, compression)))
    staged = write_shared_object(root.store, sections)
    for (topic, _), segments in zip(sections, staged, strict=True):
        topic.commit(segments)
    return staged


def test_one_object_shared_by_topics_reads_back_as_each_topics_own(root):
    from sparklog.storage.shared_objects import read_trailer

    root.create_topic("a", 2)
    root.create_topic("b", 1, {"compression.type": "zstd"})
    staged = _shared_write(root, {"a": {0: [b"a0"], 1: [b"a1", b"a1'"]}, "b": {0: [b"b0"] * 3}})
    keys = {seg.object_key for segments in staged for seg in segments.values()}
    assert len(keys) == 1 and next(iter(keys)).startswith("/objects/")
    key = next(iter(keys))[1:]
    assert root.store.exists(key)
    assert not root.topic("a").store.list_objects("objects")  # nothing under the topics
    a, b = root.topic("a"), root.topic("b")
    assert values(a.partition(1).read(0)) == [b"a1", b"a1'"]
    assert values(b.partition(0).read(0)) == [b"b0"] * 3
    store = pickle.loads(pickle.dumps(a.store))  # as a Spark executor gets it
    batches = read_segment(store, staged[0][0], a.info.record_schema)
    assert pa.Table.from_batches(batches).column("value").to_pylist() == [b"a0"]
    sections = read_trailer(root.store, key)
    assert sections is not None
    for section in sections:  # each section is a whole Arrow IPC file
        with pa.ipc.open_file(root.store.get_range(key, section.start, section.end)) as f:
            assert f.num_record_batches == (2 if section.topic == "a" else 1)
    assert [(s.topic, s.topic_id, s.shards) for s in sections] == [
        ("a", a.info.topic_id, tuple(sorted({0 % a.shards, 1 % a.shards}))),
        ("b", b.info.topic_id, (0,)),
    ]
    # a flipped byte in b's section is caught by b's segment checksum, not by a's reads
    seg = staged[1][0]
    data = bytearray(root.store.get(key))
    data[seg.byte_start + 20] ^= 0xFF
    root.store.delete(key)
    root.store.create(key, bytes(data))
    with pytest.raises(CorruptionError):
        root.topic("b").partition(0).read(0)
    assert values(root.topic("a").partition(0).read(0)) == [b"a0"]


def test_a_shared_object_is_collected_once_no_topic_references_it(root):
    from sparklog.clock import now_ms
    from sparklog.storage.shared_objects import collect_shared_garbage

    root.create_topic("a", 1)
    root.create_topic("b", 1)
    staged = _shared_write(root, {"a": {0: [b"x"]}, "b": {0: [b"y"]}})
    key = staged[0][0].object_key[1:]
    later = now_ms() + 60_000  # past the object's own age (the grace is 0 here)
    first = collect_shared_garbage(root, 0, now=later + 1)
    assert first.live_objects == 1 and not first.marked
    root.delete_topic("a")
    root.create_topic("a", 1)  # the same name, another id: references nothing of the old
    assert collect_shared_garbage(root, 0, now=later + 2).live_objects == 1  # b still reads it
    assert values(root.topic("b").partition(0).read(0)) == [b"y"]
    root.delete_topic("b")
    marked = collect_shared_garbage(root, 0, now=later + 3)
    assert marked.marked == [key] and not marked.deleted and root.store.exists(key)
    swept = collect_shared_garbage(root, 0, now=later + 4)
    assert swept.deleted == [key] and not root.store.exists(key)


# -- format 3: offset commits through a broker journal --


def _journalled(root, broker_id: int = 1, coordinates=lambda group: True):
    from sparklog.storage.journal import JournalWriter

    writer = JournalWriter(root.store, broker_id, flush_interval_ms=0)
    root.groups.use_journal(writer, coordinates)
    writer.on_sealed = root.groups.retire_journal
    return writer


def _offsets(groups, group):
    return {(tp.topic, tp.partition): c.offset for tp, c in groups.fetch(group).items()}


def test_journalled_commits_are_read_through_the_journal_and_then_folded(root):
    writer = _journalled(root)
    threads = [
        threading.Thread(target=root.groups.commit, args=(f"g{i}", {("t", 0): i, ("t", 1): 10 + i}))
        for i in range(12)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    reader = open_root(root.url, root.store.storage_options).groups  # another process
    log_only = open_root(root.url, root.store.storage_options).groups
    for i in range(12):
        assert _offsets(reader, f"g{i}") == {("t", 0): i, ("t", 1): 10 + i}
        [state] = [log_only.log(f"g{i}")[0].refresh()]
        assert state.offsets == {} and state.journal == writer.ref  # in the journal only
    assert 1 <= writer.commits <= 12
    # a commit made elsewhere (no journal) lands after what the journal acknowledged
    reader.commit("g0", {("t", 0): 99})
    root.groups.commit("g0", {("t", 1): 77})
    assert root.groups.fold_due(0, everything=True) == 12
    assert root.groups.pending_groups() == 0
    for groups in (root.groups, open_root(root.url, root.store.storage_options).groups):
        assert _offsets(groups, "g0") == {("t", 0): 99, ("t", 1): 77}
    folded = open_root(root.url, root.store.storage_options).groups.log("g5")[0].refresh()
    assert {k: v["offset"] for k, v in folded.offsets.items()} == {"t:0": 5, "t:1": 15}


def test_a_new_coordinator_seals_the_old_journal_and_nothing_acknowledged_is_lost(root):
    from sparklog.errors import NotCoordinatorError

    old = _journalled(root, 1)
    root.groups.commit("g", {("t", 0): 1})
    root.groups.commit("g", {("t", 1): 2})
    root.groups.commit("h", {("t", 0): 3})
    sealed = old.ref
    successor = open_root(root.url, root.store.storage_options)
    _journalled(successor, 2)
    successor.groups.commit("g", {("t", 2): 3})  # leases g: seals journal 1, folds its steps
    reader = open_root(root.url, root.store.storage_options).groups
    assert _offsets(reader, "g") == {("t", 0): 1, ("t", 1): 2, ("t", 2): 3}
    with pytest.raises(NotCoordinatorError, match="sealed") as info:
        root.groups.commit("g", {("t", 0): 5})  # the old coordinator's next flush
    assert info.value.retriable
    assert old.ref != sealed  # it went on in a fresh journal
    assert _offsets(reader, "h") == {("t", 0): 3}  # h's step in the sealed journal is read
    root.groups.commit("h", {("t", 1): 4})  # h leased again: folds the sealed journal's step
    assert _offsets(reader, "h") == {("t", 0): 3, ("t", 1): 4}
    assert _offsets(reader, "g") == {("t", 0): 1, ("t", 1): 2, ("t", 2): 3}


@pytest.mark.parametrize("journalled", [False, True], ids=["log", "journal"])
def test_a_transactions_offsets_are_held_until_its_end(root, journalled):
    """TxnOffsetCommit's offsets are the group's only when their transaction commits;
    until it ends they are held (OffsetFetch's "unstable" partitions), an abort drops
    them, and the end of a later transaction drops an earlier one's left behind."""
    if journalled:
        writer = _journalled(root)
    groups = root.groups
    groups.commit("g", {("t", 0): 1})
    groups.commit_transactional("g", 7, 0, 1, {("t", 0): (5, "m"), ("t", 1): (6, "")})
    groups.commit_transactional("g", 7, 0, 1, {("t", 1): (8, "")})  # the same transaction
    groups.commit_transactional("g", 9, 2, 4, {("t", 2): (3, "")})  # another producer's
    reader = open_root(root.url, root.store.storage_options).groups  # another process
    for view in (groups, reader):
        offsets, held = view.fetch_with_pending("g")
        assert {(tp.topic, tp.partition): c.offset for tp, c in offsets.items()} == {("t", 0): 1}
        assert held == {("t", 0), ("t", 1), ("t", 2)}
    assert groups.end_transaction("g", 7, 1, commit=True)
    assert not groups.end_transaction("g", 7, 1, commit=True)  # a repeated end: no write
    assert groups.end_transaction("g", 9, 4, commit=False)
    for view in (groups, reader):
        offsets, held = view.fetch_with_pending("g")
        assert held == frozenset()
        assert _offsets(view, "g") == {("t", 0): 5, ("t", 1): 8}
        assert offsets[("t", 0)].metadata == "m"
    groups.commit_transactional("g", 7, 0, 2, {("t", 0): (50, "")})  # left behind
    assert groups.end_transaction("g", 7, 3, commit=True)  # a later one ends: dropped
    assert _offsets(reader, "g") == {("t", 0): 5, ("t", 1): 8}
    groups.commit_transactional("g", 7, 0, 4, {("t", 3): (1, "")})
    if journalled:
        assert groups.fold_due(0, everything=True) == 1
        assert writer.commits >= 6
    # a fresh process reads the held offsets back from the log's snapshot or commits
    assert open_root(root.url, root.store.storage_options).groups.fetch_with_pending("g")[1] == {
        ("t", 3)
    }


def test_a_rotated_journal_is_deleted_and_every_group_stays_readable(root):
    writer = _journalled(root)
    idle = writer.ref
    root.groups.rotate_journal()  # an idle broker's journal holds nothing: kept, not listed
    assert writer.ref == idle
    root.groups.commit("g", {("t", 0): 1})
    first = writer.ref
    root.groups.rotate_journal()
    assert root.store.list_names(first.prefix) == []
    reader = open_root(root.url, root.store.storage_options).groups
    assert _offsets(reader, "g") == {("t", 0): 1}
    root.groups.commit("g", {("t", 0): 2})
    assert _offsets(reader, "g") == {("t", 0): 2}
    assert reader.log("g")[0].refresh().journal == writer.ref != first
    root.groups.close_journal()  # a graceful stop folds everything and deletes the journal
    assert root.store.list_names(writer.ref.prefix) == []
    assert _offsets(open_root(root.url, root.store.storage_options).groups, "g") == {("t", 0): 2}


# -- format 3: a transactional id's state through the broker journal (issue 37 item 4b) --


def _txn_journalled(root, broker_id: int = 1):
    """``root``'s transactional ids journalled as their coordinator's (every id), beside
    its groups in the same journal."""
    from sparklog.storage.journal import JournalWriter

    writer = JournalWriter(root.store, broker_id, flush_interval_ms=0)
    root.groups.use_journal(writer, lambda group: True)
    root.transactions.use_journal(writer, lambda tid: True)

    def sealed(ref):
        root.groups.retire_journal(ref)
        root.transactions.retire_journal(ref)

    writer.on_sealed = sealed
    return writer


def _begin(n: int, partitions=()):
    """A state change: the transaction number ``n`` ongoing over ``partitions``."""

    def change(state):
        return {
            **(state or {"pid": 7, "epoch": 0}),
            "state": "Ongoing",
            "n": n,
            "partitions": [list(p) for p in partitions],
        }

    return change


def test_a_transactional_ids_steps_ride_the_journal_and_fold_into_its_log(root):
    """An id's changes are journal steps of its coordinator (the log holds only the
    lease until the fold), read by another process through the journal's tail; a
    direct commit elsewhere lands after them; the fold and a rotation keep the state."""
    writer = _txn_journalled(root)
    txns = root.transactions
    assert txns.write("t", _begin(1))["n"] == 1
    assert txns.write("t", _begin(1, [("a", 0)]))["partitions"] == [["a", 0]]
    root.groups.commit("g", {("a", 0): 3})  # the same flushes carry a group's steps
    assert txns.write("t", lambda state: None) is None  # no change: nothing written
    reader = open_root(root.url, root.store.storage_options).transactions  # another process
    assert reader.state("t")["partitions"] == [["a", 0]]
    log_only = open_root(root.url, root.store.storage_options).transactions
    logged = log_only.log("t")[0].refresh()
    assert logged.txn is None and logged.journal == writer.ref  # in the journal only
    assert txns.held_state("t")["n"] == 1 and reader.held_state("t") is None
    reader.write("t", _begin(2, [("b", 1)]))  # a direct commit: folds the journal's steps
    assert txns.write("t", lambda state: {**state, "state": "PrepareCommit"})["n"] == 2
    assert reader.state("t") == {**txns.state("t"), "state": "PrepareCommit"}
    root.groups.rotate_journal(also_folded=txns.fold_all)
    assert root.store.list_names(writer.ref.prefix) == []
    fresh = open_root(root.url, root.store.storage_options).transactions
    state = fresh.log("t")[0].refresh().txn
    assert (state["state"], state["n"], state["partitions"]) == ("PrepareCommit", 2, [["b", 1]])
    assert _offsets(open_root(root.url, root.store.storage_options).groups, "g") == {("a", 0): 3}


def test_a_new_coordinator_of_a_transactional_id_seals_the_old_journal(root):
    """Taking over an id (its next step on another broker) seals the old coordinator's
    journal and folds the id's steps acknowledged there; the old one's next step fails
    retriably."""
    from sparklog.errors import NotCoordinatorError

    _txn_journalled(root, 1)
    root.transactions.write("t", _begin(1, [("a", 0)]))
    successor = open_root(root.url, root.store.storage_options)
    _txn_journalled(successor, 2)
    after = successor.transactions.write("t", lambda s: {**s, "state": "PrepareAbort"})
    assert (after["n"], after["partitions"]) == (1, [["a", 0]])
    with pytest.raises(NotCoordinatorError, match="sealed"):
        root.transactions.write("t", _begin(2))
    reader = open_root(root.url, root.store.storage_options).transactions
    assert reader.state("t")["state"] == "PrepareAbort"


def test_a_transactions_steps_do_not_wait_out_the_journals_flush_interval(root):
    """A transaction waits for its steps one after another: each starts a journal commit
    at once (as a flush of records does), its offsets' and its end's in the group's log
    too, where an offset commit waits for the next flush, at most the flush interval
    (here an hour) after the previous one."""
    from sparklog.storage.journal import JournalWriter

    writer = JournalWriter(root.store, 1, flush_interval_ms=3_600_000)
    root.groups.use_journal(writer, lambda group: True)
    root.transactions.use_journal(writer, lambda tid: True)
    done: list[int] = []

    def steps() -> None:
        for n in range(1, 4):  # the first flushes an idle journal; the others follow it
            done.append(root.transactions.write("t", _begin(n))["n"])

    def group_steps() -> None:  # a transaction's offsets and its end in a group
        root.groups.commit_transactional("g", 7, 0, 3, {("a", 0): (5, "")})
        done.append(root.groups.end_transaction("g", 7, 3, commit=True))

    thread = threading.Thread(target=lambda: (steps(), group_steps()), daemon=True)
    thread.start()
    thread.join(60)
    assert done == [1, 2, 3, True] and writer.commits == 5
    assert _offsets(root.groups, "g") == {("a", 0): 5}
    writer.close()


def test_a_transactional_ids_log_is_pruned_behind_its_newest_snapshot(root):
    """A busy id folds once per fold interval: its log is pruned like a group's (the
    broker's cleaner prunes the ids it coordinates), and reads the same afterwards."""
    from sparklog.clock import now_ms
    from sparklog.storage.maintenance import prune_transaction_log

    writer_root = open_root(root.url, root.store.storage_options, snapshot_interval=4)
    for n in range(1, 20):
        writer_root.transactions.write("t", _begin(n))
    prefix = writer_root.transactions.log("t")[0].prefix
    before = len(root.store.list_names(prefix))
    assert prune_transaction_log(root, "t", now=now_ms()).deleted == []  # inside the window
    pruned = prune_transaction_log(root, "t", now=now_ms() + 24 * 3_600_000)
    assert len(pruned.deleted) == before - len(root.store.list_names(prefix)) > 10
    assert open_root(root.url, root.store.storage_options).transactions.state("t")["n"] == 19


# -- format 3: a shard's records through the broker journal (issue 37 items 1-3) --


def _shard_leader(root, topic, broker_id: int):
    """A broker's handle on shard 0 of ``topic`` that journals its changes."""
    from sparklog.storage.journal import JournalWriter

    writer = JournalWriter(root.store, broker_id, flush_interval_ms=0)
    shard = root.topic(topic).open_shard(0)
    shard.use_journal(writer)
    shard.bump_epoch()  # the lease, as a leader's first produce takes it
    return writer, shard


def _journal_append(root, shard, topic, partition, texts):
    staged = root.topic(topic).write({partition: make_batch([t.encode() for t in texts])})
    return shard.append({partition: [staged[partition]]})[partition]


def _log_versions(root, topic):
    return [n for n in root.topic(topic).store.list_names("shards/00000/log") if n[0].isdigit()]


def _read_all(url, options, topic, partitions):
    fresh = open_root(url, options).topic(topic)  # another process: log and journal tail
    return {p: values(fresh.partition(p).read(0)) for p in range(partitions)}


def test_journalled_records_are_read_through_the_tail_then_folded_into_the_shard_log(root):
    root.create_topic("j", 2)
    writer, shard = _shard_leader(root, "j", 1)
    first = _journal_append(root, shard, "j", 0, ["a", "b"])
    versions_after_lease = _log_versions(root, "j")
    second = _journal_append(root, shard, "j", 1, ["c"])
    third = _journal_append(root, shard, "j", 0, ["d"])
    assert (first.base_offset, second.base_offset, third.base_offset) == (0, 0, 2)
    assert _log_versions(root, "j") == versions_after_lease  # no shard-log commit per append
    assert writer.commits == 3
    opts = root.store.storage_options
    assert _read_all(root.url, opts, "j", 2) == {0: [b"a", b"b", b"d"], 1: [b"c"]}
    assert shard.fold()
    assert len(_log_versions(root, "j")) == len(versions_after_lease) + 1
    assert not shard.fold()  # nothing left to fold
    root.store.delete_prefix(writer.ref.prefix)  # folded: the log alone holds everything
    assert _read_all(root.url, opts, "j", 2) == {0: [b"a", b"b", b"d"], 1: [b"c"]}


def test_a_leaders_reopened_handle_holds_its_unfolded_journal_steps(root):
    """A broker re-opens a topic after a config change (a fresh handle on each shard,
    sharing the broker's journal writer): the records journalled and not yet folded are
    in its view, and its next append follows them.  The fresh handle skipped the tail as
    the lease holder's, so the broker's cleaner and fetches saw an empty partition until
    the next fold (CI: the retention test waited out its 30 s)."""
    root.create_topic("r", 1)
    writer, shard = _shard_leader(root, "r", 1)
    _journal_append(root, shard, "r", 0, ["a", "b"])
    reopened = root.topic("r").open_shard(0)
    reopened.use_journal(writer)
    state = reopened.refresh()
    assert state.journal == writer.ref and state.folded >= 0
    placed = _journal_append(root, reopened, "r", 0, ["c"])
    assert placed.base_offset == 2
    assert values(root.topic("r").partition(0).read(0)) == [b"a", b"b", b"c"]
    assert reopened.fold()
    assert _read_all(root.url, root.store.storage_options, "r", 1) == {0: [b"a", b"b", b"c"]}


def test_a_reader_in_the_writers_process_reads_its_journal_from_memory(root, monkeypatch):
    """A broker's own fetch reader (another handle, without the lease) read the broker's
    journal from the store: each new version, then a probe of the next one, per refresh.
    Versions this process wrote are read from memory, and its journal's end is known."""
    from sparklog.storage.journal import Journal

    root.create_topic("m", 1)
    _, shard = _shard_leader(root, "m", 1)
    reader = open_root(root.url, root.store.storage_options).topic("m").partition(0)
    _journal_append(root, shard, "m", 0, ["a"])
    reader.refresh()
    reads: list[int] = []
    original = Journal.read
    monkeypatch.setattr(Journal, "read", lambda j, v: reads.append(v) or original(j, v))
    for text in ("b", "c"):
        _journal_append(root, shard, "m", 0, [text])
        reader.refresh()
    assert values(reader.read(0)) == [b"a", b"b", b"c"]
    assert reads == []


def test_a_direct_writer_revokes_a_leased_shard_and_no_offset_is_given_twice(root):
    from sparklog.errors import NotCoordinatorError

    root.create_topic("k", 1)
    writer, shard = _shard_leader(root, "k", 1)
    _journal_append(root, shard, "k", 0, ["a", "b"])
    direct = open_root(root.url, root.store.storage_options).topic("k")  # a brokerless writer
    placed = direct.append(0, make_batch([b"x"]))
    assert placed.base_offset == 2  # after what the journal acknowledged
    with pytest.raises(NotCoordinatorError, match="revoked"):  # its flush leaves it out
        _journal_append(root, shard, "k", 0, ["lost"])
    # the leader's handle lost the lease: its next change is a commit of the log
    assert _journal_append(root, shard, "k", 0, ["y"]).base_offset == 3
    assert writer.unfolded_keys() == []
    shard.bump_epoch()  # the leader leases the shard again (its next produce does)
    assert _journal_append(root, shard, "k", 0, ["c"]).base_offset == 4
    assert writer.unfolded_keys() == [shard.journal_key]  # journalled again
    opts = root.store.storage_options
    assert _read_all(root.url, opts, "k", 1) == {0: [b"a", b"b", b"x", b"y", b"c"]}


def test_a_successor_leader_revokes_the_shard_and_keeps_every_acknowledged_record(root):
    from sparklog.errors import NotCoordinatorError

    root.create_topic("f", 1)
    _, old = _shard_leader(root, "f", 1)
    _journal_append(root, old, "f", 0, ["a"])
    _journal_append(root, old, "f", 0, ["b"])
    successor_root = open_root(root.url, root.store.storage_options)
    _, new = _shard_leader(successor_root, "f", 2)
    epoch = new.bump_epoch()  # the lease: revokes the shard in journal 1, folds its steps
    assert epoch > 0
    assert _journal_append(successor_root, new, "f", 0, ["c"]).base_offset == 2
    with pytest.raises(NotCoordinatorError, match="revoked"):  # its flush leaves it out
        _journal_append(root, old, "f", 0, ["lost"])
    opts = root.store.storage_options
    assert _read_all(root.url, opts, "f", 1) == {0: [b"a", b"b", b"c"]}


def test_a_direct_maintenance_commit_lands_after_the_journal_steps_it_was_built_on(root):
    root.create_topic("m", 1)
    _, shard = _shard_leader(root, "m", 1)
    for texts in (["a", "b"], ["c"], ["d"]):
        _journal_append(root, shard, "m", 0, texts)
    cleaner = open_root(root.url, root.store.storage_options).topic("m").partition(0)

    def drop_first(state):  # retention: the first segment (offsets 0-1) goes
        assert state.high_watermark == 4  # built on the journal's steps
        return [0], [], 2

    cleaner.replace_segments(drop_first, "retention")
    _journal_append(root, shard, "m", 0, ["e"])
    for step in ("tail", "folded"):
        fresh = open_root(root.url, root.store.storage_options).topic("m").partition(0)
        assert [s.base_offset for s in fresh.segments()] == [2, 3, 4], step  # 0 stays removed
        assert (fresh.log_start_offset, values(fresh.read(2))) == (2, [b"c", b"d", b"e"])
        assert shard.fold() == (step == "tail")


def test_a_revoke_takes_one_shard_from_a_journal_and_the_others_go_on(root):
    from sparklog.storage.journal import Journal

    root.create_topic("r1", 1)
    root.create_topic("r2", 1)
    writer, one = _shard_leader(root, "r1", 1)
    two = root.topic("r2").open_shard(0)
    two.use_journal(writer)  # the same broker leads both
    two.bump_epoch()
    _journal_append(root, one, "r1", 0, ["a"])
    _journal_append(root, two, "r2", 0, ["x"])
    journal = writer.ref
    # another writer revokes r1 while the leader's flush holding both shards is on its way
    _, revoke_at = Journal(root.store, journal).seal(writer.next_version, "test", [one.journal_key])
    b1, _ = one.stage_append({0: [root.topic("r1").write({0: make_batch([b"lost"])})[0]]})
    b2, finish = two.stage_append({0: [root.topic("r2").write({0: make_batch([b"y"])})[0]]})
    landed = writer.write_shards({one.journal_key: b1, two.journal_key: b2})
    assert landed.revoked == {one.journal_key} and landed.version == revoke_at + 1
    assert finish(two.journalled(landed.ref, landed.version, b2))[0].base_offset == 1
    assert writer.ref == journal  # nothing was sealed whole
    opts = root.store.storage_options
    assert _read_all(root.url, opts, "r1", 1) == {0: [b"a"]}
    assert _read_all(root.url, opts, "r2", 1) == {0: [b"x", b"y"]}


def test_log_check_names_a_damaged_or_missing_journal_version(root):
    from sparklog.storage.log_check import check_root

    root.create_topic("c", 1)
    writer, shard = _shard_leader(root, "c", 1)
    for texts in (["a"], ["b"], ["c"]):
        _journal_append(root, shard, "c", 0, texts)
    assert check_root(open_root(root.url, root.store.storage_options)).findings == []
    first = f"{writer.ref.prefix}/{0:020d}.json"
    middle = f"{writer.ref.prefix}/{1:020d}.json"
    raw = bytearray(root.store.get(first))
    raw[len(raw) // 2] ^= 0xFF
    root.store.put(first, bytes(raw))
    root.store.delete(middle)
    findings = check_root(open_root(root.url, root.store.storage_options)).findings
    problems = {(f.file.rsplit("/", 1)[-1], f.problem.split(":")[0]) for f in findings}
    assert (middle.rsplit("/", 1)[-1], "missing") in problems
    assert any(f.file.endswith(first) and f.log.startswith("journal ") for f in findings)


def test_log_recover_replaces_a_damaged_last_journal_version_and_gives_up_its_offsets(root):
    """The journal's last version is lost: its records' offsets (the rows of the window's
    objects no sound version references) are given up, never given out again."""
    from sparklog.errors import CorruptRecordError
    from sparklog.storage.journal import forget_journal
    from sparklog.storage.log_recover import execute_journal_recovery, plan_journal_recovery

    root.create_topic("d", 2)
    writer, shard = _shard_leader(root, "d", 1)
    for texts in (["a"], ["b", "c"], ["lost-1", "lost-2"]):
        _journal_append(root, shard, "d", 0, texts)
    last = f"{writer.ref.prefix}/{2:020d}.json"
    raw = bytearray(root.store.get(last))
    raw[len(raw) // 2] ^= 0xFF
    root.store.put(last, bytes(raw))
    forget_journal(root.store, writer.ref)  # readers elsewhere: not this process's memory
    opts = root.store.storage_options
    with pytest.raises(CorruptRecordError):
        _read_all(root.url, opts, "d", 1)
    name = f"{writer.ref.broker}/{writer.ref.journal}"
    listed = sorted(o.key for o in root.store.list_objects(""))
    plan = plan_journal_recovery(open_root(root.url, opts), name)
    assert sorted(o.key for o in root.store.list_objects("")) == listed  # a plan only reads
    assert [r.version for r in plan.repairs] == [2] and plan.given_up == {"d/0": [(3, 5)]}
    execute_journal_recovery(open_root(root.url, opts), name, plan)
    assert _read_all(root.url, opts, "d", 2) == {0: [b"a", b"b", b"c"], 1: []}
    successor = open_root(root.url, opts)
    _, new = _shard_leader(successor, "d", 2)  # its lease folds the repaired journal
    assert _journal_append(successor, new, "d", 0, ["after"]).base_offset == 5
    assert _read_all(root.url, opts, "d", 2) == {0: [b"a", b"b", b"c", b"after"], 1: []}
