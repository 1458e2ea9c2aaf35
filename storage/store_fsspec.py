"""Roots served through fsspec: S3 (s3fs) and any other fsspec URL, and ``memory://``.

fsspec is imported when the filesystem is first needed, never with this module's
callers on a local root.  Every call gets the store's overall deadline (s3fs runs
calls on its event loop; ``timeout`` cancels them there), so a connection that
died silently fails the call instead of hanging its thread.  On S3, reads of keys
that may be missing are one GET each through s3fs's ``_call_s3`` (fsspec's ``cat``
adds a HEAD and a LIST), and a folder's listing is one LIST a page through it (s3fs's
``ls`` lists the parent too when the folder is empty); ``tests/storage/test_store_backends.py``
fails if that private name moves.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from sparklog.errors import InvalidConfigurationError
from sparklog.storage.store_backend import OWN_OPTIONS, ObjectInfo, Writable

if TYPE_CHECKING:
    import fsspec
    import pyarrow as pa

#: the longest a remote store may take to accept a connection
CONNECT_TIMEOUT_MS = 5_000
#: s3fs's private coroutine for one raw S3 call (used for single-GET reads)
S3_CALL = "_call_s3"

_MEMORY_CREATE_LOCK = threading.Lock()


class FsspecBackend:
    """Any fsspec filesystem; create-only writes are ``pipe_file(mode="create")``
    (``If-None-Match: *`` on S3)."""

    local = False
    remote = True

    def __init__(
        self,
        url: str,
        protocol: str,
        storage_options: Mapping[str, Any],
        *,
        request_timeout_ms: int,
    ) -> None:
        self.url = url
        self.protocol = protocol
        self.storage_options = dict(storage_options)
        self.request_timeout_ms = request_timeout_ms
        self._fs: fsspec.AbstractFileSystem | None = None
        self._fs_is_async = False
        self.root = ""

    # -- plumbing ----------------------------------------------------------
    @property
    def fs(self) -> fsspec.AbstractFileSystem:
        if self._fs is None:
            from fsspec.asyn import AsyncFileSystem
            from fsspec.core import url_to_fs

            try:
                options = {k: v for k, v in self.storage_options.items() if k not in OWN_OPTIONS}
                if self.protocol not in ("file", "local", "memory"):
                    # A cached listing would hide commits other writers made since.
                    options.setdefault("use_listings_cache", False)
                if self.protocol in ("s3", "s3a"):
                    options["config_kwargs"] = self._timeouts(options.get("config_kwargs"))
                fs, root = url_to_fs(self.url, **options)
                if self.protocol in ("s3", "s3a"):
                    # builds the client (no request): bad client/config kwargs fail here,
                    # named as options, not later as a TypeError inside a read or write
                    fs.connect()
            except (ValueError, TypeError, ImportError) as exc:
                raise InvalidConfigurationError(
                    f"cannot open storage root {self.url!r} with storage options "
                    f"{sorted(self.storage_options)}: {type(exc).__name__}: {exc}; accepted: "
                    "a local path, file://, memory:// or s3://bucket/prefix URL with the "
                    "filesystem's storage options"
                ) from exc
            # set before _fs: a thread that sees _fs set also sees whether it is async
            self._fs_is_async = isinstance(fs, AsyncFileSystem)
            self._fs, self.root = fs, root.rstrip("/")
        return self._fs

    def _timeouts(self, given: Any) -> dict[str, Any]:
        """botocore's connect/read timeouts, inside the overall deadline (unless given)."""
        config = dict(given or {})
        deadline_s = self.request_timeout_ms / 1000
        config.setdefault("connect_timeout", min(CONNECT_TIMEOUT_MS / 1000, deadline_s))
        config.setdefault("read_timeout", deadline_s)
        return config

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """Call the filesystem's ``method`` under the store's overall deadline."""
        fs = self.fs
        if self._fs_is_async:
            kwargs["timeout"] = self.request_timeout_ms / 1000
        return getattr(fs, method)(*args, **kwargs)

    def path(self, key: str) -> str:
        _ = self.fs  # the root path is fsspec's, known once the filesystem is open
        return f"{self.root}/{key}" if key else self.root

    def relative(self, path: str) -> str:
        cut = len(self.root) + 1 if self.root else 0
        return path[cut:] if path.startswith(self.root) else path

    @property
    def direct_gets(self) -> bool:
        """S3: read keys that may be missing with one GET each (fsspec's cat adds HEAD+LIST)
        and list a folder with one LIST a page, through s3fs's ``_call_s3``."""
        return self.protocol in ("s3", "s3a") and hasattr(self.fs, S3_CALL)

    # -- writes ------------------------------------------------------------
    def create(self, path: str, data: bytes | memoryview | pa.Buffer) -> bool:
        self._call("pipe_file", path, bytes(data), mode="create")
        return True

    def create_streamed(self, path: str, produce: Callable[[Writable], None]) -> int:
        raise NotImplementedError("remote objects are buffered and created whole")

    def put(self, path: str, data: bytes) -> None:
        self._call("pipe_file", path, data)

    def copy(self, source_path: str, dest_path: str) -> None:
        self._call("copy", source_path, dest_path)

    def delete(self, path: str) -> None:
        self._call("rm_file", path)

    def delete_prefix(self, path: str) -> None:
        if self._call("exists", path):
            self._call("rm", path, recursive=True)

    # -- reads -------------------------------------------------------------
    def get(self, path: str) -> bytes:
        return bytes(self._call("cat_file", path))

    def get_or_none(self, path: str) -> bytes | None:
        if self.direct_gets:
            (found,) = self._s3_get_many([path])
            if isinstance(found, BaseException):
                raise found
            return found
        try:
            return self.get(path)
        except FileNotFoundError:
            return None

    def get_many(self, paths: list[str]) -> list[bytes | BaseException | None]:
        if self.direct_gets:
            return self._s3_get_many(paths)
        found = self._call("cat", paths, on_error="return")
        out: list[bytes | BaseException | None] = []
        for path in paths:
            value = found.get(path) if isinstance(found, dict) else found
            if isinstance(value, FileNotFoundError) or value is None:
                out.append(None)
            elif isinstance(value, BaseException):
                out.append(value)
            else:
                out.append(bytes(value))
        return out

    def _s3_get_many(self, paths: list[str]) -> list[bytes | BaseException | None]:
        import asyncio

        from fsspec.asyn import sync

        fs: Any = self.fs
        call = getattr(fs, S3_CALL)

        async def one(path: str) -> bytes | None:
            bucket, key, _ = fs.split_path(path)
            try:
                response = await call("get_object", Bucket=bucket, Key=key)
            except FileNotFoundError:
                return None
            async with response["Body"] as body:
                return bytes(await body.read())

        async def every() -> list[bytes | BaseException | None]:
            return await asyncio.gather(*(one(p) for p in paths), return_exceptions=True)

        found = list(sync(fs.loop, every, timeout=self.request_timeout_ms / 1000))
        return [None if isinstance(v, FileNotFoundError) else v for v in found]

    def get_buffer(self, path: str) -> pa.Buffer:
        import pyarrow as pa

        return pa.py_buffer(self.get(path))

    def get_range(self, path: str, start: int, end: int) -> pa.Buffer:
        import pyarrow as pa

        return pa.py_buffer(self._call("cat_file", path, start=start, end=end))

    def get_tail(self, path: str, nbytes: int) -> tuple[bytes, int] | None:
        """One request on S3 (a suffix range GET)."""
        if self.direct_gets:
            return self._s3_get_tail(path, nbytes)
        size = int(self._call("size", path))
        data = self._call("cat_file", path, start=max(size - nbytes, 0))
        return bytes(data), size

    def _s3_get_tail(self, path: str, nbytes: int) -> tuple[bytes, int] | None:
        from fsspec.asyn import sync

        fs: Any = self.fs
        call = getattr(fs, S3_CALL)
        bucket, key, _ = fs.split_path(path)

        async def tail() -> tuple[bytes, int] | None:
            try:
                response = await call(
                    "get_object", Bucket=bucket, Key=key, Range=f"bytes=-{nbytes}"
                )
            except FileNotFoundError:
                return None
            async with response["Body"] as body:
                data = bytes(await body.read())
            content_range = response.get("ContentRange") or ""
            total = content_range.rsplit("/", 1)[-1]
            return data, int(total) if total.isdigit() else len(data)

        result: tuple[bytes, int] | None = sync(
            fs.loop, tail, timeout=self.request_timeout_ms / 1000
        )
        return result

    def etag(self, path: str) -> str | None:
        info = self._call("info", path)
        found = info.get("ETag") or info.get("etag")
        return str(found).strip('"') if found else None

    def exists(self, path: str) -> bool:
        return bool(self._call("exists", path))

    def list_objects(self, path: str) -> list[ObjectInfo]:
        try:
            found = self._call("find", path, detail=True)
        except FileNotFoundError:
            return []
        out = []
        for name, info in found.items():
            rel = self.relative(name)
            if ".tmp-" in rel:
                continue
            out.append(ObjectInfo(rel, int(info.get("size") or 0), _mtime_ms(info)))
        return sorted(out, key=lambda i: i.key)

    def list_names(self, path: str) -> list[str]:
        if self.direct_gets:
            return self._s3_list_names(path)
        return list(self._call("ls", path, detail=False))

    def _s3_list_names(self, path: str) -> list[str]:
        """The direct children of ``path`` on S3: one LIST a page of 1,000.  s3fs's ``ls``
        lists the parent too when a folder is empty or absent, to see whether the path is
        an object: two LISTs for every never-written log a broker opens (issue 37)."""
        from fsspec.asyn import sync

        fs: Any = self.fs
        call = getattr(fs, S3_CALL)
        bucket, key, _ = fs.split_path(path)
        prefix = f"{key.rstrip('/')}/" if key else ""

        async def pages() -> list[str]:
            names: list[str] = []
            asked: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix, "Delimiter": "/"}
            while True:
                page = await call("list_objects_v2", **asked)
                names += [f"{bucket}/{p['Prefix']}" for p in page.get("CommonPrefixes", [])]
                names += [f"{bucket}/{o['Key']}" for o in page.get("Contents", [])]
                names = [n for n in names if n != f"{bucket}/{prefix}"]  # a folder marker
                if not page.get("IsTruncated"):
                    return names
                asked["ContinuationToken"] = page["NextContinuationToken"]

        return list(sync(fs.loop, pages, timeout=self.request_timeout_ms / 1000))

    def remove_stale_temp_files(self, path: str, older_than_ms: int, now_ms: int) -> list[str]:
        return []  # object stores write whole objects: no temp files

    def ensure_root(self) -> None:
        try:
            self._call("ls", self.path(""), detail=False)
        except FileNotFoundError:
            with contextlib.suppress(OSError):
                self.fs.mkdirs(self.path(""), exist_ok=True)


class MemoryBackend(FsspecBackend):
    """``memory://``: fsspec's in-process filesystem; create-only under a process-wide
    lock (its ``mode="create"`` is not atomic); no network, so no lost answers."""

    remote = False

    def create(self, path: str, data: bytes | memoryview | pa.Buffer) -> bool:
        with _MEMORY_CREATE_LOCK:
            if self.fs.exists(path):
                return False
            self.fs.pipe_file(path, bytes(data))
            return True

    def etag(self, path: str) -> str | None:
        return None  # memory keeps no entity tags


def _mtime_ms(info: Mapping[str, Any]) -> int:
    for name in ("mtime", "LastModified", "created", "last_modified"):
        value = info.get(name)
        if value is None:
            continue
        if hasattr(value, "timestamp"):
            return int(value.timestamp() * 1000)
        try:
            return int(float(value) * 1000)
        except (TypeError, ValueError):
            continue
    return 0
