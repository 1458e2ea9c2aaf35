"""Object store access over any fsspec URL, with atomic create-only writes.

The log's correctness rests on one primitive: *create this key only if it does
not exist*, atomically, so that of several racing writers exactly one wins and
no reader ever sees a partial object.  fsspec's generic ``mode="create"`` is
not atomic on local files, so each backend gets the mechanism that is:
``os.link`` of a fully written temp file locally, ``If-None-Match: *`` on S3
(s3fs), a process-wide lock for ``memory://``.  :class:`ObjectStore` is the one
face of a root (options, pickling, failures turned into sparklog's errors); the
work is done by one backend per kind of root, chosen once at open
(``store_backend.py``: the protocol; ``store_local.py``, ``store_fsspec.py``).

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
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, NoReturn

from sparklog.errors import (
    CommitStateUnknownError,
    InvalidConfigurationError,
    SparklogError,
    StoreAccessError,
    StoreUnavailableError,
)
from sparklog.storage.spare_files import SPARE_FILES
from sparklog.storage.store_backend import (
    OWN_OPTIONS,
    ObjectInfo,
    StoreBackend,
    Writable,
)
from sparklog.storage.store_local import local_root

if TYPE_CHECKING:
    # pyarrow is imported when a buffer is read, fsspec by the backends that need it:
    # never with this module. Spark starts a fresh Python process per streaming query,
    # and every CLI command is one; each pays every import.
    import pyarrow as pa

__all__ = [
    "OWN_OPTIONS",
    "ObjectInfo",
    "ObjectStore",
    "Writable",
    "is_io_failure",
    "local_root",
    "normalize_url",
]

#: overall deadline of one call to a remote store (storage option ``request_timeout_ms``)
REQUEST_TIMEOUT_MS = 30_000
#: default of the storage option ``commit_deadline_ms``: how long a commit to a metadata
#: log (shard, group, cluster) retries lost races and store outages before it gives up
COMMIT_DEADLINE_MS = 120_000


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


def _missing_credentials(exc: BaseException) -> bool:
    """True when the S3 client found no credentials to sign with (botocore's
    NoCredentialsError / PartialCredentialsError): waiting does not fix it."""
    if "botocore.exceptions" not in sys.modules:  # only s3fs raises them, once loaded
        return False
    import botocore.exceptions as boto

    return isinstance(exc, boto.NoCredentialsError | boto.PartialCredentialsError)


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


def normalize_url(url: str) -> str:
    """Turn a plain path into a ``file://`` URL; leave other URLs alone."""
    if "://" not in url:
        return "file://" + os.path.abspath(os.path.expanduser(url))
    return url


def open_backend(
    url: str,
    protocol: str,
    storage_options: Mapping[str, Any],
    *,
    fsync: bool,
    request_timeout_ms: int,
) -> StoreBackend:
    """The backend of ``url``, chosen once; fsspec is imported only for non-local roots
    (and then only when the backend first needs its filesystem).  Here, not in
    ``store_backend`` (which every backend imports), so no two modules import each other."""
    if protocol in ("file", "local"):
        from sparklog.storage.store_local import LocalBackend

        return LocalBackend(url, fsync=fsync)
    from sparklog.storage.store_fsspec import FsspecBackend, MemoryBackend

    backend = MemoryBackend if protocol == "memory" else FsspecBackend
    return backend(url, protocol, storage_options, request_timeout_ms=request_timeout_ms)


class ObjectStore:
    """A key/value view of one root URL: keys are '/'-separated relative paths.

    Instances pickle as (url, storage options) and rebuild their backend (and its
    filesystem, on first use) when unpickled, so Spark can ship them to executors.
    """

    def __init__(
        self,
        url: str,
        storage_options: Mapping[str, Any] | None = None,
        fsync: bool = False,
        root_url: str | None = None,
    ) -> None:
        self.url = normalize_url(url).rstrip("/")
        #: the root this store was derived from (itself unless made by :meth:`child`):
        #: a key beginning with ``/`` names an object below it (:meth:`locate`)
        self.root_url = self.url if root_url is None else normalize_url(root_url).rstrip("/")
        self._root_store: ObjectStore | None = None
        self.storage_options: dict[str, Any] = dict(storage_options or {})
        self.fsync = fsync
        self.request_timeout_ms = self._positive_ms("request_timeout_ms", REQUEST_TIMEOUT_MS)
        self.commit_deadline_ms = self._positive_ms("commit_deadline_ms", COMMIT_DEADLINE_MS)
        self.protocol = self.url.split("://", 1)[0]
        self._backend: StoreBackend = open_backend(
            self.url,
            self.protocol,
            self.storage_options,
            fsync=fsync,
            request_timeout_ms=self.request_timeout_ms,
        )

    def _positive_ms(self, key: str, default: int) -> int:
        """Storage option ``key``: milliseconds, an integer >= 1 (text from the
        environment, the CLI or Spark options is accepted)."""
        raw = self.storage_options.get(key, default)
        try:
            value = int(raw)
        except (TypeError, ValueError):
            value = -1
        if value < 1 or isinstance(raw, bool):
            raise InvalidConfigurationError(
                f"storage option {key!r} = {raw!r} is not accepted; "
                "accepted: an integer >= 1 (milliseconds)"
            )
        return value

    # -- pickling ----------------------------------------------------------
    def __getstate__(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "storage_options": self.storage_options,
            "fsync": self.fsync,
            "root_url": self.root_url,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(  # type: ignore[misc]
            state["url"], state["storage_options"], state["fsync"], state.get("root_url")
        )

    def __repr__(self) -> str:
        return f"ObjectStore({self.url!r})"

    # -- plumbing ----------------------------------------------------------
    def with_request_timeout(self, request_timeout_ms: int) -> ObjectStore:
        """The same root with a shorter deadline per call (e.g. for lease renewal)."""
        options = {**self.storage_options, "request_timeout_ms": request_timeout_ms}
        return ObjectStore(self.url, options, self.fsync, self.root_url)

    @property
    def is_local(self) -> bool:
        return self._backend.local

    @property
    def is_remote(self) -> bool:
        """A request is a network round trip (not a local file or ``memory://``)."""
        return self._backend.remote

    def _path(self, key: str) -> str:
        """The backend's path of ``key`` ('' = the root itself)."""
        return self._backend.path(key)

    def child(self, prefix: str) -> ObjectStore:
        """A store rooted at ``prefix`` below this one (same root for ``/`` keys)."""
        return ObjectStore(f"{self.url}/{prefix}", self.storage_options, self.fsync, self.root_url)

    def locate(self, key: str) -> tuple[ObjectStore, str]:
        """The store and key that hold ``key``.

        A segment's object key is relative to its topic's folder, except for an
        object shared by several topics (one broker flush, see
        :mod:`sparklog.storage.shared_objects`), whose key begins with ``/`` and
        is relative to the root the topic's store was derived from.
        """
        if not key.startswith("/"):
            return self, key
        if self.root_url == self.url:
            return self, key[1:]
        if self._root_store is None:
            self._root_store = ObjectStore(self.root_url, self.storage_options, self.fsync)
        return self._root_store, key[1:]

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
        what = f"{op} {key!r}" if key else f"{op} the root"  # the root itself has no key
        where = f"storage root {self.url!r} failed to {what}: {type(exc).__name__}: {exc}"
        if _missing_credentials(exc):
            raise StoreAccessError(
                f"{where}; the S3 client found no credentials: give them as storage options "
                "(-S key=... -S secret=..., or SPARKLOG_STORAGE_KEY / SPARKLOG_STORAGE_SECRET), "
                "AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, or an AWS profile (-S profile=NAME); "
                "-S anon=true for a public bucket",
                url=self.url,
                key=key,
            ) from exc
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
            existing = self._backend.get(self._path(key))
        except FileNotFoundError:
            return False  # taken, then removed again (a cleaner): not ours
        except Exception as exc:
            self._raise_failure("read back", key, exc, outcome_unknown=True)
        return bytes(existing) == bytes(data)

    # -- writes ------------------------------------------------------------
    def create(self, key: str, data: bytes | memoryview | pa.Buffer) -> bool:
        """Write ``key`` only if absent, atomically.  False if it existed."""
        remote = self._backend.remote
        try:
            return self._backend.create(self._path(key), data)
        except Exception as exc:
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
        try:
            return self._backend.create_streamed(self._path(key), produce)
        except FileExistsError as exc:
            raise StoreUnavailableError(f"object {self.url}/{key} exists already") from exc
        except Exception as exc:
            self._raise_failure("create", key, exc)

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

    def put(self, key: str, data: bytes) -> None:
        """Write or overwrite ``key`` (for best-effort hints only)."""
        try:
            self._backend.put(self._path(key), data)
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
        try:
            return self._backend.etag(self._path(key))
        except FileNotFoundError:
            raise
        except Exception as exc:
            self._raise_failure("read", key, exc)

    def copy_from(self, source: ObjectStore, key: str, dest_key: str) -> str:
        """Copy ``source``'s object ``key`` here as ``dest_key`` (overwriting: callers copy
        to keys only they write, with the same bytes each time).

        Server-side (S3 CopyObject, no bytes through this process) where
        :meth:`same_endpoint` allows, else a read and a write.  Returns how:
        ``"server"`` or ``"bytes"``.  FileNotFoundError if the source is gone.
        """
        if self.same_endpoint(source):
            try:
                self._backend.copy(source._path(key), self._path(dest_key))
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
            self._backend.delete(self._path(key))
        except FileNotFoundError:
            pass
        except Exception as exc:
            self._raise_failure("delete", key, exc)

    def delete_prefix(self, prefix: str) -> None:
        """Remove everything below ``prefix`` (or the one object ``prefix`` names)."""
        try:
            self._backend.delete_prefix(self._path(prefix))
        except FileNotFoundError:
            pass
        except Exception as exc:
            self._raise_failure("delete", prefix, exc)

    # -- reads -------------------------------------------------------------
    def get(self, key: str) -> bytes:
        """The whole object; FileNotFoundError if absent."""
        try:
            return self._backend.get(self._path(key))
        except FileNotFoundError:
            raise
        except Exception as exc:
            self._raise_failure("read", key, exc)

    def get_or_none(self, key: str) -> bytes | None:
        """The whole object, None if absent (one GET on S3)."""
        try:
            return self._backend.get_or_none(self._path(key))
        except Exception as exc:
            self._raise_failure("read", key, exc)

    def get_many(self, keys: Iterable[str]) -> dict[str, bytes | None]:
        """Several whole objects at once (concurrently on S3); None where absent."""
        keys = list(keys)
        if not keys:
            return {}
        try:
            found = self._backend.get_many([self._path(k) for k in keys])
        except Exception as exc:
            self._raise_failure("read", keys[0], exc)
        out: dict[str, bytes | None] = {}
        for key, value in zip(keys, found, strict=True):
            if isinstance(value, BaseException):
                self._raise_failure("read", key, value)
            out[key] = value
        return out

    def get_buffer(self, key: str) -> pa.Buffer:
        """The whole object as an Arrow buffer: memory-mapped locally (zero-copy)."""
        try:
            return self._backend.get_buffer(self._path(key))
        except FileNotFoundError:
            raise
        except Exception as exc:
            self._raise_failure("read", key, exc)

    def get_range(self, key: str, start: int, end: int) -> pa.Buffer:
        """Bytes ``[start, end)`` of ``key``: memory-mapped locally, a range GET elsewhere."""
        try:
            return self._backend.get_range(self._path(key), start, end)
        except FileNotFoundError:
            raise
        except Exception as exc:
            self._raise_failure("read", key, exc)

    def get_tail(self, key: str, nbytes: int) -> tuple[bytes, int] | None:
        """The last ``nbytes`` of ``key`` (all of it if smaller) and its size; None if absent.

        One request on S3 (a suffix range GET), like :meth:`get_or_none`.
        """
        try:
            return self._backend.get_tail(self._path(key), nbytes)
        except FileNotFoundError:
            return None
        except Exception as exc:
            self._raise_failure("read", key, exc)

    def exists(self, key: str) -> bool:
        try:
            return self._backend.exists(self._path(key))
        except Exception as exc:
            self._raise_failure("stat", key, exc)

    def root_exists(self) -> bool:
        """Whether the root itself (folder, bucket or prefix) exists; never creates it.

        A store that cannot be reached raises (StoreUnavailableError), so "missing"
        is never confused with "down".
        """
        try:
            return self._backend.exists(self._path(""))
        except Exception as exc:
            self._raise_failure("reach", "", exc)

    def list_objects(self, prefix: str) -> list[ObjectInfo]:
        """Every object below ``prefix`` (recursively), keys relative to the root."""
        try:
            return self._backend.list_objects(self._path(prefix))
        except Exception as exc:
            self._raise_failure("list", prefix, exc)

    def remove_stale_temp_files(self, prefix: str, older_than_ms: int, now_ms: int) -> list[str]:
        """Remove the temp files below ``prefix`` older than ``older_than_ms``; their keys.

        Writes remove their own temp file when they fail; a process killed
        mid-write cannot, so the cleaner calls this. Only local roots have temp
        files (object stores write whole objects).
        """
        if not self.is_local:
            return []
        return self._backend.remove_stale_temp_files(self._path(prefix), older_than_ms, now_ms)

    def list_names(self, prefix: str) -> list[str]:
        """Names of the direct children (files or folders) of ``prefix``."""
        try:
            entries = self._backend.list_names(self._path(prefix))
        except FileNotFoundError:
            return []
        except Exception as exc:
            self._raise_failure("list", prefix, exc)
        names = {str(e).rstrip("/").rsplit("/", 1)[-1] for e in entries}
        return sorted(n for n in names if n and ".tmp-" not in n)

    def ensure_root(self) -> None:
        """Fail early, with the URL in the message, if the root cannot be reached."""
        try:
            self._backend.ensure_root()
        except Exception as exc:
            self._raise_failure("reach", "", exc)
