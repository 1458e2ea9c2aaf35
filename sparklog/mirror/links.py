"""Mirror links: their definitions in the destination's cluster metadata log.

A link is one keyed ``mirror_link`` record (key: the link's name, value: the
definition below, or null once deleted), so every broker and client of the
destination sees the same links from its metadata image, and a change is one
create-only append (docs/architecture.md, "The control plane"; docs/mirroring.md).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

from sparklog.errors import (
    InvalidConfigurationError,
    MirrorLinkExistsError,
    UnknownMirrorLinkError,
)
from sparklog.storage.cluster_metadata import MetadataImage, Record

if TYPE_CHECKING:
    from sparklog.storage import LogRoot

#: A Kafka-protocol source is named ``kafka://host:port[,host:port...]``.
KAFKA_SCHEME = "kafka://"
LINK_NAME = re.compile(r"^[A-Za-z0-9._-]{1,200}$")


@dataclass(frozen=True)
class MirrorLink:
    """One link's definition (the value of its ``mirror_link`` record).

    ``topics`` and ``groups`` are regular expressions matched against whole
    names (as MirrorMaker 2's ``topics``/``groups``); ``groups`` empty syncs no
    group.  ``prefix`` names mirror topics ``prefix + source name``.
    ``source_options`` are the source root's storage options (fsspec's).
    """

    name: str
    source: str
    topics: str
    groups: str = ""
    prefix: str = ""
    source_options: dict[str, Any] = field(default_factory=dict)
    paused: bool = False
    created_ms: int = 0

    @property
    def kafka_source(self) -> bool:
        return self.source.startswith(KAFKA_SCHEME)

    @property
    def bootstrap_servers(self) -> str:
        return self.source[len(KAFKA_SCHEME) :]

    def selects_topic(self, name: str) -> bool:
        return re.fullmatch(self.topics, name) is not None and not name.startswith("__")

    def selects_group(self, group: str) -> bool:
        return bool(self.groups) and re.fullmatch(self.groups, group) is not None

    def mirror_name(self, source_topic: str) -> str:
        """The destination topic that mirrors ``source_topic``."""
        return f"{self.prefix}{source_topic}"

    def to_value(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_value(cls, value: Mapping[str, Any]) -> MirrorLink:
        return cls(**{k: v for k, v in value.items() if k in cls.__dataclass_fields__})


def _check_pattern(pattern: str, flag: str) -> str:
    try:
        re.compile(pattern)
    except re.error as exc:
        raise InvalidConfigurationError(
            f"{flag} {pattern!r} is not accepted ({exc}); accepted: a regular expression "
            "matched against whole names, e.g. 'orders|payments' or 'eu\\..*'"
        ) from None
    return pattern


def create_link(
    root: LogRoot,
    name: str,
    *,
    source: str,
    topics: str,
    groups: str = "",
    prefix: str = "",
    source_options: Mapping[str, Any] | None = None,
    created_ms: int = 0,
) -> MirrorLink:
    """Record a new link in ``root``'s metadata log; MirrorLinkExistsError if named already."""
    if not LINK_NAME.match(name):
        raise InvalidConfigurationError(
            f"link name {name!r} is not accepted; accepted: 1-200 of A-Z a-z 0-9 . _ -"
        )
    if not source:
        raise InvalidConfigurationError("--source is required: a root URL or kafka://host:port")
    if prefix and not re.fullmatch(r"[A-Za-z0-9._-]+", prefix):
        raise InvalidConfigurationError(
            f"--prefix {prefix!r} is not accepted; accepted: A-Z a-z 0-9 . _ - (e.g. 'east.')"
        )
    if not source.startswith(KAFKA_SCHEME):
        from sparklog.storage.objectstore import normalize_url

        source = normalize_url(source)  # a relative path means the same from any runner
    if source.rstrip("/") == root.url.rstrip("/"):
        raise InvalidConfigurationError(
            f"--source {source!r} is this root: a link copies from another cluster"
        )
    link = MirrorLink(
        name=name,
        source=source,
        topics=_check_pattern(topics, "--topics"),
        groups=_check_pattern(groups, "--groups") if groups else "",
        prefix=prefix,
        source_options=dict(source_options or {}),
        created_ms=created_ms,
    )

    def build(image: MetadataImage) -> list[Record]:
        if name in image.mirror_links:
            raise MirrorLinkExistsError(f"mirror link {name!r} exists already")
        return [{"type": "mirror_link", "key": name, "value": link.to_value()}]

    root.metadata.append(build)
    return link


def list_links(root: LogRoot) -> list[MirrorLink]:
    image = root.metadata.image()
    return [MirrorLink.from_value(v) for _, v in sorted(image.mirror_links.items())]


def get_link(root: LogRoot, name: str) -> MirrorLink:
    value = root.metadata.image().mirror_links.get(name)
    if value is None:
        known = ", ".join(sorted(root.metadata.image().mirror_links)) or "none"
        raise UnknownMirrorLinkError(f"no mirror link {name!r} (links: {known})")
    return MirrorLink.from_value(value)


def _change(root: LogRoot, name: str, **changes: Any) -> MirrorLink:
    changed: list[MirrorLink] = []

    def build(image: MetadataImage) -> list[Record]:
        value = image.mirror_links.get(name)
        if value is None:
            raise UnknownMirrorLinkError(f"no mirror link {name!r}")
        link = replace(MirrorLink.from_value(value), **changes)
        changed[:] = [link]
        return [{"type": "mirror_link", "key": name, "value": link.to_value()}]

    root.metadata.append(build)
    return changed[0]


def set_paused(root: LogRoot, name: str, paused: bool) -> MirrorLink:
    """Pause or resume a link: a running ``mirror run`` stops copying / starts again."""
    return _change(root, name, paused=paused)


def delete_link(root: LogRoot, name: str) -> None:
    """Remove the link.  Its mirror topics stay, read-only, until promoted (or deleted)."""

    def build(image: MetadataImage) -> list[Record]:
        if name not in image.mirror_links:
            raise UnknownMirrorLinkError(f"no mirror link {name!r}")
        return [{"type": "mirror_link", "key": name, "value": None}]

    root.metadata.append(build)
