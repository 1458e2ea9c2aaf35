"""Object store access over any fsspec URL, with atomic create-only writes.

The log's correctness rests on one primitive: *create this key only if it does
not exist*, atomically, so that of several racing writers exactly one wins and
no reader ever sees a partial object.  fsspec's generic ``mode="create"`` is
not atomic on local files, so each backend gets the mechanism that is:
``os.link`` of a fully written temp file locally, ``If-None-Match: *`` on S3
(s3fs), a process-wide lock for ``memory://``.

Every call to a remote store has an overall deadline (storage option
``request_timeout_ms``, default 30 s; connect and read timeouts below it), so a
connection that died silently fails the call instead of hanging its thread: a
timed-out create is :class:`CommitStateUnknownError` (it may have been applied),
any other timed-out call :class:`StoreUnavailableError`.
"""

from __future__ import annotations

import contextlib
import os
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import fsspec
import pyarrow as pa
from fsspec.asyn import AsyncFileSystem
from fsspec.core import url_to_fs

from sparklog.errors import CommitStateUnknownError
from sparklog.storage.errors import InvalidConfigError, StorageError, StoreUnavailableError

_MEMORY_CREATE_LOCK = threading.Lock()

#: overall deadline of one call to a remote store (storage option ``request_timeout_ms``)
REQUEST_TIMEOUT_MS = 30_000
#: the longest a remote store may take to accept a connection
CONNECT_TIMEOUT_MS = 5_000
#: storage options that are sparklog's own (not passed to fsspec)
OWN_OPTIONS = ("request_timeout_ms",)


def _transport_errors() -> tuple[tuple[type[BaseException], ...], tuple[type[BaseException], ...]]:
    """(errors raised before a request left: it was not applied, errors after it may have left)."""
    unsent: list[type[BaseException]] = [ConnectionRefusedError]
    open_: list[type[BaseException]] = [TimeoutError, ConnectionError]
    try:
        from botocore import exceptions as boto

        unsent += [boto.ConnectTimeoutError, boto.EndpointConnectionError]
        open_ += [boto.ReadTimeoutError, boto.ConnectionClosedError, boto.HTTPClientError]
    except ImportError:  # no S3 support installed
        pass
    try:
        import aiohttp

        unsent.append(aiohttp.ClientConnectorError)
        open_ += [aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError]
    except ImportError:
        pass
    return tuple(unsent), tuple(open_)


_UNSENT, _OUTCOME_OPEN = _transport_errors()


def _outcome_open(exc: BaseException) -> bool:
    """True if ``exc`` (or what caused it) means the request may have been applied.

    A deadline or a connection lost after the request left leaves a create's
    outcome open; a refused or timed-out *connect* means nothing was sent.
    """
    seen: BaseException | None = exc
    for _ in range(8):
        if seen is None:
            return False
        if isinstance(seen, _UNSENT):
            return False
        if isinstance(seen, _OUTCOME_OPEN):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


@dataclass(frozen=True)
class ObjectInfo:
    """Size and modification time of one stored object."""

    key: str
    size_bytes: int
    modified_ms: int


def normalize_url(url: str) -> str:
    """Turn a plain path into a ``file://`` URL; leave other URLs alone."""
    if "://" not in url:
        return "file://" + os.path.abspath(os.path.expanduser(url))
    return url


class ObjectStore:
    """A key/value view of one root URL: keys are '/'-separated relative paths.

    Instances pickle as (url, storage options) and rebuild their filesystem on
    first use, so Spark can ship them to executors.
    """

    def __init__(
        self,
        url: str,
        storage_options: Mapping[str, Any] | None = None,
        fsync: bool = False,
    ) -> None:
        self.url = normalize_url(url).rstrip("/")
        self.storage_options: dict[str, Any] = dict(storage_options or {})
        self.fsync = fsync
        try:
            self.request_timeout_ms = int(
                self.storage_options.get("request_timeout_ms", REQUEST_TIMEOUT_MS)
            )
        except (TypeError, ValueError):
            self.request_timeout_ms = -1
        if self.request_timeout_ms < 1:
            raise InvalidConfigError(
                f"storage option 'request_timeout_ms' = "
                f"{self.storage_options.get('request_timeout_ms')!r} is not accepted; "
                "accepted: an integer >= 1 (milliseconds)"
            )
        self._fs: fsspec.AbstractFileSystem | None = None
        self._root = ""
        self.protocol = self.url.split("://", 1)[0]

    # -- pickling ----------------------------------------------------------
    def __getstate__(self) -> dict[str, Any]:
        return {"url": self.url, "storage_options": self.storage_options, "fsync": self.fsync}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["url"], state["storage_options"], state["fsync"])  # type: ignore[misc]

    def __repr__(self) -> str:
        return f"ObjectStore({self.url!r})"

    # -- plumbing ----------------------------------------------------------
    @property
    def fs(self) -> fsspec.AbstractFileSystem:
        if self._fs is None:
            try:
                options = {k: v for k, v in self.storage_options.items() if k not in OWN_OPTIONS}
                if self.protocol not in ("file", "local", "memory"):
                    # A cached listing would hide commits other writers made since.
                    options.setdefault("use_listings_cache", False)
                if self.protocol in ("s3", "s3a"):
                    options["config_kwargs"] = self._timeouts(options.get("config_kwargs"))
                fs, root = url_to_fs(self.url, **options)
            except (ValueError, TypeError, ImportError) as exc:
                raise StoreUnavailableError(
                    f"cannot open storage root {self.url!r}: {exc}; accepted: a local path, "
                    "file://, memory:// or s3://bucket/prefix URL with valid storage options"
                ) from exc
            self._fs, self._root = fs, root.rstrip("/")
        return self._fs

    def _timeouts(self, given: Any) -> dict[str, Any]:
        """botocore's connect/read timeouts, inside the overall deadline (unless given)."""
        config = dict(given or {})
        deadline_s = self.request_timeout_ms / 1000
        config.setdefault("connect_timeout", min(CONNECT_TIMEOUT_MS / 1000, deadline_s))
        config.setdefault("read_timeout", deadline_s)
        return config

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """Call the filesystem's ``method`` under the store's overall deadline.

        fsspec's async filesystems (s3fs) run every call on their event loop; the
        ``timeout`` cancels the call there when the deadline passes, so no thread
        waits forever on a connection that died silently.
        """
        fs = self.fs
        if isinstance(fs, AsyncFileSystem):
            kwargs["timeout"] = self.request_timeout_ms / 1000
        return getattr(fs, method)(*args, **kwargs)

    def with_request_timeout(self, request_timeout_ms: int) -> ObjectStore:
        """The same root with a shorter deadline per call (e.g. for lease renewal)."""
        options = {**self.storage_options, "request_timeout_ms": request_timeout_ms}
        return ObjectStore(self.url, options, self.fsync)

    @property
    def is_local(self) -> bool:
        return self.protocol in ("file", "local")

    def _path(self, key: str) -> str:
        _ = self.fs
        return f"{self._root}/{key}" if key else self._root

    def child(self, prefix: str) -> ObjectStore:
        """A store rooted at ``prefix`` below this one."""
        return ObjectStore(f"{self.url}/{prefix}", self.storage_options, self.fsync)

    def _unavailable(self, op: str, key: str, exc: BaseException) -> StorageError:
        """The error a failed store call becomes: bad options, or an unreachable store."""
        if isinstance(exc, StorageError):
            return exc
        if op == "create" and _outcome_open(exc):
            return CommitStateUnknownError(
                f"storage root {self.url!r}: creating {key!r} failed after the request was "
                f"sent ({type(exc).__name__}: {exc}; deadline {self.request_timeout_ms} ms); "
                "it may or may not exist now (re-read to learn)"
            )
        if isinstance(exc, TypeError):
            return InvalidConfigError(
                f"storage options {sorted(self.storage_options)} are not accepted for "
                f"{self.url!r}: {exc}"
            )
        return StoreUnavailableError(
            f"storage root {self.url!r} failed to {op} {key!r}: {type(exc).__name__}: {exc}"
        )

    # -- writes ------------------------------------------------------------
    def create(self, key: str, data: bytes | memoryview | pa.Buffer) -> bool:
        """Write ``key`` only if absent, atomically.  False if it existed."""
        try:
            if self.is_local:
                return self._create_local(self._path(key), data)
            if self.protocol == "memory":
                with _MEMORY_CREATE_LOCK:
                    path = self._path(key)
                    if self.fs.exists(path):
                        return False
                    self.fs.pipe_file(path, bytes(data))
                    return True
            self._call("pipe_file", self._path(key), bytes(data), mode="create")
            return True
        except FileExistsError:
            return False
        except Exception as exc:
            if "pre-condition" in str(exc) or "PreconditionFailed" in str(exc):
                return False
            raise self._unavailable("create", key, exc) from exc

    def create_streamed(self, key: str, produce: Callable[[pa.NativeFile], None]) -> pa.Buffer:
        """Create a new object (``key`` must be fresh, e.g. a UUID) by streaming into it.

        Locally the bytes go straight into a temp file that is linked into place
        (no in-memory copy); elsewhere they are buffered and uploaded create-only.
        Returns the object's bytes (memory-mapped locally) for checksumming.
        """
        if not self.is_local:
            sink = pa.BufferOutputStream()
            produce(sink)
            data = sink.getvalue()
            try:
                created = self.create(key, data)
            except CommitStateUnknownError as exc:
                # A fresh key nothing refers to yet: writing another one is safe.
                raise StoreUnavailableError(str(exc)) from exc
            if not created:
                raise StoreUnavailableError(f"object {self.url}/{key} exists already")
            return data
        path = self._path(key)
        tmp = f"{path}.tmp-{uuid.uuid4().hex}"
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with pa.OSFile(tmp, "wb") as f:
                produce(f)
            if self.fsync:
                fd = os.open(tmp, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            with pa.memory_map(tmp, "r") as mm:
                data = mm.read_buffer()
            os.link(tmp, path)
        except FileExistsError as exc:
            raise StoreUnavailableError(f"object {self.url}/{key} exists already") from exc
        except Exception as exc:
            raise self._unavailable("create", key, exc) from exc
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        return data

    def _create_local(self, path: str, data: bytes | memoryview | pa.Buffer) -> bool:
        directory = os.path.dirname(path)
        os.makedirs(directory, exist_ok=True)
        tmp = f"{path}.tmp-{uuid.uuid4().hex}"
        with open(tmp, "wb") as f:
            f.write(data)
            if self.fsync:
                f.flush()
                os.fsync(f.fileno())
        try:
            os.link(tmp, path)
            return True
        except FileExistsError:
            return False
        finally:
            os.unlink(tmp)

    def put(self, key: str, data: bytes) -> None:
        """Write or overwrite ``key`` (for best-effort hints only)."""
        try:
            if self.is_local:
                path = self._path(key)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                tmp = f"{path}.tmp-{uuid.uuid4().hex}"
                with open(tmp, "wb") as f:
                    f.write(data)
                os.replace(tmp, path)
            else:
                self._call("pipe_file", self._path(key), data)
        except Exception as exc:
            raise self._unavailable("write", key, exc) from exc

    def delete(self, key: str) -> None:
        """Remove ``key``; absent keys are fine."""
        try:
            self._call("rm_file", self._path(key))
        except FileNotFoundError:
            pass
        except Exception as exc:
            raise self._unavailable("delete", key, exc) from exc

    def delete_prefix(self, prefix: str) -> None:
        """Remove everything below ``prefix``."""
        path = self._path(prefix)
        try:
            if self._call("exists", path):
                self._call("rm", path, recursive=True)
        except FileNotFoundError:
            pass
        except Exception as exc:
            raise self._unavailable("delete", prefix, exc) from exc

    # -- reads -------------------------------------------------------------
    def get(self, key: str) -> bytes:
        """The whole object; FileNotFoundError if absent."""
        try:
            data = self._call("cat_file", self._path(key))
        except FileNotFoundError:
            raise
        except Exception as exc:
            raise self._unavailable("read", key, exc) from exc
        return bytes(data)

    def get_or_none(self, key: str) -> bytes | None:
        if self._direct_gets:
            return self.get_many([key])[key]
        try:
            return self.get(key)
        except FileNotFoundError:
            return None

    @property
    def _direct_gets(self) -> bool:
        """S3: read keys that may be missing with one GET each (fsspec's cat adds HEAD+LIST)."""
        return self.protocol in ("s3", "s3a") and hasattr(self.fs, "_call_s3")

    def _s3_get_many(self, paths: list[str]) -> list[bytes | BaseException | None]:
        import asyncio

        from fsspec.asyn import sync

        fs: Any = self.fs

        async def one(path: str) -> bytes | None:
            bucket, key, _ = fs.split_path(path)
            try:
                response = await fs._call_s3("get_object", Bucket=bucket, Key=key)
            except FileNotFoundError:
                return None
            async with response["Body"] as body:
                return bytes(await body.read())

        async def every() -> list[bytes | BaseException | None]:
            return await asyncio.gather(*(one(p) for p in paths), return_exceptions=True)

        return list(sync(fs.loop, every, timeout=self.request_timeout_ms / 1000))

    def get_many(self, keys: Iterable[str]) -> dict[str, bytes | None]:
        """Several whole objects at once (concurrently on S3); None where absent."""
        keys = list(keys)
        if not keys:
            return {}
        if self.is_local or self.protocol == "memory":
            return {k: self.get_or_none(k) for k in keys}
        paths = [self._path(k) for k in keys]
        try:
            if self._direct_gets:
                found: Any = dict(zip(paths, self._s3_get_many(paths), strict=True))
            else:
                found = self._call("cat", paths, on_error="return")
        except Exception as exc:
            raise self._unavailable("read", keys[0], exc) from exc
        out: dict[str, bytes | None] = {}
        for key, path in zip(keys, paths, strict=False):
            value = found.get(path) if isinstance(found, dict) else found
            if isinstance(value, FileNotFoundError) or value is None:
                out[key] = None
            elif isinstance(value, BaseException):
                raise self._unavailable("read", key, value)
            else:
                out[key] = bytes(value)
        return out

    def get_buffer(self, key: str) -> pa.Buffer:
        """The whole object as an Arrow buffer: memory-mapped locally (zero-copy)."""
        if not self.is_local:
            return pa.py_buffer(self.get(key))
        try:
            with pa.memory_map(self._path(key), "r") as mm:
                return mm.read_buffer()
        except FileNotFoundError:
            raise
        except Exception as exc:
            raise self._unavailable("read", key, exc) from exc

    def get_range(self, key: str, start: int, end: int) -> pa.Buffer:
        """Bytes ``[start, end)`` of ``key``: memory-mapped locally, a range GET elsewhere."""
        try:
            if self.is_local:
                with pa.memory_map(self._path(key), "r") as mm:
                    mm.seek(start)
                    return mm.read_buffer(end - start)
            return pa.py_buffer(self._call("cat_file", self._path(key), start=start, end=end))
        except FileNotFoundError:
            raise
        except Exception as exc:
            raise self._unavailable("read", key, exc) from exc

    def exists(self, key: str) -> bool:
        try:
            return bool(self._call("exists", self._path(key)))
        except Exception as exc:
            raise self._unavailable("stat", key, exc) from exc

    def list_objects(self, prefix: str) -> list[ObjectInfo]:
        """Every object below ``prefix`` (recursively), keys relative to the root."""
        base = self._path(prefix)
        try:
            found = self._call("find", base, detail=True)
        except FileNotFoundError:
            return []
        except Exception as exc:
            raise self._unavailable("list", prefix, exc) from exc
        cut = len(self._root) + 1 if self._root else 0
        out = []
        for path, info in found.items():
            rel = path[cut:] if path.startswith(self._root) else path
            if ".tmp-" in rel:
                continue
            out.append(ObjectInfo(rel, int(info.get("size") or 0), _mtime_ms(info)))
        return sorted(out, key=lambda i: i.key)

    def list_names(self, prefix: str) -> list[str]:
        """Names of the direct children (files or folders) of ``prefix``."""
        base = self._path(prefix)
        try:
            entries = self._call("ls", base, detail=False)
        except FileNotFoundError:
            return []
        except Exception as exc:
            raise self._unavailable("list", prefix, exc) from exc
        names = {str(e).rstrip("/").rsplit("/", 1)[-1] for e in entries}
        return sorted(n for n in names if n and ".tmp-" not in n)

    def ensure_root(self) -> None:
        """Fail early, with the URL in the message, if the root cannot be reached."""
        try:
            if self.is_local:
                os.makedirs(self._path(""), exist_ok=True)
            else:
                self._call("ls", self._path(""), detail=False)
        except FileNotFoundError:
            with contextlib.suppress(OSError):
                self.fs.mkdirs(self._path(""), exist_ok=True)
        except Exception as exc:
            raise self._unavailable("reach", "", exc) from exc


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
