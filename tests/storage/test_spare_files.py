"""Spare temp files: a local commit takes the file made for it beside the object's write."""

from __future__ import annotations

import multiprocessing
import os

from sparklog.storage import ObjectStore, make_batch, open_root
from sparklog.storage.spare_files import SPARE_FILES, SPARE_MARK


def _names_below(path) -> list[str]:
    return sorted(
        os.path.relpath(os.path.join(folder, name), path)
        for folder, _, names in os.walk(path)
        for name in names
    )


def test_create_takes_the_spare_made_for_its_folder(tmp_path):
    store = ObjectStore(f"file://{tmp_path}/root")
    spare = SPARE_FILES.prepare(f"{tmp_path}/root/log")
    made = spare.made.result()
    assert made is not None and os.path.basename(made).startswith(SPARE_MARK)
    inode = os.stat(made).st_ino
    assert store.list_names("log") == []  # listings skip spares, as any temp file
    assert store.create("log/00001.json", b"first")
    assert os.stat(f"{tmp_path}/root/log/00001.json").st_ino == inode  # the spare, linked
    assert _names_below(tmp_path / "root") == ["log/00001.json"]
    SPARE_FILES.discard(spare)  # taken: nothing to remove
    assert store.get("log/00001.json") == b"first"
    assert not store.create("log/00001.json", b"second")  # still create-only
    assert store.get("log/00001.json") == b"first"


def test_spare_nobody_took_is_removed_when_the_block_ends(tmp_path):
    store = ObjectStore(f"file://{tmp_path}/root")
    with store.preparing_create("log/00001.json"):
        pass
    assert _names_below(tmp_path / "root") == []


def test_spare_removed_meanwhile_falls_back_to_a_new_temp_file(tmp_path):
    store = ObjectStore(f"file://{tmp_path}/root")
    spare = SPARE_FILES.prepare(f"{tmp_path}/root/log")
    made = spare.made.result()
    assert made is not None
    os.unlink(made)  # an operator, a cleaner
    assert store.create("log/00001.json", b"first")
    assert store.get("log/00001.json") == b"first"
    assert _names_below(tmp_path / "root") == ["log/00001.json"]


def test_appends_leave_no_temp_files(tmp_path):
    root = open_root(f"file://{tmp_path}/root", snapshot_interval=4)
    root.create_topic("t", 2)
    topic = root.topic("t")
    for i in range(6):
        topic.append(i % 2, make_batch([b"v%d" % i] * 3))
    topic.produce({0: make_batch([b"a"]), 1: make_batch([b"b"])})
    assert [topic.partition(p).high_watermark for p in (0, 1)] == [10, 10]
    assert not [n for n in _names_below(tmp_path / "root") if ".tmp-" in n]


def _take_in_child(directory: str, out: multiprocessing.Queue) -> None:
    out.put(SPARE_FILES.take(directory))


def test_forked_child_never_takes_its_parents_spare(tmp_path):
    """Spark forks its Python workers: a spare of the parent is the parent's alone."""
    directory = f"{tmp_path}/log"
    spare = SPARE_FILES.prepare(directory)
    made = spare.made.result()
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    child = ctx.Process(target=_take_in_child, args=(directory, out))
    child.start()
    child.join(timeout=60)
    assert child.exitcode == 0
    assert out.get(timeout=5) is None
    assert SPARE_FILES.take(directory) == made
    os.unlink(made)


def test_child_forked_while_the_registry_is_locked_still_takes_and_makes(tmp_path):
    """A fork copies a lock as it stands: one held by another thread at that moment
    would never be released in the child; the child starts with a fresh registry."""
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    with SPARE_FILES._lock:  # another thread inside take() or prepare() at the fork
        child = ctx.Process(target=_take_in_child, args=(f"{tmp_path}/log", out))
        child.start()
    try:
        child.join(timeout=60)
        assert child.exitcode == 0, "the forked child hung on the inherited lock"
    finally:
        if child.is_alive():
            child.kill()
    assert out.get(timeout=5) is None


def test_preparing_does_nothing_on_a_memory_root():
    store = ObjectStore("memory://spare-files-test")
    with store.preparing_create("log/00001.json"):
        assert store.create("log/00001.json", b"first")
    assert store.list_names("log") == ["00001.json"]
    store.delete_prefix("")
