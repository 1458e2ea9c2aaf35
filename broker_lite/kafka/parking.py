"""Answers that come later: a handler may return a future of its response.

A JoinGroup or a follower's SyncGroup waits for its group (up to the rebalance
timeout).  Its handler does not wait on the request thread: it returns a
:class:`~concurrent.futures.Future` of the response, completed when the group
coordinator answers the parked request (:mod:`sparklog.groups.purgatory`), and
the listener sends the response then, in the connection's request order
(``KafkaListener`` keeps one answer slot per request).  The request thread goes
back to the pool at once, so the threads a broker needs do not grow with the
number of waiting members.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

In = TypeVar("In")
Out = TypeVar("Out")


def then(
    waiting: Future[In],
    answer: Callable[[In], Out],
    refused: Callable[[BaseException], Out | None] = lambda exc: None,
) -> Out | Future[Out]:
    """``answer(result)`` of ``waiting``: at once if it is done, else a future of it.

    ``refused(exc)`` turns the wait's error into a response (None: not one it knows,
    the error is passed on and the listener closes the connection, as for a failing
    handler).  Both run on the thread that completes ``waiting``.
    """
    if waiting.done():
        return _settle(waiting, answer, refused)
    out: Future[Out] = Future()

    def done(_: Future[In]) -> None:
        try:
            out.set_result(_settle(waiting, answer, refused))
        except BaseException as exc:
            out.set_exception(exc)

    waiting.add_done_callback(done)
    return out


def _settle(
    waiting: Future[In],
    answer: Callable[[In], Out],
    refused: Callable[[BaseException], Out | None],
) -> Out:
    exc = waiting.exception()
    if exc is None:
        return answer(waiting.result())
    response = refused(exc)
    if response is None:
        raise exc
    return response


def chain(source: Future[Any], target: Future[Any], convert: Callable[[Any], Any]) -> None:
    """Complete ``target`` with ``convert(result)`` of ``source`` (or its error) when
    ``source`` completes; ``convert`` failing fails ``target``."""

    def done(_: Future[Any]) -> None:
        exc = source.exception()
        if exc is not None:
            target.set_exception(exc)
            return
        try:
            target.set_result(convert(source.result()))
        except BaseException as error:
            target.set_exception(error)

    source.add_done_callback(done)
