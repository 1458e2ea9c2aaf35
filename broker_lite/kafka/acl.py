"""ACL checks of Kafka requests against the metadata image (``authorizer = "acl"``).

The model (bindings, filters, Kafka's decision) is :mod:`sparklog.security.acls`;
this module applies it to a request's principal and host.  Without an
authorizer every check allows.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import TYPE_CHECKING

from sparklog.security.acls import (  # noqa: F401  (re-exported for the Kafka layer)
    ANONYMOUS,
    BY_NUMBER,
    CLUSTER_DENIED,
    CLUSTER_NAME,
    DENIED,
    OPERATIONS,
    PATTERN_TYPES,
    PERMISSIONS,
    RESOURCE_TYPES,
    binding,
    decide,
    key,
    matches_filter,
    super_users,
)

if TYPE_CHECKING:
    from sparklog.broker_lite.kafka.context import BrokerView, HandlerContext


def enabled(broker: BrokerView) -> bool:
    return str(broker.config.authorizer) == "acl"


def _principal(ctx: HandlerContext) -> str:
    session = getattr(ctx, "session", None)
    return session.principal if session is not None else ANONYMOUS


def checked(ctx: HandlerContext) -> bool:
    """Whether the request's checks run: with an authorizer, and for User:ANONYMOUS on a
    broker where some listener authenticates (it may not change the cluster there)."""
    broker = ctx.broker
    return enabled(broker) or (bool(broker.config.authenticates) and _principal(ctx) == ANONYMOUS)


def allowed(ctx: HandlerContext, operation: str, resource_type: str, name: str) -> bool:
    """Whether the request's principal may do ``operation`` on the resource."""
    broker = ctx.broker
    if not checked(ctx):
        return True
    session = getattr(ctx, "session", None)
    return decide(
        broker.config,
        broker.root.metadata.image().acls.values() if enabled(broker) else (),
        _principal(ctx),
        session.host if session is not None else "*",
        operation,
        resource_type,
        name,
    )


def allowed_for(
    broker: BrokerView, principal: str, host: str, operation: str, resource_type: str, name: str
) -> bool:
    """:func:`allowed` for a principal met earlier (a group member's), not a request's."""
    ctx = SimpleNamespace(broker=broker, session=SimpleNamespace(principal=principal, host=host))
    return allowed(ctx, operation, resource_type, name)


def check(ctx: HandlerContext, operation: str, resource_type: str, name: str) -> None:
    """Raise the resource type's authorisation error unless :func:`allowed`."""
    if not allowed(ctx, operation, resource_type, name):
        raise DENIED[resource_type](
            f"{resource_type.lower().replace('_', ' ')} {name!r}: not authorized to "
            f"{operation.lower().replace('_', ' ')}"
        )
