"""Empty temp files made ahead, so a local create-only write need not make one on its path.

A local create-only write (a log commit) writes a temp file and links it into
place.  Making the temp file, a new inode, is its slowest step: 0.06-1.4 ms on
the ext4 disk of this project's test machine, against 0.02 ms for the link.  A
writer that has other work to do first (encoding and writing the object the
commit will name) asks for a spare file in the commit's folder; the background
pool makes it meanwhile, and the commit takes it.  A spare nobody took is
removed when the writer's block ends; one left by a killed process is an empty
file whose ``.tmp-`` name listings skip, as any temp file's.
"""

from __future__ import annotations

import contextlib
import os
import threading
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the pool loads when a writer first prepares (metadata commands never do)
    from concurrent.futures import Future

#: marks a spare's name; every ``.tmp-`` name is skipped by listings
SPARE_MARK = ".tmp-spare-"


@dataclass(frozen=True, eq=False)
class Spare:
    """One spare file being made (or made) in ``directory`` by process ``pid``."""

    directory: str
    pid: int
    made: Future[str | None]


class SpareFiles:
    """The spare files of one process, by folder; thread-safe, fork-aware.

    A forked child (Spark's Python workers are forked) never takes its parent's
    spares: the file may be taken by the parent too, and the thread making it
    does not exist in the child.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ready: dict[tuple[int, str], list[Spare]] = {}
        # a fork while another thread held the lock would leave it held in the child
        os.register_at_fork(after_in_child=self._forget_parent)

    def _forget_parent(self) -> None:
        self._lock = threading.Lock()
        self._ready = {}

    def prepare(self, directory: str) -> Spare:
        """Start making a spare file in ``directory`` on the background pool."""
        from sparklog.storage.background import background_pool

        spare = Spare(directory, os.getpid(), background_pool().submit(_make_spare, directory))
        with self._lock:
            self._ready.setdefault((spare.pid, directory), []).append(spare)
        return spare

    def take(self, directory: str) -> str | None:
        """The path of a spare file in ``directory`` (now the caller's), or None."""
        with self._lock:
            listed = self._ready.get((os.getpid(), directory))
            if not listed:
                return None
            spare = listed.pop()
            if not listed:
                del self._ready[(spare.pid, directory)]
        from sparklog.storage.background import outcome

        return outcome(spare.made, lambda: None)  # not started (a busy pool): none made

    def discard(self, spare: Spare) -> None:
        """Remove ``spare``'s file unless someone took it."""
        with self._lock:
            listed = self._ready.get((spare.pid, spare.directory))
            if listed is None or spare not in listed:
                return
            listed.remove(spare)
            if not listed:
                del self._ready[(spare.pid, spare.directory)]
        if spare.made.cancel():
            return  # never started: no file
        path = spare.made.result()
        if path is not None:
            with contextlib.suppress(OSError):
                os.unlink(path)


def open_new_file(path: str) -> int:
    """Create ``path`` (it must not exist), making its folder if missing; a writable fd."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
    try:
        return os.open(path, flags, 0o644)
    except FileNotFoundError:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        return os.open(path, flags, 0o644)


def _make_spare(directory: str) -> str | None:
    """An empty new file in ``directory``; None if it cannot be made (the taker makes its own)."""
    path = f"{directory}/{SPARE_MARK}{uuid.uuid4().hex}"
    try:
        os.close(open_new_file(path))
    except OSError:
        return None
    return path


#: this process's spare files
SPARE_FILES = SpareFiles()
