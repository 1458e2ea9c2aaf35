"""The one retry loop (``sparklog.retry``): jittered exponential backoff, bounded attempts and
deadline, and one give-up error per condition whatever the document that lost its races."""

from __future__ import annotations

import uuid

import pytest

from sparklog import retry
from sparklog.errors import (
    BrokerNotAvailableError,
    CommitConflictError,
    InvalidConfigError,
)
from sparklog.groups.coordinator import _MemoryStateDoc, _StateDoc
from sparklog.storage import make_batch, open_root
from sparklog.storage.documents import VersionedDocument


class Flaky:
    """Fails with ``error`` ``failures`` times, then returns ``"done"``."""

    def __init__(self, failures: int, error: Exception) -> None:
        self.failures, self.error, self.calls = failures, error, 0

    def __call__(self) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error
        return "done"


def test_retriable_errors_are_retried_with_exponential_full_jitter_backoff() -> None:
    waits: list[float] = []
    call = Flaky(6, BrokerNotAvailableError("down"))
    out = retry.retrying(
        call, backoff_initial_ms=10, backoff_max_ms=160, deadline_ms=60_000, sleep=waits.append
    )
    assert out == "done" and call.calls == 7 and len(waits) == 6
    caps = [0.010, 0.020, 0.040, 0.080, 0.160, 0.160]  # doubling, bounded by backoff_max_ms
    assert all(0 <= w <= cap for w, cap in zip(waits, caps, strict=True))


def test_the_wait_is_drawn_uniformly_under_the_cap(monkeypatch) -> None:
    drawn: list[tuple[float, float]] = []

    def uniform(lo: float, hi: float) -> float:
        drawn.append((lo, hi))
        return hi / 2

    monkeypatch.setattr(retry.random, "uniform", uniform)
    waits: list[float] = []
    retry.retrying(
        Flaky(3, BrokerNotAvailableError("down")), backoff_initial_ms=20, sleep=waits.append
    )
    assert drawn == [(0, 20), (0, 40), (0, 80)]  # full jitter: anywhere from 0 to the cap
    assert waits == [0.010, 0.020, 0.040]


def test_non_retriable_errors_propagate_at_once() -> None:
    call = Flaky(5, InvalidConfigError("bad"))
    with pytest.raises(InvalidConfigError):
        retry.retrying(call, sleep=lambda s: None)
    assert call.calls == 1


def test_attempts_max_and_deadline_end_the_loop_with_the_last_error_as_itself() -> None:
    call = Flaky(100, BrokerNotAvailableError("down"))
    with pytest.raises(BrokerNotAvailableError):
        retry.retrying(call, attempts_max=4, sleep=lambda s: None)
    assert call.calls == 4
    call = Flaky(100, BrokerNotAvailableError("down"))
    with pytest.raises(BrokerNotAvailableError):  # no wait may end past the deadline
        retry.retrying(call, deadline_ms=0, sleep=lambda s: None)
    assert call.calls == 1


def test_before_retry_runs_between_attempts_with_the_error_that_failed() -> None:
    seen: list[BaseException] = []
    error = BrokerNotAvailableError("down")
    retry.retrying(Flaky(2, error), before_retry=seen.append, sleep=lambda s: None)
    assert seen == [error, error]


def _always_losing(monkeypatch, store) -> list[str]:
    """Every create-only write on ``store`` loses its race; returns the keys tried."""
    tried: list[str] = []

    def create(key: str, data: bytes) -> bool:
        tried.append(key)
        return False

    monkeypatch.setattr(store, "create", create)
    monkeypatch.setattr(retry.time, "sleep", lambda s: None)
    return tried


def test_a_versioned_document_that_keeps_losing_gives_up_with_commit_conflict(monkeypatch) -> None:
    root = open_root(f"memory://retry-{uuid.uuid4().hex}")
    doc = VersionedDocument(root.store, "docs/d")
    tried = _always_losing(monkeypatch, root.store)
    with pytest.raises(CommitConflictError, match="gave up after 5 lost races"):
        doc.update(lambda d: {"n": 1}, attempts=5)
    assert len(tried) == 5


@pytest.mark.parametrize("kind", [_StateDoc, _MemoryStateDoc])
def test_a_group_state_change_that_keeps_losing_gives_up_with_the_same_error(
    monkeypatch, kind
) -> None:
    """It was KafkaStorageError for group state, CommitConflictError for other documents."""
    root = open_root(f"memory://retry-{uuid.uuid4().hex}")
    state = kind(root, "g")
    tried = _always_losing(monkeypatch, root.store)
    with pytest.raises(CommitConflictError, match="gave up after 7 lost races"):
        state.update(lambda d: {**d, "generation": d.get("generation", 0) + 1}, attempts=7)
    assert len(tried) == 7


def test_a_log_commit_that_keeps_losing_gives_up_with_the_same_error(monkeypatch) -> None:
    root = open_root(f"memory://retry-{uuid.uuid4().hex}")
    root.create_topic("t", 1)
    topic = root.topic("t")
    topic.append(0, make_batch([b"a"]))
    store = topic.store
    real_create = store.create
    commits: list[str] = []

    def create(key: str, data: bytes) -> bool:  # every commit loses; other objects are written
        if key.rsplit("/", 1)[-1].split(".")[0].isdigit() and key.endswith(".json"):
            commits.append(key)
            return False
        return real_create(key, data)

    monkeypatch.setattr(store, "create", create)
    monkeypatch.setattr(retry.time, "sleep", lambda s: None)
    with pytest.raises(CommitConflictError, match=r"log .*: commit: gave up after \d+ lost races"):
        topic.append(0, make_batch([b"b"]))
    assert len(commits) > 1


def test_the_broker_client_retries_through_the_one_loop(monkeypatch) -> None:
    """NOT_LEADER drops cached leaders between attempts; group errors are the caller's to
    handle; an unknown outcome is retried only for idempotent calls."""
    from sparklog.client.transports.flight_client import BrokerClient
    from sparklog.errors import CommitStateUnknownError, NotLeaderError, RebalanceInProgressError

    monkeypatch.setattr(retry.time, "sleep", lambda s: None)
    client = BrokerClient("127.0.0.1:9", retry_timeout_ms=60_000)
    try:
        cleared: list[int] = []
        client._meta["t"] = "cached"  # type: ignore[assignment]

        def flaky_leader() -> str:
            cleared.append(len(client._meta))
            if len(cleared) < 3:
                client._meta["t"] = "cached"  # type: ignore[assignment]
                raise NotLeaderError("moved")
            return "done"

        assert client._retrying(flaky_leader) == "done"
        assert cleared == [1, 0, 0]  # each retry started with the cache dropped

        rebalancing = Flaky(5, RebalanceInProgressError("join again"))
        with pytest.raises(RebalanceInProgressError):
            client._retrying(rebalancing)
        assert rebalancing.calls == 1

        unknown = Flaky(2, CommitStateUnknownError("answer lost"))
        with pytest.raises(CommitStateUnknownError):
            client._retrying(unknown)
        assert unknown.calls == 1
        unknown = Flaky(2, CommitStateUnknownError("answer lost"))
        assert client._retrying(unknown, idempotent=True) == "done" and unknown.calls == 3
    finally:
        client.close()
