"""SCRAM users in the cluster metadata log: ``scram_credential`` records.

The record's key is ``user/mechanism``, its value the credential of
:func:`~sparklog.security.scram.make_credential` (salt, iteration count,
stored and server keys) or null to delete it.  A broker answers logins from
its in-memory image; the CLI (``sparklog users``) writes on a root.
"""

from __future__ import annotations

import base64
import os
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


def set_salted(
    metadata: ClusterMetadata,
    user: str,
    mechanism: str,
    *,
    iterations: int,
    salt: str,
    salted_password: str,
) -> None:
    """Set a credential from a client's salt and salted password (base64), as Kafka's
    AlterUserScramCredentials: the password itself never leaves the client."""
    scram.check_mechanism(mechanism)
    scram.check_iterations(iterations)
    try:
        raw_salt = base64.b64decode(salt, validate=True)
        raw_salted = base64.b64decode(salted_password, validate=True)
    except ValueError:
        raise InvalidRequestError("salt and salted_password must be base64") from None
    if not raw_salt or not raw_salted:
        raise InvalidRequestError("salt and salted_password must not be empty")
    value = scram.credential_from_salted(mechanism, raw_salted, raw_salt, iterations)
    set_credential(metadata, user, mechanism, value)


def salted(mechanism: str, password: str, iterations: int) -> dict[str, Any]:
    """The fields of :func:`set_salted` for ``password`` with a new random salt."""
    scram.check_mechanism(mechanism)
    scram.check_iterations(iterations)
    salt = os.urandom(scram.SALT_BYTES)
    return {
        "iterations": iterations,
        "salt": base64.b64encode(salt).decode(),
        "salted_password": base64.b64encode(
            scram.salted_password(mechanism, password, salt, iterations)
        ).decode(),
    }


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
