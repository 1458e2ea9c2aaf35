"""Races with real concurrency: several OS processes on one partition, and a writer crash."""

from __future__ import annotations

import multiprocessing
import subprocess
import sys
import textwrap

import pytest

from sparklog.storage import make_batch, open_root
from sparklog.storage.maintenance import collect_garbage

WRITERS = 4
BATCHES_PER_WRITER = 12


def _writer(url: str, options: dict, writer: int, out: multiprocessing.Queue) -> None:
    topic = open_root(url, options).topic("race")
    acked = []
    for i in range(BATCHES_PER_WRITER):
        values = [f"w{writer}-b{i}-r{j}".encode() for j in range(3)]
        result = topic.append(0, make_batch(values))
        acked.append((result.base_offset, values))
    out.put((writer, acked))


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["file", "s3"])
def test_processes_appending_to_one_partition(backend, tmp_path, request):
    if backend == "file":
        url, options = f"file://{tmp_path}/root", {}
    else:
        url, options = request.getfixturevalue("s3_root_spec")
    open_root(url, options).create_topic("race", 1)
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_writer, args=(url, options, w, out)) for w in range(WRITERS)]
    for p in procs:
        p.start()
    results = dict(out.get(timeout=300) for _ in procs)
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    expected = {}
    for acked in results.values():
        previous = -1
        for base, values in acked:
            assert base > previous, "a writer's own appends must land in its order"
            previous = base
            for j, v in enumerate(values):
                assert base + j not in expected
                expected[base + j] = v
    log = open_root(url, options).topic("race").partition(0)
    total = WRITERS * BATCHES_PER_WRITER * 3
    assert sorted(expected) == list(range(total)) and log.high_watermark == total
    assert log.read(0).column("value").to_pylist() == [expected[o] for o in range(total)]


def test_crash_between_object_write_and_commit(tmp_path):
    url = f"file://{tmp_path}/root"
    root = open_root(url)
    root.create_topic("t", 1)
    root.topic("t").append(0, make_batch([b"committed"]))
    crash = textwrap.dedent(
        f"""
        import os
        from sparklog.storage import make_batch, open_root
        topic = open_root({url!r}).topic("t")
        topic.write({{0: make_batch([b"staged but never committed"])}})
        os._exit(17)  # die before the commit
        """
    )
    done = subprocess.run([sys.executable, "-c", crash], cwd=str(_repo()), timeout=120)
    assert done.returncode == 17
    topic = open_root(url).topic("t")
    log = topic.partition(0)
    assert log.high_watermark == 1
    assert log.read(0).column("value").to_pylist() == [b"committed"]
    objects = {o.key for o in topic.store.list_objects("objects")}
    live = {s.object_key for s in log.segments()}
    assert len(objects - live) == 1
    assert collect_garbage(topic, 0).deleted == []  # first pass only marks
    assert set(collect_garbage(topic, 0).deleted) == objects - live
    assert {o.key for o in topic.store.list_objects("objects")} == live


def _repo():
    import pathlib

    return pathlib.Path(__file__).resolve().parents[2]


def _append_big(url: str, out: multiprocessing.Queue) -> None:
    topic = open_root(url).topic("forked")
    out.put(topic.append(0, make_batch([b"c" * 1000] * 600)).base_offset)


def test_forked_child_writes_large_chunks(tmp_path):
    """A child forked after its parent wrote (Spark forks its Python workers) checksums
    large chunks on a pool of its own: the parent's pool threads do not exist in it."""
    url = f"file://{tmp_path}/root"
    root = open_root(url)
    root.create_topic("forked", 1)
    root.topic("forked").append(0, make_batch([b"p" * 1000] * 600))  # the parent's pool runs
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    child = ctx.Process(target=_append_big, args=(url, out))
    child.start()
    child.join(timeout=120)
    assert child.exitcode == 0, "the forked child hung or failed"
    assert out.get(timeout=5) == 600
    assert open_root(url).topic("forked").partition(0).read(0).num_rows == 1200
