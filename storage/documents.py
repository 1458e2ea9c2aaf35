"""Stored JSON documents: one checksummed envelope, and versioned documents.

Every small JSON object sparklog stores (log commits, group state, heartbeats,
connector state) is written as ``{"sum":"<xxh3 hex>","c":<body>}``: valid JSON
whose body bytes are checksummed, so damage that still parses is caught too,
and read by :func:`parse_document`, which names the file in the
``CorruptRecordError`` it raises (docs/architecture.md, "Storage format 2").
Documents written before the
envelope existed (plain JSON objects) are still read.

Versioned documents (``<prefix>/<v:020d>.json``, written create-only) change by
writing version v+1; a lost race re-reads and retries, so concurrent updaters
never overwrite each other.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import xxhash

from sparklog.errors import CorruptRecordError
from sparklog.retry import LostRace, until_won
from sparklog.storage.objectstore import ObjectStore

Doc = dict[str, Any]

_ENVELOPE_HEAD = b'{"sum":"'
_ENVELOPE_MID = b'","c":'
_ENVELOPE_BODY_AT = len(_ENVELOPE_HEAD) + 16 + len(_ENVELOPE_MID)


def version_key(prefix: str, version: int, suffix: str = ".json") -> str:
    return f"{prefix}/{version:020d}{suffix}"


def encode_document(doc: Doc) -> bytes:
    """``{"sum":"<xxh3 hex>","c":<doc>}``: the bytes every stored document is written as."""
    data = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
    digest = xxhash.xxh3_64_hexdigest(data).encode()
    return _ENVELOPE_HEAD + digest + _ENVELOPE_MID + data + b"}"


def is_enveloped(raw: bytes) -> bool:
    return bytes(raw[: len(_ENVELOPE_HEAD)]) == _ENVELOPE_HEAD


def parse_document(raw: bytes, name: str) -> Doc:
    """The JSON object stored in ``name``, checksum verified; CorruptRecordError naming the file."""
    raw = bytes(raw)
    if is_enveloped(raw):
        if (
            len(raw) <= _ENVELOPE_BODY_AT + 1
            or raw[_ENVELOPE_BODY_AT - len(_ENVELOPE_MID) : _ENVELOPE_BODY_AT] != _ENVELOPE_MID
            or not raw.endswith(b"}")
        ):
            raise CorruptRecordError(f"{name} is damaged: a torn document ({len(raw)} bytes)")
        body = raw[_ENVELOPE_BODY_AT:-1]
        if (
            xxhash.xxh3_64_hexdigest(body).encode()
            != raw[len(_ENVELOPE_HEAD) : len(_ENVELOPE_HEAD) + 16]
        ):
            raise CorruptRecordError(f"{name} is damaged: it fails its checksum ({len(raw)} bytes)")
        raw = body
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise CorruptRecordError(
            f"{name} is damaged: not JSON ({type(exc).__name__}: {str(exc)[:200]}); "
            f"{len(raw)} bytes"
        ) from None
    if not isinstance(doc, dict):
        raise CorruptRecordError(f"{name} is damaged: a {type(doc).__name__}, not a JSON object")
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
        return self.store.create(version_key(self.prefix, version), encode_document(doc))

    def update(
        self,
        change: Callable[[Doc | None], Doc | None],
        attempts: int = 20,
        keep: int | None = None,
    ) -> Doc | None:
        """Apply ``change`` to the newest version and write the result as the next one.

        ``change`` returning None means "nothing to write".  A lost race re-reads and
        retries with backoff (:func:`sparklog.retry.until_won`); after ``attempts`` lost
        races it raises :class:`~sparklog.errors.CommitConflictError`.  With ``keep``,
        the version ``keep`` behind the new one is deleted, so a document written
        often (a connector's progress) holds at most about ``keep`` versions and its
        listing stays short.
        """

        def attempt() -> Doc | None:
            version, doc = self.latest()
            new = change(doc)
            if new is None:
                return doc
            if not self.write(version + 1, new):
                raise LostRace(f"version {version + 1} was created by another writer")
            if keep is not None and version + 1 - keep >= 0:
                self.store.delete(version_key(self.prefix, version + 1 - keep))
            return new

        return until_won(
            attempt, what=f"update of {self.store.url}/{self.prefix}", attempts_max=attempts
        )
