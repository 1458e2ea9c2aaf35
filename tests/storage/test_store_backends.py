"""ObjectStore picks one backend per kind of root when it opens (docs/architecture.md,
"Layers"), and the S3 backend's one private dependency is pinned: single-GET reads go
through s3fs's ``_call_s3``, so a release that moves it fails here instead of quietly
falling back to fsspec's HEAD+GET+LIST per read."""

from __future__ import annotations

import inspect
import subprocess
import sys

from sparklog.storage.objectstore import ObjectStore
from sparklog.storage.store_fsspec import S3_CALL, FsspecBackend, MemoryBackend
from sparklog.storage.store_local import LocalBackend


def test_each_kind_of_root_gets_its_backend(tmp_path, s3_root_spec) -> None:
    url, options = s3_root_spec
    kinds = {
        f"file://{tmp_path}/a": LocalBackend,
        str(tmp_path / "b"): LocalBackend,
        "memory://backend-test": MemoryBackend,
        url: FsspecBackend,
    }
    for root, kind in kinds.items():
        store = ObjectStore(root, options if root == url else None)
        assert type(store._backend) is kind, root
        assert (store.is_local, store.is_remote) == (kind is LocalBackend, kind is FsspecBackend)


def test_a_local_store_loads_no_fsspec() -> None:
    code = (
        "import sys, tempfile\n"
        "from sparklog.storage.objectstore import ObjectStore\n"
        "s = ObjectStore(tempfile.mkdtemp())\n"
        "assert s.create('k', b'v') and s.get('k') == b'v' and s.list_names('') == ['k']\n"
        "assert 'fsspec' not in sys.modules\n"
        "assert 'sparklog.storage.store_fsspec' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_s3fs_still_has_the_private_call_the_s3_backend_uses(s3_root_spec) -> None:
    import s3fs

    assert inspect.iscoroutinefunction(getattr(s3fs.S3FileSystem, S3_CALL, None)), (
        f"s3fs.S3FileSystem.{S3_CALL} moved: store_fsspec.py's single-GET reads need it"
    )
    url, options = s3_root_spec
    store = ObjectStore(url, options)
    backend = store._backend
    assert isinstance(backend, FsspecBackend) and backend.direct_gets
    assert store.create("k", b"v")
    assert store.get_or_none("k") == b"v" and store.get_or_none("absent") is None
    assert store.get_tail("k", 10) == (b"v", 1)


def test_listing_a_folder_on_s3_is_one_list_even_when_it_is_empty(moto_s3) -> None:
    """s3fs's ``ls`` lists the parent folder too when it finds nothing (is the path an
    object?): two LISTs for every never-written shard log a broker opened (issue 37).
    The S3 backend lists once, through the same private call as its single-GET reads,
    and names the folder's files and subfolders as before."""
    from tests.support.counting_s3 import CountingProxy

    proxy = CountingProxy(moto_s3.endpoint_url)
    try:
        store = ObjectStore(moto_s3.fresh_root(), proxy.storage_options())
        store.put("log/00000000000000000000.json", b"{}")
        store.put("log/sub/deeper.json", b"{}")
        store.put("log/_latest.json", b"{}")
        assert proxy.delta(lambda: store.list_names("absent")) == {"LIST": 1}
        assert store.list_names("absent") == []
        assert proxy.delta(lambda: store.list_names("log")) == {"LIST": 1}
        assert store.list_names("log") == ["00000000000000000000.json", "_latest.json", "sub"]
        assert store.list_names("log/sub") == ["deeper.json"]
    finally:
        proxy.close()
