"""The wall clock in milliseconds, as every stored timestamp and deadline records it.

A module of its own, importing nothing heavy: metadata paths (topic documents,
group logs) stamp times without loading the record model's pyarrow and numpy.
"""

from __future__ import annotations

import time


def now_ms() -> int:
    """Milliseconds since the epoch (Kafka's timestamp unit)."""
    return int(time.time() * 1000)
