"""FindCoordinator v4+ (KIP-699): several keys in one request, each answered as v3 would.

The one-key answer stays in :mod:`~sparklog.broker_lite.kafka.groups`; this only
fans a batched request out to it and gathers the answers.
"""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace
from typing import Any

from kio.index import load_response_schema

from sparklog.broker_lite.kafka import groups
from sparklog.broker_lite.kafka.messages import make, nested

#: the last version with one key per request
ONE_KEY_VERSION = 3


def handle_find_coordinator(ctx: Any, request: Any) -> Any:
    if ctx.api_version <= ONE_KEY_VERSION:
        return groups.handle_find_coordinator(ctx, request)
    cls = load_response_schema(10, ctx.api_version)
    coordinator_cls = nested(cls, "Coordinator")
    one = dataclasses.replace(ctx, api_version=ONE_KEY_VERSION)
    found = []
    for key in request.coordinator_keys:
        answer = groups.handle_find_coordinator(
            one, SimpleNamespace(key=key, key_type=request.key_type)
        )
        found.append(
            make(
                coordinator_cls,
                key=key,
                node_id=answer.node_id,
                host=answer.host,
                port=answer.port,
                error_code=answer.error_code,
                error_message=answer.error_message,
            )
        )
    return make(cls, throttle_time=0, coordinators=tuple(found))
