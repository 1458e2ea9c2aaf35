"""SCRAM users in the cluster metadata log: ``scram_credential`` records.

The record's key is ``user/mechanism``, its value the credential of
:func:`~sparklog.security.scram.make_credential` (salt, iteration count,
stored and server keys) or null to delete it.  A broker answers logins from
its in-memory image; the CLI (``sparklog users``) writes on a root.
"""

from __future__ import annotations

from typing import Any

from sparklog.errors import InvalidRequestError, ResourceNotFoundError
from sparklog.security import scram
from sparklog.storage.cluster_metadata import ClusterMetadata, MetadataImage, Record


def key(user: str, mechanism: str) -> str:
    return f"{user}/{mechanism}"


def check_user(user: str) -> str:
    if not user or len(user) > 256 or any(c in user for c in "/\n\r\x00"):
        raise InvalidRequestError(
            f"user name {user[:100]!r} is not accepted; accepted: 1 to 256 characters, no '/', "
            "newline or NUL"
        )
    return user


def credential(image: MetadataImage, user: str, mechanism: str) -> dict[str, Any] | None:
    found = image.scram_credentials.get(key(user, mechanism))
    return dict(found) if found is not None else None


def users(image: MetadataImage) -> dict[str, list[tuple[str, int]]]:
    """user -> [(mechanism, iterations)], sorted."""
    out: dict[str, list[tuple[str, int]]] = {}
    for k, value in sorted(image.scram_credentials.items()):
        user, _, mechanism = k.rpartition("/")
        out.setdefault(user, []).append((mechanism, int(value["iterations"])))
    return out


def set_credential(metadata: ClusterMetadata, user: str, mechanism: str, value: Any) -> None:
    """Create or replace one user's credential (a ``scram_credential`` record)."""
    check_user(user)
    scram.check_mechanism(mechanism)
    record: Record = {"type": "scram_credential", "key": key(user, mechanism), "value": value}
    metadata.append(lambda image: [record])


def create(
    metadata: ClusterMetadata,
    user: str,
    mechanism: str,
    password: str,
    iterations: int = scram.DEFAULT_ITERATIONS,
) -> None:
    set_credential(
        metadata, user, mechanism, scram.make_credential(mechanism, password, iterations)
    )


def delete(metadata: ClusterMetadata, user: str, mechanism: str | None = None) -> list[str]:
    """Delete the user's credential for ``mechanism`` (None: every one); the mechanisms deleted."""
    deleted: list[str] = []

    def build(image: MetadataImage) -> list[Record]:
        deleted.clear()
        for k in image.scram_credentials:
            name, _, mech = k.rpartition("/")
            if name == user and mechanism in (None, mech):
                deleted.append(mech)
        if not deleted:
            raise ResourceNotFoundError(
                f"user {user[:100]!r} has no SCRAM credential"
                + (f" for {mechanism}" if mechanism else "")
            )
        return [{"type": "scram_credential", "key": key(user, m), "value": None} for m in deleted]

    metadata.append(build)
    return sorted(deleted)
