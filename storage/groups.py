"""Consumer groups' committed offsets, durable in the root.

``groups/<group>/offsets/<v:020d>.json`` holds the whole offset map of a group
at version v (create-only, so concurrent committers never lose each other's
partitions).  Membership and generations are the coordinator's business
(broker_lite); this module only makes committed offsets durable.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sparklog.storage.documents import VersionedDocument
from sparklog.storage.errors import InvalidConfigError
from sparklog.storage.objectstore import ObjectStore
from sparklog.storage.records import now_ms

GROUP_NAME_RE = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")


def validate_group_name(name: str) -> str:
    if not isinstance(name, str) or not GROUP_NAME_RE.match(name) or name in (".", ".."):
        raise InvalidConfigError(
            f"invalid group name {name!r}; accepted: 1-249 characters from [a-zA-Z0-9._-]"
        )
    return name


@dataclass(frozen=True)
class CommittedOffset:
    """A group's committed position in one partition: the next offset to read."""

    offset: int
    metadata: str
    commit_ms: int
    topic_id: str = ""


TopicPartitionKey = tuple[str, int]


class GroupStore:
    """Committed offsets of every consumer group under one root."""

    def __init__(self, store: ObjectStore) -> None:
        self.store = store

    def _doc(self, group: str) -> VersionedDocument:
        return VersionedDocument(self.store, f"groups/{validate_group_name(group)}/offsets")

    def commit(
        self,
        group: str,
        offsets: Mapping[TopicPartitionKey, int],
        *,
        metadata: str = "",
        topic_ids: Mapping[str, str] | None = None,
    ) -> None:
        """Record ``offsets`` (next offset to consume) for the group's partitions."""
        stamp = now_ms()
        entries = {
            f"{topic}:{partition}": {
                "offset": int(offset),
                "metadata": metadata,
                "commit_ms": stamp,
                "topic_id": (topic_ids or {}).get(topic, ""),
            }
            for (topic, partition), offset in offsets.items()
        }

        def change(doc: dict[str, Any] | None) -> dict[str, Any] | None:
            current = dict((doc or {}).get("offsets", {}))
            if all(current.get(k, {}).get("offset") == v["offset"] for k, v in entries.items()):
                return None
            current.update(entries)
            return {"group": group, "offsets": current}

        self._doc(group).update(change)

    def fetch(self, group: str) -> dict[TopicPartitionKey, CommittedOffset]:
        _, doc = self._doc(group).latest()
        out = {}
        for key, entry in ((doc or {}).get("offsets") or {}).items():
            topic, _, partition = key.rpartition(":")
            out[(topic, int(partition))] = CommittedOffset(
                entry["offset"],
                entry.get("metadata", ""),
                entry.get("commit_ms", 0),
                entry.get("topic_id", ""),
            )
        return out

    def list_groups(self) -> list[str]:
        return self.store.list_names("groups")

    def delete(self, group: str) -> None:
        self.store.delete_prefix(f"groups/{validate_group_name(group)}")
