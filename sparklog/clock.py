"""The wall clock in milliseconds, as every stored timestamp and deadline records it.

The one copy in the package (storage, groups, broker, clients and connectors all
call :func:`now_ms`); code that must be tested against another clock takes a
``clock_ms`` callable defaulting to it, as ``MetaLog`` and the broker's
``Cluster`` do, instead of reading a test hook.  Below every layer (like
``errors.py``) and importing nothing heavy, so metadata paths stamp times
without loading pyarrow or numpy.
"""

from __future__ import annotations

import time
from collections.abc import Callable

#: a source of milliseconds since the epoch (what components take to be testable)
Clock = Callable[[], int]


def now_ms() -> int:
    """Milliseconds since the epoch (Kafka's timestamp unit)."""
    return int(time.time() * 1000)
