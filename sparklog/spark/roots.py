"""One opened storage root per (URL, storage options) per Spark Python worker.

A module of its own so that each worker imports only what its job needs: the
sink's write tasks use it without the read path's planning and offsets.
"""

from __future__ import annotations

import json
from typing import Any

from sparklog.storage import LogRoot, open_root

_roots: dict[str, LogRoot] = {}


def cached_root(url: str, storage_options: dict[str, Any]) -> LogRoot:
    """One LogRoot per (url, storage options) per worker process."""
    key = json.dumps([url, storage_options], sort_keys=True, default=str)
    root = _roots.get(key)
    if root is None:
        root = _roots[key] = open_root(url, storage_options or None)
    return root
