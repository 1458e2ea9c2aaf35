"""Count an ObjectStore's requests by kind (GET, PUT, LIST, DELETE), on any backend.

Request counts are what the object-store bill is made of; tests assert them
through this wrapper (a store's own instance methods are wrapped, so every
caller holding that store object is counted) rather than through times.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable
from typing import Any

from sparklog.storage.objectstore import ObjectStore

#: store method -> request kind (get_many counts one GET per key)
KINDS = {
    "get": "GET",
    "get_or_none": "GET",
    "get_buffer": "GET",
    "get_range": "GET",
    "get_tail": "GET",
    "exists": "GET",
    "create": "PUT",
    "create_streamed": "PUT",
    "put": "PUT",
    "delete": "DELETE",
    "list_objects": "LIST",
    "list_names": "LIST",
}


class RequestCounter:
    """``counter = RequestCounter(store)``; ``counter.counts`` by kind; ``counter.total``."""

    def __init__(self, store: ObjectStore) -> None:
        self.counts: collections.Counter[str] = collections.Counter()
        # a store method calling another (get_many -> get_or_none) is one request
        self._depth = threading.local()
        for name, kind in KINDS.items():
            setattr(store, name, self._wrap(getattr(store, name), kind))
        store.get_many = self._wrap_many(store.get_many)  # type: ignore[method-assign]

    def _wrap(self, call: Callable[..., Any], kind: str) -> Callable[..., Any]:
        def counted(*args: Any, **kwargs: Any) -> Any:
            return self._outermost(kind, 1, lambda: call(*args, **kwargs))

        return counted

    def _wrap_many(self, call: Callable[..., Any]) -> Callable[..., Any]:
        def counted(keys: Any) -> Any:
            keys = list(keys)
            return self._outermost("GET", len(keys), lambda: call(keys))

        return counted

    def _outermost(self, kind: str, n: int, call: Callable[[], Any]) -> Any:
        depth = getattr(self._depth, "n", 0)
        if depth == 0:
            self.counts[kind] += n
        self._depth.n = depth + 1
        try:
            return call()
        finally:
            self._depth.n = depth

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def reset(self) -> None:
        self.counts.clear()
