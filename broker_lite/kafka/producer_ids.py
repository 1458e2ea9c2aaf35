"""Producer ids unique across brokers: blocks claimed with a create-only file in the root.

A broker claims block ``n`` (ids ``n*BLOCK_SIZE+1 .. (n+1)*BLOCK_SIZE``) by
creating ``kafka/producer-id-blocks/<n>.json``; a create that loses a race
moves on to the next block.  Claimed blocks are never reused, so no two
producers (on any broker, before or after restarts) share an id.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from sparklog.clock import now_ms
from sparklog.errors import SparklogError

PREFIX = "kafka/producer-id-blocks"
BLOCK_SIZE = 1000


class ProducerIdAllocator:
    def __init__(self, store: Any, broker_id: int) -> None:
        self.store = store
        self.broker_id = broker_id
        self._lock = threading.Lock()
        self._next = 0
        self._end = 0  # exclusive

    def _claim_block(self) -> None:
        try:
            names = self.store.list_names(PREFIX)
            claimed = [int(n.split(".")[0]) for n in names if n.split(".")[0].isdigit()]
            block = max(claimed, default=-1) + 1
            body = json.dumps({"broker_id": self.broker_id, "ms": now_ms()})
            while not self.store.create(f"{PREFIX}/{block:012d}.json", body.encode()):
                block += 1
        except SparklogError:
            raise
        self._next = block * BLOCK_SIZE + 1
        self._end = (block + 1) * BLOCK_SIZE + 1

    def allocate(self) -> int:
        """The next unused producer id."""
        with self._lock:
            if self._next >= self._end:
                self._claim_block()
            pid = self._next
            self._next += 1
            return pid
