"""Versioned JSON documents: ``<prefix>/<v:020d>.json`` written create-only.

Topic metadata and consumer-group state are small documents that change by
writing version v+1; a lost race re-reads and retries, so concurrent updaters
never overwrite each other.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from sparklog.errors import CommitConflictError, CorruptionError
from sparklog.storage.objectstore import ObjectStore

Doc = dict[str, Any]


def version_key(prefix: str, version: int, suffix: str = ".json") -> str:
    return f"{prefix}/{version:020d}{suffix}"


def parse_document(raw: bytes, name: str) -> Doc:
    """The JSON object stored in ``name``; CorruptionError naming the file if it is not one."""
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise CorruptionError(
            f"{name} is damaged: not JSON ({type(exc).__name__}: {str(exc)[:200]}); "
            f"{len(raw)} bytes"
        ) from None
    if not isinstance(doc, dict):
        raise CorruptionError(f"{name} is damaged: a {type(doc).__name__}, not a JSON object")
    return doc


class VersionedDocument:
    """One document's history in an object store; the newest version is current."""

    def __init__(self, store: ObjectStore, prefix: str) -> None:
        self.store = store
        self.prefix = prefix

    def versions(self) -> list[int]:
        out = []
        for name in self.store.list_names(self.prefix):
            stem, _, ext = name.partition(".")
            if ext == "json" and stem.isdigit():
                out.append(int(stem))
        return sorted(out)

    def latest(self) -> tuple[int, Doc | None]:
        """(version, document) of the newest version; (-1, None) if none exists."""
        versions = self.versions()
        while versions:
            version = versions.pop()
            key = version_key(self.prefix, version)
            raw = self.store.get_or_none(key)
            if raw is not None:
                return version, parse_document(raw, f"{self.store.url}/{key}")
        return -1, None

    def write(self, version: int, doc: Doc) -> bool:
        """Create version ``version``; False if another writer created it first."""
        data = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
        return self.store.create(version_key(self.prefix, version), data)

    def update(self, change: Callable[[Doc | None], Doc | None], attempts: int = 20) -> Doc | None:
        """Apply ``change`` to the newest version and write the result as the next one.

        ``change`` returning None means "nothing to write".  Retries on races.
        """
        for _ in range(attempts):
            version, doc = self.latest()
            new = change(doc)
            if new is None:
                return doc
            if self.write(version + 1, new):
                return new
        raise CommitConflictError(
            f"could not update {self.store.url}/{self.prefix}: too many races"
        )
