"""ACL checks of Kafka requests against the metadata image (``authorizer = "acl"``).

The model (bindings, filters, Kafka's decision) is :mod:`sparklog.security.acls`;
this module applies it to a request's principal and host.  Without an
authorizer every check allows.
"""

from __future__ import annotations

from typing import Any

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
    authorize,
    binding,
    key,
    matches_filter,
    super_users,
)


def enabled(broker: Any) -> bool:
    return str(broker.config.authorizer) == "acl"


def allowed(ctx: Any, operation: str, resource_type: str, name: str) -> bool:
    """Whether the request's principal may do ``operation`` on the resource."""
    broker = ctx.broker
    if not enabled(broker):
        return True
    session = getattr(ctx, "session", None)
    principal = session.principal if session is not None else ANONYMOUS
    host = session.host if session is not None else "*"
    return authorize(
        broker.root.metadata.image().acls.values(),
        principal,
        host,
        operation,
        resource_type,
        name,
        supers=super_users(broker.config),
        allow_if_no_acl=bool(broker.config.allow_everyone_if_no_acl_found),
    )


def check(ctx: Any, operation: str, resource_type: str, name: str) -> None:
    """Raise the resource type's authorisation error unless :func:`allowed`."""
    if not allowed(ctx, operation, resource_type, name):
        raise DENIED[resource_type](
            f"{resource_type.lower().replace('_', ' ')} {name!r}: not authorized to "
            f"{operation.lower().replace('_', ' ')}"
        )
