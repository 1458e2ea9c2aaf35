"""The one retry loop of sparklog (tenacity's): retriable errors only, full-jitter backoff.

Only errors whose ``retriable`` is true are retried (``SparklogError`` subclasses
say so; nothing else is an outage) unless the caller widens ``retry_if`` (an
idempotent produce also retries an unknown outcome). Programming errors and
:class:`~sparklog.errors.CommitStateUnknownError` propagate at once. The wait
before attempt *n* + 1 is uniform in ``[0, min(backoff_max, backoff_initial * 2**(n-1))]``;
the loop gives up (re-raising the last error as itself) at ``attempts_max`` or
when the next wait would end past ``deadline_ms``. The first attempt runs
without any set-up, so the uncontended path costs one call.

One give-up error per condition: an optimistic write that keeps losing its race
(:class:`LostRace`, retried by :func:`until_won`) surfaces as
:class:`~sparklog.errors.CommitConflictError` whatever the document.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import TypeVar

from sparklog.errors import CommitConflictError

T = TypeVar("T")

#: defaults of :func:`retrying`: first wait, longest wait, overall deadline
BACKOFF_INITIAL_MS = 10
BACKOFF_MAX_MS = 1_000
DEADLINE_MS = 30_000


def is_retriable(exc: BaseException) -> bool:
    """True for errors that declare ``retriable`` (an outage, a lost race), else false."""
    return bool(getattr(exc, "retriable", False))


class LostRace(CommitConflictError):
    """One attempt of an optimistic write lost its race (another writer won the version).

    Raised by an attempt to ask :func:`until_won` for another; never leaves it
    (a give-up is a plain :class:`~sparklog.errors.CommitConflictError`)."""


def backoff_s(attempt: int, initial_ms: float, max_ms: float) -> float:
    """The wait after failed attempt ``attempt`` (1-based): full jitter under an exponential cap."""
    cap_ms = min(max_ms, initial_ms * 2 ** min(attempt - 1, 60))
    return random.uniform(0, cap_ms) / 1000


def retrying(
    call: Callable[[], T],
    *,
    deadline_ms: int = DEADLINE_MS,
    attempts_max: int | None = None,
    backoff_initial_ms: float = BACKOFF_INITIAL_MS,
    backoff_max_ms: float = BACKOFF_MAX_MS,
    retry_if: Callable[[BaseException], bool] = is_retriable,
    before_retry: Callable[[BaseException], None] | None = None,
    sleep: Callable[[float], object] | None = None,
) -> T:
    """Call ``call`` until it returns, a non-retriable error, ``attempts_max`` or the deadline.

    ``before_retry`` runs after the backoff sleep and before the next attempt
    (refresh metadata or re-read state there, so the next attempt uses a fresh view).
    ``sleep`` (default :func:`time.sleep`, looked up per call) is injectable: tests
    count and measure the waits without a clock.  The loop is tenacity's; the
    first attempt runs before it is built (and before tenacity is imported, which
    costs ~0.1 s, paid by every process that imports sparklog.storage).
    """
    deadline = time.monotonic() + deadline_ms / 1000
    try:
        return call()
    except BaseException as exc:
        if not retry_if(exc) or (attempts_max is not None and attempts_max <= 1):
            raise
        first = exc
    return _retry_after_first_failure(
        call,
        first,
        deadline=deadline,
        attempts_max=attempts_max,
        backoff_initial_ms=backoff_initial_ms,
        backoff_max_ms=backoff_max_ms,
        retry_if=retry_if,
        before_retry=before_retry,
        sleep=sleep or time.sleep,
    )


def _retry_after_first_failure(
    call: Callable[[], T],
    first: BaseException,
    *,
    deadline: float,
    attempts_max: int | None,
    backoff_initial_ms: float,
    backoff_max_ms: float,
    retry_if: Callable[[BaseException], bool],
    before_retry: Callable[[BaseException], None] | None,
    sleep: Callable[[float], object],
) -> T:
    """Attempts 2.. of :func:`retrying`, through tenacity (``first`` failed attempt 1)."""
    import tenacity

    last = [first]

    def attempt() -> T:
        if before_retry is not None:
            before_retry(last[0])  # every attempt here follows a failure
        try:
            return call()
        except BaseException as exc:
            last[0] = exc
            raise

    def wait(state: tenacity.RetryCallState) -> float:
        # tenacity counts from this loop's first attempt, which is the call's second
        return backoff_s(state.attempt_number + 1, backoff_initial_ms, backoff_max_ms)

    def out_of_time(state: tenacity.RetryCallState) -> bool:
        # tenacity computes the upcoming wait before it asks: no wait may end past the deadline
        return time.monotonic() + (state.upcoming_sleep or 0.0) > deadline

    stop: tenacity.stop.stop_base = tenacity.stop_any(out_of_time)  # type: ignore[arg-type]
    if attempts_max is not None:
        stop = stop | tenacity.stop_after_attempt(attempts_max - 1)
    first_wait = backoff_s(1, backoff_initial_ms, backoff_max_ms)
    if time.monotonic() + first_wait > deadline:
        raise first
    sleep(first_wait)
    retryer = tenacity.Retrying(
        stop=stop,
        wait=wait,
        retry=tenacity.retry_if_exception(retry_if),
        reraise=True,
        sleep=_sleeper(sleep),
    )
    return retryer(attempt)


def _sleeper(sleep: Callable[[float], object]) -> Callable[[float], None]:
    """``sleep`` as tenacity types it (its result, if any, is not used)."""

    def wait(seconds: float) -> None:
        sleep(seconds)

    return wait


def until_won(
    call: Callable[[], T],
    *,
    what: str,
    attempts_max: int,
    deadline_ms: int = DEADLINE_MS,
    backoff_initial_ms: float = 1,
    backoff_max_ms: float = 200,
    retry_if: Callable[[BaseException], bool] | None = None,
    before_retry: Callable[[BaseException], None] | None = None,
    sleep: Callable[[float], object] | None = None,
) -> T:
    """Retry an optimistic write whose attempts raise :class:`LostRace` when another wins.

    Gives up with :class:`~sparklog.errors.CommitConflictError` naming ``what``
    (the same error for every document); ``retry_if`` widens what else is retried
    (e.g. :func:`is_retriable` for store outages); other errors propagate as themselves.
    """
    lost = 0

    def retry(exc: BaseException) -> bool:
        nonlocal lost
        if isinstance(exc, LostRace):
            lost += 1
            return True
        return retry_if is not None and retry_if(exc)

    try:
        return retrying(
            call,
            deadline_ms=deadline_ms,
            attempts_max=attempts_max,
            backoff_initial_ms=backoff_initial_ms,
            backoff_max_ms=backoff_max_ms,
            retry_if=retry,
            before_retry=before_retry,
            sleep=sleep,
        )
    except LostRace as exc:
        raise CommitConflictError(f"{what}: gave up after {lost} lost races ({exc})") from None


__all__ = ["LostRace", "backoff_s", "is_retriable", "retrying", "until_won"]
