"""One partition and one shard as this broker holds them, and the storage call wrapper.

:class:`ShardState` is a shard's writer and reader logs with our leader epoch;
:class:`PartitionState` a partition's views over them.  Apart from
:mod:`~sparklog.broker_lite.broker_state`, which caches them, so the transaction
coordinator's host (:mod:`~sparklog.broker_lite.transactions.host`) can name them
without importing the broker's roles.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sparklog import errors
from sparklog.broker_lite.damage import report_damage
from sparklog.broker_lite.tailcache import PartitionKey
from sparklog.storage import PartitionLog
from sparklog.storage.log import ShardLog


@dataclass
class ShardState:
    """What this broker holds for one shard log: the writer, the reader, our leader epoch."""

    key: tuple[str, str, int]  # (topic, topic id, shard)
    log: ShardLog
    reader: ShardLog
    lock: threading.Lock = field(default_factory=threading.Lock)
    reader_lock: threading.Lock = field(default_factory=threading.Lock)
    epoch: int | None = None  # our leader epoch once we bumped it
    refreshed: float = 0.0  # monotonic time of the writer log's last refresh

    def refresh(self, min_interval_s: float = 0.0) -> None:
        """Re-read the log (caller holds ``lock``), at most once per ``min_interval_s``."""
        now = time.monotonic()
        if min_interval_s and now - self.refreshed < min_interval_s:
            return
        self.log.refresh()
        self.refreshed = time.monotonic()


@dataclass
class PartitionState:
    """One partition as this broker sees it: views over its shard's writer and reader logs."""

    key: PartitionKey
    shard: ShardState
    log: PartitionLog
    reader: PartitionLog
    changed: threading.Condition = field(default_factory=threading.Condition)

    @property
    def lock(self) -> threading.Lock:
        return self.shard.lock

    @property
    def reader_lock(self) -> threading.Lock:
        return self.shard.reader_lock

    @property
    def epoch(self) -> int | None:
        return self.shard.epoch

    @epoch.setter
    def epoch(self, value: int | None) -> None:
        self.shard.epoch = value

    @property
    def refreshed(self) -> float:
        return self.shard.refreshed

    def refresh(self, min_interval_s: float = 0.0) -> None:
        """Re-read the shard's log (caller holds ``lock``)."""
        self.shard.refresh(min_interval_s)


def storage_call(call: Callable[[], Any]) -> Any:
    """Run a storage call; damaged stored data is logged as an ERROR (once per file).

    The error itself goes on to the caller (and the client, as CORRUPT_MESSAGE:
    non-retriable, naming the file) with its cause kept.
    """
    try:
        return call()
    except errors.CorruptRecordError as exc:
        report_damage(exc)
        raise
