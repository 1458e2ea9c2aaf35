"""Object store access over any fsspec URL, with atomic create-only writes.

The log's correctness rests on one primitive: *create this key only if it does
not exist*, atomically, so that of several racing writers exactly one wins and
no reader ever sees a partial object.  fsspec's generic ``mode="create"`` is
not atomic on local files, so each backend gets the mechanism that is:
``os.link`` of a fully written temp file locally, ``If-None-Match: *`` on S3
(s3fs), a process-wide lock for ``memory://``.

A local root (``file://``, a plain path) is served with os and shutil calls alone:
neither fsspec nor pyarrow is imported to list, read or write it, so a metadata
command on a local root starts in a fraction of the time (fsspec serves
``memory://`` and ``s3://``; pyarrow loads when an Arrow buffer is asked for).

Every call to a remote store has an overall deadline (storage option
``request_timeout_ms``, default 30 s; connect and read timeouts below it), so a
connection that died silently fails the call instead of hanging its thread: a
timed-out create is :class:`CommitStateUnknownError` (it may have been applied),
any other timed-out call :class:`StoreUnavailableError`.
"""

from __future__ import annotations

import contextlib
import functools
import io
import os
import shutil
import sys
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn, Protocol

from sparklog.errors import (
    CommitStateUnknownError,
    InvalidConfigurationError,
    SparklogError,
    StoreAccessError,
    StoreUnavailableError,
)
from sparklog.storage.spare_files import SPARE_FILES, open_new_file

if TYPE_CHECKING:
    # fsspec is imported when a remote or memory store first opens its filesystem, pyarrow
    # when a buffer is read: never with this module. Spark starts a fresh Python process per
    # streaming query, and every CLI command is one; each pays every import.
    import fsspec
    import pyarrow as pa

_MEMORY_CREATE_LOCK = threading.Lock()


class Writable(Protocol):
    """Where :meth:`ObjectStore.create_streamed` streams an object's bytes."""

    def write(self, data: Any, /) -> int | None: ...


#: overall deadline of one call to a remote store (storage option ``request_timeout_ms``)
REQUEST_TIMEOUT_MS = 30_000
#: the longest a remote store may take to accept a connection
CONNECT_TIMEOUT_MS = 5_000
#: storage options that are sparklog's own (not passed to fsspec)
OWN_OPTIONS = ("request_timeout_ms",)


def _transports_loaded() -> tuple[bool, bool]:
    """Whether botocore's and aiohttp's exceptions are imported (by s3fs, when S3 is used).

    An exception of theirs can only exist once its module is loaded, so the error
    classes below are built from loaded modules only: importing botocore and aiohttp
    here would cost every process (e.g. each streaming query's Python runner) ~0.5 s,
    even one on a local root that never touches S3.
    """
    return "botocore.exceptions" in sys.modules, "aiohttp" in sys.modules


@functools.cache
def _transport_errors(
    with_botocore: bool, with_aiohttp: bool
) -> tuple[tuple[type[BaseException], ...], tuple[type[BaseException], ...]]:
    """(errors raised before a request left: it was not applied, errors after it may have left)."""
    unsent: list[type[BaseException]] = [ConnectionRefusedError]
    open_: list[type[BaseException]] = [TimeoutError, ConnectionError]
    if with_botocore:
        from botocore import exceptions as boto

        unsent += [boto.ConnectTimeoutError, boto.EndpointConnectionError]
        open_ += [boto.ReadTimeoutError, boto.ConnectionClosedError, boto.HTTPClientError]
    if with_aiohttp:
        import aiohttp

        unsent.append(aiohttp.ClientConnectorError)
        open_ += [aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError]
    return tuple(unsent), tuple(open_)


def _outcome_open(exc: BaseException) -> bool:
    """True if ``exc`` (or what caused it) means the request may have been applied.

    A deadline or a connection lost after the request left leaves a create's
    outcome open; a refused or timed-out *connect* means nothing was sent.
    """
    unsent, outcome_open = _transport_errors(*_transports_loaded())
    seen: BaseException | None = exc
    for _ in range(8):
        if seen is None:
            return False
        if isinstance(seen, unsent):
            return False
        if isinstance(seen, outcome_open):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


@functools.cache
def _io_failure_classes(with_botocore: bool, with_aiohttp: bool) -> tuple[type[BaseException], ...]:
    """The exceptions that are I/O, network or service failures (outages).

    Only these become :class:`StoreUnavailableError` (or, for a create whose
    request went out, :class:`CommitStateUnknownError`); anything else (a
    ``TypeError``, ``AttributeError``, ``KeyError``: a bug) propagates as itself.
    botocore and aiohttp are s3fs's transport; they are absent when s3fs is (and
    not imported until s3fs is used: see :func:`_transports_loaded`).
    """
    io: list[type[BaseException]] = [OSError]
    if with_botocore:
        import botocore.exceptions as boto

        io += [boto.BotoCoreError, boto.ClientError]
    if with_aiohttp:
        import aiohttp

        io.append(aiohttp.ClientError)
    return tuple(io)


#: botocore errors that are our own mistakes (a bad parameter), not outages
_PROGRAMMING_ERROR_NAMES = frozenset({"ParamValidationError", "UnknownParameterError"})


def is_io_failure(exc: BaseException) -> bool:
    """True when ``exc`` is an I/O, network or service failure (an outage), not a bug."""
    if type(exc).__name__ in _PROGRAMMING_ERROR_NAMES:
        return False
    return isinstance(exc, _io_failure_classes(*_transports_loaded()))


#: storage options that carry credentials (named in errors, never shown)
_CREDENTIAL_OPTIONS = frozenset(
    {"key", "secret", "token", "anon", "profile", "username", "password", "account_key"}
)


def _missing_bucket(exc: BaseException) -> bool:
    """True when a remote store says the root's bucket does not exist (S3's NoSuchBucket)."""
    return isinstance(exc, FileNotFoundError) and "bucket does not exist" in str(exc).lower()


def _precondition_failed(exc: BaseException) -> bool:
    """True when the store refused a create-only write because the key exists (HTTP 412)."""
    for err in (exc, exc.__cause__):
        response = getattr(err, "response", None)
        if isinstance(response, Mapping):
            error = response.get("Error") or {}
            status = (response.get("ResponseMetadata") or {}).get("HTTPStatusCode")
            if error.get("Code") == "PreconditionFailed" or status == 412:
                return True
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


#: URL prefixes of fsspec's local filesystem, stripped to get the folder
_LOCAL_PREFIXES = ("file://", "file:", "local://", "local:")


def local_root(url: str) -> str:
    """The folder of a local root URL, as fsspec's local filesystem names it.

    Its rules, without importing it: the protocol prefix removed, a ``~`` expanded,
    a relative path made absolute against the working folder, no trailing slash.
    """
    path = url
    for prefix in _LOCAL_PREFIXES:
        if path.startswith(prefix):
            path = path[len(prefix) :]
            break
    if path.startswith("~"):
        path = os.path.expanduser(path)
    elif not path.startswith("/"):
        if path.startswith("./"):
            path = path[2:]
        elif path == ".":
            path = ""
        path = f"{os.getcwd()}/{path}"
    return path.rstrip("/")


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
            raise InvalidConfigurationError(
                f"storage option 'request_timeout_ms' = "
                f"{self.storage_options.get('request_timeout_ms')!r} is not accepted; "
                "accepted: an integer >= 1 (milliseconds)"
            )
        self._fs: fsspec.AbstractFileSystem | None = None
        self._fs_is_async = False
        self.protocol = self.url.split("://", 1)[0]
        # a local root's folder is known without a filesystem; others' once fs is opened
        self._root = local_root(self.url) if self.is_local else ""

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
        if self._fs_is_async:
            kwargs["timeout"] = self.request_timeout_ms / 1000
        return getattr(fs, method)(*args, **kwargs)

    def with_request_timeout(self, request_timeout_ms: int) -> ObjectStore:
        """The same root with a shorter deadline per call (e.g. for lease renewal)."""
        options = {**self.storage_options, "request_timeout_ms": request_timeout_ms}
        return ObjectStore(self.url, options, self.fsync)

    @property
    def is_local(self) -> bool:
        return self.protocol in ("file", "local")

    @property
    def is_remote(self) -> bool:
        """A request is a network round trip (not a local file or ``memory://``)."""
        return not self.is_local and self.protocol != "memory"

    def _path(self, key: str) -> str:
        """The filesystem path of ``key`` ('' = the root itself); local paths need no fsspec."""
        if not self.is_local:
            _ = self.fs
        return f"{self._root}/{key}" if key else self._root

    def child(self, prefix: str) -> ObjectStore:
        """A store rooted at ``prefix`` below this one."""
        return ObjectStore(f"{self.url}/{prefix}", self.storage_options, self.fsync)

    def _raise_failure(
        self, op: str, key: str, exc: BaseException, outcome_unknown: bool = False
    ) -> NoReturn:
        """Raise what a failed store call becomes.

        sparklog errors and programming errors propagate as themselves (a bug is
        not an outage and must never be retried); I/O, network and service
        failures become the retriable :class:`StoreUnavailableError`, except a
        create-only write that failed after its request went out
        (``outcome_unknown``: a read timeout, a dropped connection), which may
        have been applied: :class:`CommitStateUnknownError`, resolved by re-reading.
        """
        if isinstance(exc, SparklogError) or not is_io_failure(exc):
            raise exc
        where = f"storage root {self.url!r} failed to {op} {key!r}: {type(exc).__name__}: {exc}"
        if isinstance(exc, PermissionError) or _missing_bucket(exc):
            raise StoreAccessError(
                f"{where}; check the root's bucket and credentials ({self._credential_source()})",
                url=self.url,
                key=key,
            ) from exc
        if outcome_unknown and _outcome_open(exc):
            raise CommitStateUnknownError(
                f"{where}; the request was sent (deadline {self.request_timeout_ms} ms), so "
                f"{key!r} may or may not have been created: re-read it to learn the outcome",
                url=self.url,
                key=key,
            ) from exc
        raise StoreUnavailableError(where) from exc

    def _credential_source(self) -> str:
        """Where this store's credentials come from, by option name (never a value)."""
        if self.is_local:
            return "local files: the process's user and the folder's permissions"
        given = sorted(k for k in self.storage_options if k in _CREDENTIAL_OPTIONS)
        if given:
            return f"storage options {', '.join(given)}"
        return "no credential in the storage options: the environment's (AWS_* variables, profile)"

    def _created_by_this_call(self, key: str, data: bytes | memoryview | pa.Buffer) -> bool:
        """After a create-only write found ``key`` present: is it our own bytes?

        s3fs and botocore repeat a request whose answer was lost; when the first
        attempt was applied, the repeat finds the key taken. The object holding
        exactly our bytes means this call created it (or an identical write did:
        the same outcome), so the caller must not believe it lost a race.
        """
        try:
            existing = self.fs.cat_file(self._path(key))
        except FileNotFoundError:
            return False  # taken, then removed again (a cleaner): not ours
        except Exception as exc:
            self._raise_failure("read back", key, exc, outcome_unknown=True)
        return bytes(existing) == bytes(data)

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
        except Exception as exc:
            remote = not self.is_local and self.protocol != "memory"
            if not isinstance(exc, FileExistsError) and not _precondition_failed(exc):
                self._raise_failure("create", key, exc, outcome_unknown=remote)
            if not remote:
                return False
        # the key exists: another writer won, or a repeat of our own lost-answer request
        return self._created_by_this_call(key, data)

    def create_streamed(self, key: str, produce: Callable[[Writable], None]) -> int:
        """Create a new object (``key`` must be fresh, e.g. a UUID) by streaming into it.

        ``produce`` writes the bytes into the writer it is given; returns the
        object's size.  Locally the bytes go straight into the object's final
        path, opened create-exclusive (no temp file, no link, no read-back):
        nothing refers to a fresh key until a commit names it, and commits are
        created only after this returns, so no reader can meet a partial object
        (a writer that dies midway leaves an unreferenced one that GC removes).
        Elsewhere they are buffered and uploaded create-only.
        """
        if not self.is_local:
            sink = io.BytesIO()
            produce(sink)
            try:
                created = self.create(key, sink.getbuffer())
            except CommitStateUnknownError as exc:
                # A fresh key nothing refers to yet: writing another one is safe.
                raise StoreUnavailableError(str(exc)) from exc
            if not created:
                raise StoreUnavailableError(f"object {self.url}/{key} exists already")
            return sink.tell()
        path = self._path(key)
        opened = False
        try:
            try:
                f = open(path, "xb", buffering=0)  # noqa: SIM115 (closed below)
            except FileNotFoundError:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                f = open(path, "xb", buffering=0)  # noqa: SIM115
            opened = True
            with f:
                produce(f)
                if self.fsync:
                    os.fsync(f.fileno())
                return f.tell()
        except FileExistsError as exc:
            opened = False  # not ours: never remove it
            raise StoreUnavailableError(f"object {self.url}/{key} exists already") from exc
        except BaseException as exc:
            if opened:
                with contextlib.suppress(OSError):
                    os.unlink(path)
            if isinstance(exc, Exception):
                self._raise_failure("create", key, exc)
            raise

    @contextlib.contextmanager
    def preparing_create(self, key: str) -> Iterator[None]:
        """A block in which a :meth:`create` in ``key``'s folder finds its temp file made.

        Locally, the temp file of a create-only write is made on the background
        pool while the block does other work (see :mod:`sparklog.storage.spare_files`);
        elsewhere this does nothing.
        """
        if not self.is_local:
            yield
            return
        spare = SPARE_FILES.prepare(os.path.dirname(self._path(key)))
        try:
            yield
        finally:
            SPARE_FILES.discard(spare)

    def _create_local(self, path: str, data: bytes | memoryview | pa.Buffer) -> bool:
        """Create-only, atomically: a complete, fsynced temp file hard-linked into place.

        The temp file is fsynced whatever the ``fsync`` setting (about 0.4 ms on
        this project's SSD): these are commits and documents, and a commit torn by
        a machine crash would make its whole shard unreadable, where one that is
        missing only loses the newest commit.  With ``fsync`` the folder is
        fsynced too, so the new name survives a crash as well.
        """
        tmp, fd = _open_temp(path)
        try:
            try:
                view = memoryview(data).cast("B")
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            finally:
                os.close(fd)
            os.link(tmp, path)
            if self.fsync:
                _fsync_folder(os.path.dirname(path))
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
                try:
                    with open(tmp, "wb") as f:
                        f.write(data)
                    os.replace(tmp, path)
                except BaseException:
                    with contextlib.suppress(OSError):
                        os.unlink(tmp)  # a full disk must not leave litter behind
                    raise
            else:
                self._call("pipe_file", self._path(key), data)
        except Exception as exc:
            self._raise_failure("write", key, exc)

    def same_endpoint(self, other: ObjectStore) -> bool:
        """Both stores are S3 buckets reached through one endpoint with the same options:
        an object can be copied between them server-side (no bytes through this process)."""
        return (
            self.protocol in ("s3", "s3a")
            and other.protocol == self.protocol
            and self.storage_options == other.storage_options
        )

    def etag(self, key: str) -> str | None:
        """The object's entity tag (S3: the MD5 of a single-part object's bytes), None where
        the store has none (local folders, memory); FileNotFoundError if absent."""
        if not self.is_remote:
            return None
        try:
            info = self._call("info", self._path(key))
        except FileNotFoundError:
            raise
        except Exception as exc:
            self._raise_failure("read", key, exc)
        found = info.get("ETag") or info.get("etag")
        return str(found).strip('"') if found else None

    def copy_from(self, source: ObjectStore, key: str, dest_key: str) -> str:
        """Copy ``source``'s object ``key`` here as ``dest_key`` (overwriting: callers copy
        to keys only they write, with the same bytes each time).

        Server-side (S3 CopyObject, no bytes through this process) where
        :meth:`same_endpoint` allows, else a read and a write.  Returns how:
        ``"server"`` or ``"bytes"``.  FileNotFoundError if the source is gone.
        """
        if self.same_endpoint(source):
            try:
                self._call("copy", source._path(key), self._path(dest_key))
            except FileNotFoundError:
                raise
            except Exception as exc:
                self._raise_failure("copy", dest_key, exc)
            return "server"
        self.put(dest_key, source.get(key))
        return "bytes"

    def delete(self, key: str) -> None:
        """Remove ``key``; absent keys are fine."""
        try:
            if self.is_local:
                os.remove(self._path(key))
            else:
                self._call("rm_file", self._path(key))
        except FileNotFoundError:
            pass
        except Exception as exc:
            self._raise_failure("delete", key, exc)

    def delete_prefix(self, prefix: str) -> None:
        """Remove everything below ``prefix`` (or the one object ``prefix`` names)."""
        path = self._path(prefix)
        try:
            if self.is_local:
                if os.path.isdir(path) and not os.path.islink(path):
                    shutil.rmtree(path)
                else:
                    os.remove(path)
            elif self._call("exists", path):
                self._call("rm", path, recursive=True)
        except FileNotFoundError:
            pass
        except Exception as exc:
            self._raise_failure("delete", prefix, exc)

    # -- reads -------------------------------------------------------------
    def get(self, key: str) -> bytes:
        """The whole object; FileNotFoundError if absent."""
        try:
            if self.is_local:  # plain reads: fsspec's open costs more than a small read
                with open(self._path(key), "rb", buffering=0) as f:
                    return f.readall()
            data = self._call("cat_file", self._path(key))
        except FileNotFoundError:
            raise
        except Exception as exc:
            self._raise_failure("read", key, exc)
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
            self._raise_failure("read", keys[0], exc)
        out: dict[str, bytes | None] = {}
        for key, path in zip(keys, paths, strict=False):
            value = found.get(path) if isinstance(found, dict) else found
            if isinstance(value, FileNotFoundError) or value is None:
                out[key] = None
            elif isinstance(value, BaseException):
                self._raise_failure("read", key, value)
            else:
                out[key] = bytes(value)
        return out

    def get_buffer(self, key: str) -> pa.Buffer:
        """The whole object as an Arrow buffer: memory-mapped locally (zero-copy)."""
        import pyarrow as pa

        if not self.is_local:
            return pa.py_buffer(self.get(key))
        try:
            with pa.memory_map(self._path(key), "r") as mm:
                return mm.read_buffer()
        except FileNotFoundError:
            raise
        except Exception as exc:
            self._raise_failure("read", key, exc)

    def get_range(self, key: str, start: int, end: int) -> pa.Buffer:
        """Bytes ``[start, end)`` of ``key``: memory-mapped locally, a range GET elsewhere."""
        import pyarrow as pa

        try:
            if self.is_local:
                with pa.memory_map(self._path(key), "r") as mm:
                    mm.seek(start)
                    return mm.read_buffer(end - start)
            return pa.py_buffer(self._call("cat_file", self._path(key), start=start, end=end))
        except FileNotFoundError:
            raise
        except Exception as exc:
            self._raise_failure("read", key, exc)

    def get_tail(self, key: str, nbytes: int) -> tuple[bytes, int] | None:
        """The last ``nbytes`` of ``key`` (all of it if smaller) and its size; None if absent.

        One request on S3 (a suffix range GET), like :meth:`get_or_none`.
        """
        try:
            if self.is_local:
                with open(self._path(key), "rb", buffering=0) as f:
                    size = os.fstat(f.fileno()).st_size
                    f.seek(max(size - nbytes, 0))
                    return f.readall(), size
            if self._direct_gets:
                return self._s3_get_tail(key, nbytes)
            size = int(self._call("size", self._path(key)))
            data = self._call("cat_file", self._path(key), start=max(size - nbytes, 0))
            return bytes(data), size
        except FileNotFoundError:
            return None
        except Exception as exc:
            self._raise_failure("read", key, exc)

    def _s3_get_tail(self, key: str, nbytes: int) -> tuple[bytes, int] | None:
        from fsspec.asyn import sync

        fs: Any = self.fs
        bucket, path, _ = fs.split_path(self._path(key))

        async def tail() -> tuple[bytes, int] | None:
            try:
                response = await fs._call_s3(
                    "get_object", Bucket=bucket, Key=path, Range=f"bytes=-{nbytes}"
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

    def exists(self, key: str) -> bool:
        try:
            if self.is_local:
                return os.path.exists(self._path(key))
            return bool(self._call("exists", self._path(key)))
        except Exception as exc:
            self._raise_failure("stat", key, exc)

    def root_exists(self) -> bool:
        """Whether the root itself (folder, bucket or prefix) exists; never creates it.

        A store that cannot be reached raises (StoreUnavailableError), so "missing"
        is never confused with "down".
        """
        try:
            if self.is_local:
                return os.path.exists(self._path(""))
            return bool(self._call("exists", self._path("")))
        except Exception as exc:
            self._raise_failure("reach", "", exc)

    def list_objects(self, prefix: str) -> list[ObjectInfo]:
        """Every object below ``prefix`` (recursively), keys relative to the root."""
        base = self._path(prefix)
        if self.is_local:
            try:
                return self._list_local_objects(base.rstrip("/"))
            except Exception as exc:
                self._raise_failure("list", prefix, exc)
        try:
            found = self._call("find", base, detail=True)
        except FileNotFoundError:
            return []
        except Exception as exc:
            self._raise_failure("list", prefix, exc)
        cut = len(self._root) + 1 if self._root else 0
        out = []
        for path, info in found.items():
            rel = path[cut:] if path.startswith(self._root) else path
            if ".tmp-" in rel:
                continue
            out.append(ObjectInfo(rel, int(info.get("size") or 0), _mtime_ms(info)))
        return sorted(out, key=lambda i: i.key)

    def _list_local_objects(self, base: str) -> list[ObjectInfo]:
        """:meth:`list_objects` of a local folder: a walk, one stat per file.

        A file removed between the walk and its stat (a cleaner, a compaction) is
        skipped, as fsspec's listing skipped it; a missing folder lists nothing.
        """
        cut = len(self._root) + 1 if self._root else 0
        if os.path.isfile(base):
            paths = [base]
        else:
            paths = [
                f"{folder}/{name}"
                for folder, _, files in os.walk(base, followlinks=True)
                for name in files
            ]
        out = []
        for path in paths:
            rel = path[cut:] if path.startswith(self._root) else path
            if ".tmp-" in rel:
                continue
            try:
                stat = os.stat(path)
            except FileNotFoundError:
                continue
            out.append(ObjectInfo(rel, stat.st_size, int(stat.st_mtime * 1000)))
        return sorted(out, key=lambda i: i.key)

    def remove_stale_temp_files(self, prefix: str, older_than_ms: int, now_ms: int) -> list[str]:
        """Remove the temp files below ``prefix`` older than ``older_than_ms``; their keys.

        Writes remove their own temp file when they fail; a process killed
        mid-write cannot, so the cleaner calls this. Only local roots have temp
        files (object stores write whole objects).
        """
        if not self.is_local:
            return []
        cut = len(self._root) + 1 if self._root else 0
        removed = []
        for folder, _, files in os.walk(self._path(prefix)):
            for name in files:
                if ".tmp-" not in name:
                    continue
                path = f"{folder}/{name}"
                with contextlib.suppress(FileNotFoundError):
                    if now_ms - os.stat(path).st_mtime * 1000 >= older_than_ms:
                        os.unlink(path)
                        removed.append(path[cut:] if path.startswith(self._root) else path)
        return sorted(removed)

    def list_names(self, prefix: str) -> list[str]:
        """Names of the direct children (files or folders) of ``prefix``."""
        base = self._path(prefix)
        try:
            if self.is_local:
                entries = self._list_local_names(base)
            else:
                entries = self._call("ls", base, detail=False)
        except FileNotFoundError:
            return []
        except Exception as exc:
            self._raise_failure("list", prefix, exc)
        names = {str(e).rstrip("/").rsplit("/", 1)[-1] for e in entries}
        return sorted(n for n in names if n and ".tmp-" not in n)

    @staticmethod
    def _list_local_names(path: str) -> list[str]:
        """A local folder's entries; a file lists itself (as fsspec's ``ls`` does)."""
        try:
            with os.scandir(path) as entries:
                return [entry.name for entry in entries]
        except NotADirectoryError:
            if os.path.lexists(path):
                return [path]
            raise

    def ensure_root(self) -> None:
        """Fail early, with the URL in the message, if the root cannot be reached."""
        if self.is_local:
            try:
                os.makedirs(self._path(""), exist_ok=True)
            except Exception as exc:
                self._raise_failure("reach", "", exc)
            return
        try:
            self._call("ls", self._path(""), detail=False)
        except FileNotFoundError:
            with contextlib.suppress(OSError):
                self.fs.mkdirs(self._path(""), exist_ok=True)
        except Exception as exc:
            self._raise_failure("reach", "", exc)


def _fsync_folder(folder: str) -> None:
    """Make a new name in ``folder`` durable (a link or rename is a change of the folder)."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _open_temp(path: str) -> tuple[str, int]:
    """A new temp file in ``path``'s folder, open for writing: a spare made ahead if any."""
    spare = SPARE_FILES.take(os.path.dirname(path))
    if spare is not None:
        with contextlib.suppress(FileNotFoundError):  # removed meanwhile: make one
            return spare, os.open(spare, os.O_WRONLY)
    tmp = f"{path}.tmp-{uuid.uuid4().hex}"
    return tmp, open_new_file(tmp)


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
