"""Damaged stored data met while serving: one ERROR per damaged file, every meeting counted.

Any listener path that meets a ``CorruptRecordError`` (a torn or missing shard
commit, a damaged snapshot, group-log entry or metadata record) reports it
here, so the operator hears of it once, naming the file (and through its path
the topic and shard), however many clients keep asking; the count of every
meeting is the metric ``sparklog_damaged_storage_seen``.
"""

from __future__ import annotations

import logging
import threading

from sparklog.errors import CorruptRecordError

log = logging.getLogger("sparklog.broker_lite.broker")

#: damage already logged (each damaged file is logged once, not once per request)
_reported: set[str] = set()
_REPORTED_MAX = 1024
_lock = threading.Lock()
_seen = 0


def report_damage(exc: CorruptRecordError) -> None:
    """Count a meeting with damaged stored data; log it as an ERROR the first time."""
    global _seen
    message = str(exc)
    with _lock:
        _seen += 1
        if message in _reported:
            return
        if len(_reported) < _REPORTED_MAX:
            _reported.add(message)
    log.error("damaged storage: %s", message)


def damage_seen() -> int:
    """How many times this process met damaged stored data."""
    return _seen
