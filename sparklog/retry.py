"""The one retry policy of sparklog (through tenacity): retriable errors only, with backoff.

Only errors whose ``retriable`` is true are retried (``SparklogError`` subclasses
say so; nothing else is an outage). Programming errors and
:class:`~sparklog.errors.CommitStateUnknownError` propagate at once. Backoff is
exponential with full jitter, bounded by ``deadline_ms`` overall; the last error
is re-raised as itself.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

#: defaults of :func:`retrying`: first wait, longest wait, overall deadline
BACKOFF_INITIAL_MS = 10
BACKOFF_MAX_MS = 1_000
DEADLINE_MS = 30_000


def is_retriable(exc: BaseException) -> bool:
    """True for errors that declare ``retriable`` (an outage, a lost race), else false."""
    return bool(getattr(exc, "retriable", False))


def retrying(
    call: Callable[[], T],
    *,
    deadline_ms: int = DEADLINE_MS,
    attempts_max: int | None = None,
    backoff_initial_ms: int = BACKOFF_INITIAL_MS,
    backoff_max_ms: int = BACKOFF_MAX_MS,
    retry_if: Callable[[BaseException], bool] = is_retriable,
    before_retry: Callable[[BaseException], None] | None = None,
) -> T:
    """Call ``call`` until it returns, a non-retriable error, ``attempts_max`` or the deadline.

    ``before_retry`` runs after the backoff sleep and before the next attempt
    (refresh metadata or re-read state there, so the next attempt uses a fresh view).
    """
    # imported here, not with the module: tenacity (with asyncio) costs ~0.1 s, paid by
    # every process that imports sparklog.storage (e.g. each streaming query's runner)
    import tenacity

    stop: tenacity.stop.stop_base = tenacity.stop_after_delay(deadline_ms / 1000)
    if attempts_max is not None:
        stop = stop | tenacity.stop_after_attempt(attempts_max)

    failed: list[BaseException] = []

    def attempt() -> T:
        if failed and before_retry is not None:
            before_retry(failed[-1])
        try:
            return call()
        except BaseException as exc:
            failed.append(exc)
            raise

    retryer = tenacity.Retrying(
        stop=stop,
        wait=tenacity.wait_random_exponential(
            multiplier=backoff_initial_ms / 1000, max=backoff_max_ms / 1000
        ),
        retry=tenacity.retry_if_exception(retry_if),
        reraise=True,
        sleep=time.sleep,
    )
    return retryer(attempt)


__all__ = ["is_retriable", "retrying"]
