"""Two tenants on one root: users admin, alice and bob (password ``<user>-pw``), alice
owning the topics ``alice.*`` and bob ``bob.*`` (prefixed ACLs allowing All)."""

from __future__ import annotations

import pathlib
from typing import Any

from sparklog.security import acls, users
from sparklog.storage.catalog import open_root


def tenants_root(tmp_path: pathlib.Path, extra_acls: list[Any] | None = None) -> str:
    """The root's URL, with the users and ACLs above and ``extra_acls``."""
    root = f"file://{tmp_path}/root"
    metadata = open_root(root, create=True).metadata
    for user in ("admin", "alice", "bob"):
        users.create(metadata, user, "SCRAM-SHA-256", f"{user}-pw")
    acls.create(
        metadata,
        [acls.binding("TOPIC", f"{u}.", f"User:{u}", "ALL", pattern_type="PREFIXED")
         for u in ("alice", "bob")]
        + list(extra_acls or []),
    )  # fmt: skip
    return root
