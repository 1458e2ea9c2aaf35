"""The mirror link calls on a destination root, as plain JSON-shaped documents.

One definition for every way in: ``sparklog mirror`` on a root (the embedded
backend), and a broker's Flight actions (``create_mirror_link`` ...), which run
these on the broker's root (docs/mirroring.md).  Neither imports this module:
their entry points hand them :class:`RootLinks`, the hook
:class:`sparklog.protocol.hooks.MirrorLinks` describes.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from sparklog.clock import now_ms
from sparklog.mirror import links

if TYPE_CHECKING:
    from sparklog.storage import LogRoot


def link_doc(link: links.MirrorLink) -> dict[str, Any]:
    """A link as ``mirror list``/``describe`` show it (no storage options: secrets)."""
    return {
        "name": link.name,
        "source": link.source,
        "topics": link.topics,
        "groups": link.groups,
        "prefix": link.prefix,
        "state": "paused" if link.paused else "active",
    }


def create(root: LogRoot, name: str, **link: Any) -> dict[str, Any]:
    """A new link (``link``: :func:`sparklog.mirror.links.create_link`'s keywords)."""
    made = links.create_link(root, name, created_ms=now_ms(), **link)
    return link_doc(made)


def list_all(root: LogRoot) -> list[dict[str, Any]]:
    return [link_doc(link) for link in links.list_links(root)]


def pause(root: LogRoot, name: str, paused: bool) -> dict[str, Any]:
    return link_doc(links.set_paused(root, name, paused))


def delete(root: LogRoot, name: str) -> None:
    links.delete_link(root, name)


def promote(root: LogRoot, topic: str) -> dict[str, Any]:
    """Promote ``topic``; its provenance afterwards (``link``, ``promoted_ends`` ...)."""
    from sparklog.mirror.copier import promote as promote_topic

    return dict(promote_topic(root, topic).mirror or {})


def reverse(
    root: LogRoot,
    name: str,
    reverse_name: str = "",
    source_options: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Fail back (:func:`sparklog.mirror.copier.reverse`): the reverse link, where it was
    created (``on``: the old primary) and the topics turned into its mirror topics."""
    from sparklog.mirror.copier import reverse as reverse_link

    back, topics = reverse_link(root, name, name=reverse_name, source_options=source_options)
    on = links.get_link(root, name).source
    return {**link_doc(back), "on": on, "mirror_topics": topics}


def describe(root: LogRoot, name: str) -> dict[str, Any]:
    """The link and its lag per partition; reads the source (an unreachable source is
    reported under ``source_error``, not raised)."""
    from sparklog.mirror.copier import lag

    found = links.get_link(root, name)
    out = link_doc(found)
    try:
        if found.kafka_source:
            from sparklog.mirror.kafka_source import KafkaMirror

            source = KafkaMirror(root, found)
            try:
                lags = source.lag()
                if source.stopped:
                    out["stopped"] = dict(source.stopped)
            finally:
                source.close()
        else:
            lags = lag(root, found)
        out["partitions"] = [
            {
                "topic": x.topic,
                "partition": x.partition,
                "source_end": x.source_end,
                "mirror_end": x.mirror_end,
                "lag_records": x.lag_records,
                "lag_seconds": round(x.lag_seconds, 3),
                "gaps": [list(g) for g in x.gaps],
            }
            for x in lags
        ]
    except Exception as exc:  # the source unreachable: say why, keep going
        out["source_error"] = f"{type(exc).__name__}: {exc}"
        out["partitions"] = []
    return out


class RootLinks:
    """The calls above bound to one destination root, plus running a link: the mirror hook
    (:class:`sparklog.protocol.hooks.MirrorLinks`) a broker or an embedded backend is handed
    by its entry point, so neither imports the mirroring application."""

    def __init__(self, root: LogRoot) -> None:
        self.root = root

    def create(self, name: str, **link: Any) -> dict[str, Any]:
        return create(self.root, name, **link)

    def list_all(self) -> list[dict[str, Any]]:
        return list_all(self.root)

    def describe(self, name: str) -> dict[str, Any]:
        return describe(self.root, name)

    def pause(self, name: str, paused: bool) -> dict[str, Any]:
        return pause(self.root, name, paused)

    def delete(self, name: str) -> None:
        delete(self.root, name)

    def promote(self, topic: str) -> dict[str, Any]:
        return promote(self.root, topic)

    def reverse(
        self,
        name: str,
        reverse_name: str = "",
        source_options: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        return reverse(self.root, name, reverse_name, source_options)

    def run(self, link: str, stop: threading.Event) -> None:
        """Copy ``link`` into this root until ``stop`` is set or the link is deleted."""
        from sparklog.mirror.runner import run

        run(self.root, link, stop=stop)
