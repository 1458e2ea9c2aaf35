"""A consumer-group member loop for tests: join, sync, heartbeat; re-join when told to.

It drives any object with the group methods (GroupCoordinator in-process, or a
client backend: BrokerBackend over the wire), as a real consumer's background thread would.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from sparklog.errors import IllegalGenerationError, RebalanceInProgressError, UnknownMemberError


class Member:
    def __init__(
        self,
        api: Any,
        group: str,
        topics: list[str],
        strategy: str = "range",
        session_timeout_ms: int = 3000,
        rebalance_timeout_ms: int = 3000,
        heartbeat_s: float = 0.05,
    ) -> None:
        self.api, self.group, self.topics, self.strategy = api, group, topics, strategy
        self.session_timeout_ms, self.rebalance_timeout_ms = (
            session_timeout_ms,
            rebalance_timeout_ms,
        )
        self.heartbeat_s = heartbeat_s
        self.member_id = ""
        self.generation = -1
        self.assignment: list[tuple[str, int]] = []
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Member:
        self._thread.start()
        return self

    def _run(self) -> None:
        need_join = True
        while not self._stop.is_set():
            try:
                if need_join:
                    j = self.api.join_group(
                        self.group,
                        self.member_id,
                        self.topics,
                        self.strategy,
                        self.session_timeout_ms,
                        self.rebalance_timeout_ms,
                    )
                    self.member_id = j.member_id
                    assignment = self.api.sync_group(self.group, j.generation, j.member_id)
                    self.generation, self.assignment = j.generation, sorted(assignment)
                    need_join = False
                self._stop.wait(self.heartbeat_s)
                if not self._stop.is_set():
                    self.api.heartbeat(self.group, self.generation, self.member_id)
            except (RebalanceInProgressError, IllegalGenerationError):
                need_join = True
            except UnknownMemberError:
                self.member_id, need_join = "", True
            except Exception as exc:  # keep going, but let the test see it
                self.errors.append(exc)
                self._stop.wait(0.1)
                need_join = True

    def stop(self, leave: bool = True) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        if leave and self.member_id:
            self.api.leave_group(self.group, self.member_id)


def wait_stable(members: list[Member], partitions: int, timeout_s: float = 30) -> int:
    """Wait until all members share one generation and own every partition once."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        gens = {m.generation for m in members}
        owned = sorted(tp for m in members for tp in m.assignment)
        if len(gens) == 1 and -1 not in gens and len(owned) == partitions == len(set(owned)):
            return gens.pop()
        time.sleep(0.02)
    states = [(m.member_id, m.generation, m.assignment, m.errors) for m in members]
    raise AssertionError(f"group never settled: {states}")
