"""Each connector's state document in the root: ``_connect/<name>/<v:020d>.json``.

A connector records its kind and settings when it starts and its progress at
milestones (a PostgreSQL snapshot done, the LSN last confirmed), as versioned
create-only documents (the same mechanism as topic metadata), so ``sparklog
connect list|status`` read them from any machine that reaches the root. Secrets
(a password in a connection string) are never written.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from typing import Any

from sparklog.clock import now_ms
from sparklog.errors import ConnectorConfigError
from sparklog.storage import LogRoot
from sparklog.storage.documents import Doc, VersionedDocument

log = logging.getLogger(__name__)

PREFIX = "_connect"
_NAME = re.compile(r"^[A-Za-z0-9._-]{1,200}$")


def validate_name(name: str) -> str:
    if not _NAME.match(name):
        raise ConnectorConfigError(
            f"connector name {name!r} not accepted; accepted: 1-200 of letters, digits, '.', "
            "'_', '-'"
        )
    return name


#: versions of a connector's state kept (it saves progress every few seconds)
STATE_VERSIONS_KEPT = 8


def _doc(root: LogRoot, name: str) -> VersionedDocument:
    return VersionedDocument(root.store, f"{PREFIX}/{validate_name(name)}")


def load(root: LogRoot, name: str) -> Doc | None:
    """The connector's newest state, None if it never ran against this root."""
    return _doc(root, name).latest()[1]


def save(root: LogRoot, name: str, **fields: Any) -> Doc:
    """Merge ``fields`` into the connector's state and write it as the next version."""

    def change(doc: Doc | None) -> Doc:
        return {**(doc or {}), **fields, "name": name, "updated_ms": now_ms()}

    saved = _doc(root, name).update(change, keep=STATE_VERSIONS_KEPT)
    assert saved is not None
    return saved


def names(root: LogRoot) -> list[str]:
    """Every connector that recorded state in this root."""
    return [n for n in root.store.list_names(PREFIX) if _NAME.match(n)]


def redact(dsn: str) -> str:
    """A connection string without its password (key=value and URL forms)."""
    dsn = re.sub(r"(password\s*=\s*)('[^']*'|\S+)", r"\1***", dsn, flags=re.IGNORECASE)
    return re.sub(r"(://[^:/@]+):[^@]*@", r"\1:***@", dsn)


# -- running and stopping -----------------------------------------------------------------
#
# A stop request is recorded in the connector's state in the root, where the running
# connector looks every second: ``sparklog connect stop NAME`` works from any machine
# that reaches the root, as Kafka Connect's REST API does from any worker, and needs no
# pid (the process may run on another host or in a Spark driver).


def mark_running(root: LogRoot, name: str, **fields: Any) -> Doc:
    """Record that the connector runs here (pid, host); clears an older stop request."""
    import os
    import socket

    return save(
        root,
        name,
        status="running",
        pid=os.getpid(),
        host=socket.gethostname(),
        started_ms=now_ms(),
        stop_requested_ms=None,
        **fields,
    )


def mark_stopped(root: LogRoot, name: str, status: str = "stopped", **fields: Any) -> Doc:
    return save(root, name, status=status, stopped_ms=now_ms(), **fields)


def request_stop(root: LogRoot, name: str) -> Doc:
    """Record a stop request the running connector sees within about a second."""
    return save(root, name, stop_requested_ms=now_ms())


def watch_stop(
    root: LogRoot, name: str, stop: threading.Event, interval_s: float = 1.0
) -> threading.Thread:
    """Set ``stop`` when the connector's state has a stop request (a daemon thread)."""

    def watch() -> None:
        while not stop.wait(interval_s):
            try:
                doc = load(root, name) or {}
            except Exception:  # a flaky store read: look again next time
                log.warning("could not read %s's state for a stop request", name, exc_info=True)
                continue
            if doc.get("stop_requested_ms"):
                log.info("%s: stop requested", name)
                stop.set()

    thread = threading.Thread(target=watch, name=f"sparklog-connect-stop-{name}", daemon=True)
    thread.start()
    return thread


class Throttled:
    """Calls ``save`` at most once per ``interval_s`` (progress documents are versions)."""

    def __init__(self, interval_s: float = 5.0) -> None:
        self.interval_s = interval_s
        self._last = 0.0

    def due(self) -> bool:
        now = time.monotonic()
        if now - self._last < self.interval_s:
            return False
        self._last = now
        return True


def without_redacted_password(dsn: str) -> str:
    """A stored (redacted) connection string with the ``***`` password dropped.

    libpq then takes the password from ``PGPASSWORD`` or ``~/.pgpass``, as psql does.
    """
    dsn = re.sub(r"\s*password\s*=\s*\*\*\*", "", dsn, flags=re.IGNORECASE).strip()
    return re.sub(r"(://[^:/@]+):\*\*\*@", r"\1@", dsn)
