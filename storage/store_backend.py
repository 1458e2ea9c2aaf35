"""What every object-store backend offers (fsspec's and pyiceberg's FileIO shape).

:class:`~sparklog.storage.objectstore.ObjectStore` is the one face of a root: it
validates options, pickles, and turns failures into sparklog's errors once.  Each
kind of root gets one backend class behind it, chosen once when the store opens
(:func:`sparklog.storage.objectstore.open_backend`: the backends import this module, so it
imports none of them), instead of an ``if local / if memory / else`` in every method: a
local folder (os and shutil calls, no fsspec), ``memory://`` (fsspec's
memory filesystem under a process-wide create lock) and every other fsspec URL
(S3 through s3fs, with direct GETs).  Backends take full paths (``path(key)``)
and raise the underlying exceptions as they come; ``FileNotFoundError`` means
absent everywhere.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import pyarrow as pa

#: storage options that are sparklog's own (not passed to fsspec)
OWN_OPTIONS = ("request_timeout_ms", "commit_deadline_ms")


class Writable(Protocol):
    """Where :meth:`ObjectStore.create_streamed` streams an object's bytes."""

    def write(self, data: Any, /) -> int | None: ...


@dataclass(frozen=True)
class ObjectInfo:
    """Size and modification time of one stored object."""

    key: str
    size_bytes: int
    modified_ms: int


class StoreBackend(Protocol):
    """One kind of root.  ``local``: files on this machine (memory maps, temp files);
    ``remote``: every call is a network round trip whose answer can be lost."""

    local: bool
    remote: bool

    def path(self, key: str) -> str:
        """The backend's path of ``key`` ('' = the root itself)."""
        ...

    def relative(self, path: str) -> str:
        """The key of a path this backend listed."""
        ...

    def create(self, path: str, data: bytes | memoryview | pa.Buffer) -> bool:
        """Create-only, atomically; False (or FileExistsError / HTTP 412) if it exists."""
        ...

    def create_streamed(self, path: str, produce: Callable[[Writable], None]) -> int:
        """Stream a fresh object into place; its size.  FileExistsError if taken."""
        ...

    def put(self, path: str, data: bytes) -> None: ...

    def copy(self, source_path: str, dest_path: str) -> None: ...

    def delete(self, path: str) -> None: ...

    def delete_prefix(self, path: str) -> None: ...

    def get(self, path: str) -> bytes: ...

    def get_or_none(self, path: str) -> bytes | None: ...

    def get_many(self, paths: list[str]) -> list[bytes | BaseException | None]:
        """Each path's bytes, None where absent, the exception where its read failed."""
        ...

    def get_buffer(self, path: str) -> pa.Buffer: ...

    def get_range(self, path: str, start: int, end: int) -> pa.Buffer: ...

    def get_tail(self, path: str, nbytes: int) -> tuple[bytes, int] | None: ...

    def etag(self, path: str) -> str | None: ...

    def exists(self, path: str) -> bool: ...

    def list_objects(self, path: str) -> list[ObjectInfo]:
        """Every object below ``path``, keys relative to the root, temp files left out."""
        ...

    def list_names(self, path: str) -> list[str]:
        """The direct children's entries (names or paths)."""
        ...

    def remove_stale_temp_files(self, path: str, older_than_ms: int, now_ms: int) -> list[str]: ...

    def ensure_root(self) -> None: ...
