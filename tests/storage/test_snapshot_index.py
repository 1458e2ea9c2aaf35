"""Indexed shard snapshots: opening reads the header and the chunk a read needs, nothing more.

A shard snapshot is cut into per-partition chunks of segments with a
checksummed header at the end; chunks are read on demand.  These tests shrink
the chunk (4 segments) and the opening read so that a small log shows what a
100,000-commit log does, and count what is read from the snapshot file rather
than timing it.  Every test runs on file://, memory:// and s3:// (moto).
"""

from __future__ import annotations

import struct

import pytest

from sparklog.errors import CorruptRecordError
from sparklog.storage import make_batch, metalog, open_root, shard_codec

COMMITS = 40
SNAPSHOT = f"shards/00000/log/{COMMITS - 1:020d}.snapshot"


@pytest.fixture
def small_chunks(monkeypatch):
    monkeypatch.setattr(shard_codec, "SNAPSHOT_CHUNK_ROWS", 4)
    monkeypatch.setattr(metalog, "SNAPSHOT_TAIL_BYTES", 512)


def _build(root_spec, commits: int = COMMITS):
    """Partition 0 with ``commits`` one-record commits (offset i holds b"r<i>"), ending on a
    snapshot; partition 1 has one record (so the snapshot holds two partitions)."""
    root = open_root(*root_spec, snapshot_interval=COMMITS)
    root.create_topic("t", 2)
    topic = root.topic("t")
    topic.append(1, make_batch([b"other"]))
    for i in range(commits - 1):
        topic.append(0, make_batch([b"r%d" % i]))
    return root, topic


def _snapshot_reads(store) -> list[tuple[str, int]]:
    """Record (call, bytes) of every read of a snapshot file through ``store``."""
    reads: list[tuple[str, int]] = []
    get_tail, get_range = store.get_tail, store.get_range

    def tail(key, nbytes):
        found = get_tail(key, nbytes)
        if key.endswith(".snapshot") and found is not None:
            reads.append(("tail", len(found[0])))
        return found

    def ranged(key, start, end):
        data = get_range(key, start, end)
        if key.endswith(".snapshot"):
            reads.append(("range", data.size))
        return data

    store.get_tail, store.get_range = tail, ranged
    return reads


def _header(raw: bytes) -> dict:
    import json

    _, length, magic = struct.unpack("<QQ4s", raw[-20:])
    assert magic == metalog.INDEXED_SNAPSHOT_MAGIC
    return json.loads(raw[-20 - length : -20])


def test_opening_reads_the_header_and_the_newest_chunk_only(root_spec, small_chunks):
    root, topic = _build(root_spec)
    size = len(topic.store.get(SNAPSHOT))
    assert len(_header(topic.store.get(SNAPSHOT))["parts"]["0"]["chunks"]["first"]) == 10

    reader = open_root(root.url, root.store.storage_options).topic("t")
    reads = _snapshot_reads(reader.store)
    log = reader.partition(0)
    newest = log.read(log.high_watermark - 2)
    assert newest.column("value").to_pylist() == [b"r37", b"r38"]
    # one opening read of the tail, at most one more for the rest of the header, and the
    # newest chunk (4 segments) when the tail did not hold it: never the other 9 chunks
    assert reads[0] == ("tail", 512) and len(reads) <= 3, reads
    assert sum(n for _, n in reads) < size / 2, (reads, size)

    # reading from the start reads the older chunks it needs, then nothing again
    assert log.read(0).column("value").to_pylist() == [b"r%d" % i for i in range(COMMITS - 1)]
    before = len(reads)
    assert log.read(0).num_rows == COMMITS - 1
    assert len(reads) == before


def test_flip_in_a_chunk_is_detected_when_that_chunk_is_read(root_spec, small_chunks):
    root, topic = _build(root_spec)
    raw = topic.store.get(SNAPSHOT)
    chunks = _header(raw)["parts"]["0"]["chunks"]  # oldest first
    at = (chunks["start"][0] + chunks["end"][0]) // 2
    topic.store.delete(SNAPSHOT)
    topic.store.create(SNAPSHOT, raw[:at] + bytes([raw[at] ^ 1]) + raw[at + 1 :])

    log = open_root(root.url, root.store.storage_options).topic("t").partition(0)
    assert log.read(log.high_watermark - 1).num_rows == 1  # the damaged chunk is not read
    with pytest.raises(CorruptRecordError, match=f"{SNAPSHOT}.* fail their checksum") as err:
        log.read(0)
    assert not err.value.retriable


@pytest.mark.parametrize("where", ["header", "trailer"])
def test_flip_in_the_header_is_detected_on_open(root_spec, small_chunks, where):
    root, topic = _build(root_spec)
    raw = topic.store.get(SNAPSHOT)
    at = len(raw) - 30 if where == "header" else len(raw) - 15
    topic.store.delete(SNAPSHOT)
    topic.store.create(SNAPSHOT, raw[:at] + bytes([raw[at] ^ 1]) + raw[at + 1 :])
    with pytest.raises(CorruptRecordError, match=SNAPSHOT):
        open_root(root.url, root.store.storage_options).topic("t").partition(0).read(0)


def test_a_reader_whose_snapshot_was_pruned_reopens_from_the_newest(root_spec, small_chunks):
    root, topic = _build(root_spec)
    reader = open_root(root.url, root.store.storage_options).topic("t")
    assert reader.partition(0).high_watermark == COMMITS - 1  # opened on the snapshot, lazily
    for i in range(COMMITS - 1, 2 * COMMITS - 1):  # the next snapshot, at version 79
        topic.append(0, make_batch([b"r%d" % i]))
    topic.store.delete(SNAPSHOT)  # what pruning does once the newer one is old enough

    values = reader.partition(0).read(0).column("value").to_pylist()
    assert values == [b"r%d" % i for i in range(2 * COMMITS - 1)]


def test_appends_after_an_indexed_snapshot_keep_every_record(root_spec, small_chunks):
    root, _ = _build(root_spec)
    writer = open_root(root.url, root.store.storage_options, snapshot_interval=COMMITS).topic("t")
    for i in range(COMMITS - 1, 2 * COMMITS + 5):  # a writer opened lazily writes a snapshot
        writer.append(0, make_batch([b"r%d" % i]))
    log = open_root(root.url, root.store.storage_options).topic("t").partition(0)
    assert log.read(0).column("value").to_pylist() == [b"r%d" % i for i in range(2 * COMMITS + 5)]
    assert (
        open_root(root.url, root.store.storage_options).topic("t").partition(1).read(0).num_rows
        == 1
    )
