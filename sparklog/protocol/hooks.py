"""The narrow hooks a broker, or an embedded root, is handed to serve an application's actions.

The broker and the client never import an application (DESIGN.md §1): a process that runs a
broker and mirror links (``sparklog broker start``, ``python -m sparklog.broker_lite``) or a
command that manages links on a storage root (``sparklog mirror``) hands them an object of
this shape, built by the mirroring application (:class:`sparklog.mirror.admin.RootLinks`).
Without one, the mirror link actions are refused and ``mirror_links`` cannot be configured.

The hook is bound to one destination root: the broker and the embedded backend build it from
their root with the factory they were handed, ``Callable[[LogRoot], MirrorLinks]``.

A process handed no hook (a Python program's own ``Admin(root)`` or ``Broker(config)``)
gets the mirroring application that ships with sparklog, loaded by name on the first mirror
call (:func:`mirror_links_factory`, as fsspec loads its known implementations): its calls
keep working, and a broker that never serves one never imports the application.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from sparklog.storage import LogRoot

#: the mirroring application that ships with sparklog, as ``module:factory``
DEFAULT_MIRROR_LINKS = "sparklog.mirror.admin:RootLinks"


class MirrorLinks(Protocol):
    """The mirror link actions on one destination root (the Flight actions
    ``create_mirror_link`` ... ``reverse_mirror_link``; results are JSON-shaped documents),
    and running one link's copier until ``stop`` is set (broker key ``mirror_links``)."""

    def create(self, name: str, **link: Any) -> dict[str, Any]: ...

    def list_all(self) -> list[dict[str, Any]]: ...

    def describe(self, name: str) -> dict[str, Any]: ...

    def pause(self, name: str, paused: bool) -> dict[str, Any]: ...

    def delete(self, name: str) -> None: ...

    def promote(self, topic: str) -> dict[str, Any]: ...

    def reverse(
        self,
        name: str,
        reverse_name: str = "",
        source_options: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]: ...

    def run(self, link: str, stop: threading.Event) -> None: ...


def mirror_links_factory(
    handed: Callable[[LogRoot], MirrorLinks] | None,
) -> Callable[[LogRoot], MirrorLinks] | None:
    """The hook a process was handed, else the shipped application's (loaded by name);
    None when that cannot be imported (an install without it)."""
    if handed is not None:
        return handed
    module, _, name = DEFAULT_MIRROR_LINKS.partition(":")
    try:
        factory: Callable[[LogRoot], MirrorLinks] = getattr(importlib.import_module(module), name)
    except ImportError:
        return None
    return factory
