"""A local folder as an object store, with os and shutil calls alone (no fsspec, and
pyarrow only to memory-map a buffer), so metadata commands on a local root start fast.

Create-only writes hard-link a complete, fsynced temp file into place (atomic; of
racing writers exactly one wins); reads of Arrow objects are memory maps.  The
cluster metadata log's files (SCRAM credentials among their records) are
created 0600 (``OWNER_ONLY_PREFIXES``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING

from sparklog.storage.spare_files import SPARE_FILES, open_new_file
from sparklog.storage.store_backend import ObjectInfo, Writable

if TYPE_CHECKING:
    import pyarrow as pa

#: ranges above this are memory-mapped by get_range, smaller ones read into a buffer
_MAPPED_RANGE_BYTES_MIN = 4 << 20


#: keys under these hold secrets (the cluster metadata log carries the users' SCRAM
#: credentials, in its records and every snapshot): written owner-only (0600) whatever
#: the writer's umask, so other accounts on the machine cannot read them
OWNER_ONLY_PREFIXES = ("cluster/metadata/log/",)

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


class LocalBackend:
    """``file://`` and ``local://`` roots and plain paths."""

    local = True
    remote = False

    def __init__(self, url: str, *, fsync: bool) -> None:
        self.root = local_root(url)
        self.fsync = fsync

    def path(self, key: str) -> str:
        return f"{self.root}/{key}" if key else self.root

    def relative(self, path: str) -> str:
        cut = len(self.root) + 1 if self.root else 0
        return path[cut:] if path.startswith(self.root) else path

    # -- writes ------------------------------------------------------------
    def create(self, path: str, data: bytes | memoryview | pa.Buffer) -> bool:
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
                if self.relative(path).startswith(OWNER_ONLY_PREFIXES):
                    os.fchmod(fd, 0o600)  # before a byte is written; the link keeps it
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

    def create_streamed(self, path: str, produce: Callable[[Writable], None]) -> int:
        """Straight into the final path, opened create-exclusive (no temp file, no link):
        nothing refers to a fresh key until a commit names it.  A failure removes the
        partial file; FileExistsError (someone else's file) leaves it alone."""
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
        except BaseException:
            if opened:
                with contextlib.suppress(OSError):
                    os.unlink(path)
            raise

    def put(self, path: str, data: bytes) -> None:
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

    def copy(self, source_path: str, dest_path: str) -> None:
        os.makedirs(os.path.dirname(dest_path), exist_ok=True)
        shutil.copyfile(source_path, dest_path)

    def delete(self, path: str) -> None:
        os.remove(path)

    def delete_prefix(self, path: str) -> None:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.remove(path)

    # -- reads -------------------------------------------------------------
    def get(self, path: str) -> bytes:
        # plain reads: fsspec's open costs more than a small read
        with open(path, "rb", buffering=0) as f:
            return f.readall()

    def get_or_none(self, path: str) -> bytes | None:
        try:
            return self.get(path)
        except FileNotFoundError:
            return None

    def get_many(self, paths: list[str]) -> list[bytes | BaseException | None]:
        return [self.get_or_none(p) for p in paths]

    def get_buffer(self, path: str) -> pa.Buffer:
        import pyarrow as pa

        with pa.memory_map(path, "r") as mm:
            return mm.read_buffer()

    def get_range(self, path: str, start: int, end: int) -> pa.Buffer:
        """A small range is read into a buffer of Arrow's pool, which reuses freed memory; a
        large one is memory-mapped (no copy). Mapping a small range costs more than copying
        it: a map and unmap, and a page fault per page when the checksum first reads it."""
        import pyarrow as pa

        size = end - start
        if size > _MAPPED_RANGE_BYTES_MIN:
            with pa.memory_map(path, "r") as mm:
                mm.seek(start)
                return mm.read_buffer(size)
        buffer = pa.allocate_buffer(size)
        fd = os.open(path, os.O_RDONLY)
        try:
            read = os.preadv(fd, [memoryview(buffer)], start) if size else 0
        finally:
            os.close(fd)
        return buffer if read == size else buffer.slice(0, read)

    def get_tail(self, path: str, nbytes: int) -> tuple[bytes, int] | None:
        with open(path, "rb", buffering=0) as f:
            size = os.fstat(f.fileno()).st_size
            f.seek(max(size - nbytes, 0))
            return f.readall(), size

    def etag(self, path: str) -> str | None:
        return None  # local folders keep no entity tags

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def list_objects(self, path: str) -> list[ObjectInfo]:
        """A walk, one stat per file.  A file removed between the walk and its stat (a
        cleaner, a compaction) is skipped; a missing folder lists nothing."""
        base = path.rstrip("/")
        if os.path.isfile(base):
            paths = [base]
        else:
            paths = [
                f"{folder}/{name}"
                for folder, _, files in os.walk(base, followlinks=True)
                for name in files
            ]
        out = []
        for found in paths:
            rel = self.relative(found)
            if ".tmp-" in rel:
                continue
            try:
                stat = os.stat(found)
            except FileNotFoundError:
                continue
            out.append(ObjectInfo(rel, stat.st_size, int(stat.st_mtime * 1000)))
        return sorted(out, key=lambda i: i.key)

    def list_names(self, path: str) -> list[str]:
        """A folder's entries; a file lists itself (as fsspec's ``ls`` does)."""
        try:
            with os.scandir(path) as entries:
                return [entry.name for entry in entries]
        except NotADirectoryError:
            if os.path.lexists(path):
                return [path]
            raise

    def remove_stale_temp_files(self, path: str, older_than_ms: int, now_ms: int) -> list[str]:
        """Temp files of writes killed midway (a failing write removes its own)."""
        removed = []
        for folder, _, files in os.walk(path):
            for name in files:
                if ".tmp-" not in name:
                    continue
                found = f"{folder}/{name}"
                with contextlib.suppress(FileNotFoundError):
                    if now_ms - os.stat(found).st_mtime * 1000 >= older_than_ms:
                        os.unlink(found)
                        removed.append(self.relative(found))
        return sorted(removed)

    def ensure_root(self) -> None:
        os.makedirs(self.path(""), exist_ok=True)


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
