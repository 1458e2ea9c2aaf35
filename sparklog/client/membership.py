"""The consumer's side of Kafka's classic group protocol: join, sync, heartbeat, leave.

A background thread heartbeats every ``heartbeat_interval_ms``; when the
coordinator answers "rebalance in progress" (a member came or went) it flags a
re-join, which the next ``poll`` performs: revoke callbacks (eager protocol),
commit, join, the leader assigns with the configured strategy, sync, assign
callbacks.  Calls to the backend are serialised by one lock.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence

from sparklog.client.transports.base import Backend
from sparklog.client.types import OffsetAndMetadata
from sparklog.errors import CommitFailedError, GroupError, SparklogError, UnknownMemberIdError
from sparklog.topic_partition import TopicPartition

log = logging.getLogger(__name__)


class GroupMembership:
    """One consumer's membership of one group."""

    def __init__(
        self,
        backend: Backend,
        group: str,
        *,
        strategy: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        heartbeat_interval_ms: int | None,
    ) -> None:
        self.backend = backend
        self.group = group
        self.strategy = strategy
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.heartbeat_interval_s = (heartbeat_interval_ms or session_timeout_ms // 3) / 1000
        self.member_id = ""
        self.generation = -1
        self.topics: list[str] = []
        self.lock = threading.RLock()
        self.rejoin_needed = True
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def active(self) -> bool:
        return self.generation >= 0 and not self.rejoin_needed

    def join(self, topics: Sequence[str]) -> list[TopicPartition]:
        """(Re-)join with ``topics``; returns this member's assignment of the new generation."""
        with self.lock:
            self.topics = sorted(set(topics))
            while True:
                try:
                    result = self.backend.join_group(
                        self.group,
                        self.member_id,
                        self.topics,
                        self.strategy,
                        self.session_timeout_ms,
                        self.rebalance_timeout_ms,
                    )
                    self.member_id, self.generation = result.member_id, result.generation
                    # The coordinator computes the assignment with the group's strategy
                    # (sticky included, from the previous generation); the leader accepts it.
                    assigned = self.backend.sync_group(self.group, self.generation, self.member_id)
                except GroupError as exc:
                    if isinstance(exc, UnknownMemberIdError):
                        self.member_id = ""  # expelled: join as a new member
                    if exc.retriable or isinstance(exc, CommitFailedError):
                        log.info("group %s: re-joining after %s", self.group, exc)
                        continue
                    raise
                self.rejoin_needed = False
                self._start_heartbeats()
                return [TopicPartition(t, int(p)) for t, p in assigned]

    def _start_heartbeats(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._stop.clear()
            self._thread = threading.Thread(
                target=self._heartbeat_loop, name=f"sparklog-heartbeat-{self.group}", daemon=True
            )
            self._thread.start()

    def _heartbeat_loop(self) -> None:
        while not self._stop.wait(self.heartbeat_interval_s):
            if self.rejoin_needed:
                continue
            try:
                with self.lock:
                    if self.rejoin_needed or self.generation < 0:
                        continue
                    self.backend.heartbeat(self.group, self.generation, self.member_id)
            except GroupError as exc:
                log.info("group %s: %s; will re-join", self.group, exc)
                self.rejoin_needed = True
            except SparklogError as exc:
                log.warning("group %s: heartbeat failed: %s", self.group, exc)

    def commit(self, offsets: Mapping[TopicPartition, OffsetAndMetadata]) -> None:
        with self.lock:
            self.backend.commit_offsets(self.group, self.generation, self.member_id, offsets)

    def leave(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.heartbeat_interval_s + 1)
        with self.lock:
            if self.member_id:
                try:
                    self.backend.leave_group(self.group, self.member_id)
                except SparklogError as exc:
                    log.warning("group %s: leave failed: %s", self.group, exc)
            self.generation = -1
            self.member_id = ""
            self.rejoin_needed = True


Callback = Callable[[list], None]
