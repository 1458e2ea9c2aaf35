"""Backends: how the client reaches a storage root (embedded) or brokers."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from sparklog.client.address import parse_address
from sparklog.client.transports.base import Backend
from sparklog.storage_options import merge_options, storage_options_from_env

if TYPE_CHECKING:
    from sparklog.protocol.hooks import MirrorLinks
    from sparklog.storage.catalog import LogRoot


def open_backend(
    address: str | None = None,
    storage_options: Mapping[str, Any] | None = None,
    *,
    retry_timeout_ms: int | None = None,
    create: bool = True,
    security: Mapping[str, Any] | None = None,
    mirror: Callable[[LogRoot], MirrorLinks] | None = None,
) -> Backend:
    """The backend for ``address`` (default ``$SPARKLOG_ADDRESS``).

    ``retry_timeout_ms`` bounds how long broker calls retry an unreachable or
    leaderless cluster before failing (default 30 s).  ``create=False`` opens a
    storage root read-only: a missing root is an error instead of being created.
    ``security``: TLS and SASL settings for brokers, kafka-python's names
    (:mod:`sparklog.client.security`; unset ones from ``SPARKLOG_<NAME>``).
    ``mirror``: the mirroring application's hook for a storage root's mirror link calls
    (a broker runs them with its own); without it they are refused on a root.
    """
    parsed = parse_address(address)
    if parsed.bootstrap is not None:
        from sparklog.client.security import security_of
        from sparklog.client.transports.flight import BrokerBackend

        return BrokerBackend(
            parsed.bootstrap,
            retry_timeout_ms=retry_timeout_ms or 30_000,
            security=security_of(security),
        )
    from sparklog.client.transports.embedded import EmbeddedBackend

    assert parsed.root is not None
    return EmbeddedBackend(
        parsed.root,
        merge_options(storage_options_from_env(), storage_options),
        create=create,
        mirror=mirror,
    )


__all__ = ["Backend", "open_backend"]
