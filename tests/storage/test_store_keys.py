"""ObjectStore's key operations behave alike on file://, memory:// and s3:// (moto).

A local root is served with os calls (no fsspec), memory:// and S3 through fsspec:
listing, deleting and the root check must agree on every backend, since the logs,
the catalog and garbage collection rely on them (keys relative to the root, sorted,
temp files never listed, a missing folder lists nothing).  And the catalog's
metadata path on a local root loads neither pyarrow, numpy nor fsspec.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sparklog.storage.objectstore import ObjectStore, local_root

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def store(root_spec) -> ObjectStore:
    url, options = root_spec
    return ObjectStore(url, options)


def _fill(store: ObjectStore) -> None:
    for key, size in [("a/b/1.json", 3), ("a/b/2.json", 5), ("a/c.bin", 7), ("ab/x", 1)]:
        assert store.create(key, b"x" * size)


def test_missing_prefixes_list_nothing_and_delete_quietly(store):
    assert store.list_names("topics") == []
    assert store.list_objects("topics") == []
    assert not store.exists("topics/t")
    store.delete("topics/t/none.json")
    store.delete_prefix("topics/t")


def test_list_names_gives_sorted_direct_children(store):
    _fill(store)
    assert store.list_names("a") == ["b", "c.bin"]
    assert store.list_names("a/b") == ["1.json", "2.json"]
    assert store.list_names("") == ["a", "ab"]


def test_list_objects_is_recursive_relative_and_sorted(store):
    _fill(store)
    found = store.list_objects("a")
    assert [(i.key, i.size_bytes) for i in found] == [
        ("a/b/1.json", 3),
        ("a/b/2.json", 5),
        ("a/c.bin", 7),
    ]
    assert all(i.modified_ms > 0 for i in found)
    assert [i.key for i in store.list_objects("")] == [
        "a/b/1.json",
        "a/b/2.json",
        "a/c.bin",
        "ab/x",
    ]


def test_temp_names_are_never_listed(store):
    _fill(store)
    store.put("a/b/3.json", b"hint")  # written through a temp name locally
    store.create("a/b/4.json.tmp-0123", b"partial")  # as a writer that died midway leaves one
    assert store.list_names("a/b") == ["1.json", "2.json", "3.json"]
    assert [i.key for i in store.list_objects("a/b")] == ["a/b/1.json", "a/b/2.json", "a/b/3.json"]


def test_delete_and_delete_prefix_remove_only_their_keys(store):
    _fill(store)
    store.delete("a/c.bin")
    assert not store.exists("a/c.bin") and store.exists("a/b/1.json")
    store.delete_prefix("a")
    assert [i.key for i in store.list_objects("")] == ["ab/x"]  # "ab" is not below "a"
    assert store.get_or_none("a/b/1.json") is None


def test_root_exists_is_false_until_something_is_there(store):
    assert not store.root_exists()
    assert store.create("k", b"v")
    assert store.root_exists()


@pytest.mark.parametrize(
    "url",
    ["file:///tmp/a/b", "file:///tmp/a/b/", "file://rel/x", "file://./rel", "local:///tmp/c",
     "file:~/x", "file:///"],
)  # fmt: skip
def test_local_root_names_the_folder_fsspec_names(url):
    from fsspec.core import url_to_fs

    _, expected = url_to_fs(url)
    assert local_root(url) == expected.rstrip("/")


def test_catalog_on_a_local_root_loads_no_arrow_numpy_or_fsspec(tmp_path):
    """The metadata path (open, create, list, describe, alter, delete) in a fresh process."""
    code = f"""
import json, sys
from sparklog.storage import open_root
root = open_root({str(tmp_path / "root")!r}, create=True)
root.create_topic("t", partitions=2, config={{"retention.ms": 1000}})
root.create_topic("gone")
root.add_partitions("t", 3)
root.alter_topic_config("t", {{"cleanup.policy": "compact"}})
root.delete_topic("gone")
reader = open_root({str(tmp_path / "root")!r}, create=False)
info = reader.describe_topic("t")
before = sorted(m for m in ("pyarrow", "numpy", "fsspec") if m in sys.modules)
reader.topic("t")  # the data handle: this is what loads the logs
after = sorted(m for m in ("pyarrow", "numpy") if m in sys.modules)
print(json.dumps([reader.list_topics(), info.partitions, info.config, before, after]))
"""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    names, partitions, config, before, after = json.loads(proc.stdout)
    assert names == ["t"] and partitions == 3
    assert config == {"retention.ms": 1000, "cleanup.policy": "compact"}
    assert before == []
    assert after == ["numpy", "pyarrow"]
