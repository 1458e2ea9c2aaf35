"""FindCoordinator v4+ (KIP-699): several keys in one request, each answered as v3 would.

The one-key answer stays in :mod:`~sparklog.broker_lite.kafka.groups`; this only
fans a batched request out to it and gathers the answers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from kio.index import load_response_schema

from sparklog.broker_lite.kafka import groups
from sparklog.broker_lite.kafka.messages import make, nested

if TYPE_CHECKING:
    from sparklog.broker_lite.kafka.api_types import (
        FindCoordinatorRequest,
        FindCoordinatorRequestBatched,
        FindCoordinatorRequestOneKey,
        FindCoordinatorResponse,
    )
    from sparklog.broker_lite.kafka.context import HandlerContext


#: the last version with one key per request
ONE_KEY_VERSION = 3


def handle_find_coordinator(
    ctx: HandlerContext, request: FindCoordinatorRequest
) -> FindCoordinatorResponse:
    if ctx.api_version <= ONE_KEY_VERSION:
        return groups.handle_find_coordinator(ctx, cast("FindCoordinatorRequestOneKey", request))
    batched = cast("FindCoordinatorRequestBatched", request)
    cls = load_response_schema(10, ctx.api_version)
    coordinator_cls = nested(cls, "Coordinator")
    found = []
    for key in batched.coordinator_keys:
        error, message, node, host, port = groups.coordinator_of(ctx.broker, key, batched.key_type)
        found.append(
            make(
                coordinator_cls,
                key=key,
                node_id=node,
                host=host,
                port=port,
                error_code=error,
                error_message=message,
            )
        )
    return make(cls, throttle_time=0, coordinators=tuple(found))
