"""Each connector's state document in the root: ``_connect/<name>/<v:020d>.json``.

A connector records its kind and settings when it starts and its progress at
milestones (a PostgreSQL snapshot done, the LSN last confirmed), as versioned
create-only documents (the same mechanism as topic metadata), so ``sparklog
connect list|status`` read them from any machine that reaches the root. Secrets
(a password in a connection string) are never written.
"""

from __future__ import annotations

import re
from typing import Any

from sparklog.clock import now_ms
from sparklog.errors import ConnectorConfigError
from sparklog.storage import LogRoot
from sparklog.storage.documents import Doc, VersionedDocument

PREFIX = "_connect"
_NAME = re.compile(r"^[A-Za-z0-9._-]{1,200}$")


def validate_name(name: str) -> str:
    if not _NAME.match(name):
        raise ConnectorConfigError(
            f"connector name {name!r} not accepted; accepted: 1-200 of letters, digits, '.', "
            "'_', '-'"
        )
    return name


def _doc(root: LogRoot, name: str) -> VersionedDocument:
    return VersionedDocument(root.store, f"{PREFIX}/{validate_name(name)}")


def load(root: LogRoot, name: str) -> Doc | None:
    """The connector's newest state, None if it never ran against this root."""
    return _doc(root, name).latest()[1]


def save(root: LogRoot, name: str, **fields: Any) -> Doc:
    """Merge ``fields`` into the connector's state and write it as the next version."""

    def change(doc: Doc | None) -> Doc:
        return {**(doc or {}), **fields, "name": name, "updated_ms": now_ms()}

    saved = _doc(root, name).update(change)
    assert saved is not None
    return saved


def names(root: LogRoot) -> list[str]:
    """Every connector that recorded state in this root."""
    return [n for n in root.store.list_names(PREFIX) if _NAME.match(n)]


def redact(dsn: str) -> str:
    """A connection string without its password (key=value and URL forms)."""
    dsn = re.sub(r"(password\s*=\s*)('[^']*'|\S+)", r"\1***", dsn, flags=re.IGNORECASE)
    return re.sub(r"(://[^:/@]+):[^@]*@", r"\1:***@", dsn)
