"""Parsing CLI arguments into values, with one-line errors that say what is accepted."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from typing import Any

from sparklog.errors import InvalidConfigurationError

TIME_ACCEPTED = "ISO 8601 such as 2026-05-01T12:00:00Z (no zone means UTC)"


def parse_pairs(pairs: Iterable[str], what: str) -> dict[str, str]:
    """``key=value`` items into a dict; InvalidConfigurationError naming the bad item."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise InvalidConfigurationError(f"{what} {pair!r} is not accepted; accepted: key=value")
        out[key.strip()] = value
    return out


def parse_time_ms(text: str) -> int:
    """An ISO 8601 time (or epoch milliseconds) as ms since the epoch."""
    raw = text.strip()
    if raw.isdigit():
        return int(raw)
    try:
        when = dt.datetime.fromisoformat(raw.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise InvalidConfigurationError(
            f"malformed time {text!r}; accepted: {TIME_ACCEPTED}"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return int(when.timestamp() * 1000)


def parse_offset_spec(text: str) -> Any:
    """``earliest``, ``latest`` or an ISO time (as ms) for offset lookups."""
    lowered = text.strip().lower()
    if lowered in ("earliest", "latest"):
        return lowered
    try:
        return parse_time_ms(text)
    except InvalidConfigurationError:
        raise InvalidConfigurationError(
            f"malformed time {text!r}; accepted: earliest, latest, or {TIME_ACCEPTED}"
        ) from None


def one_named(positional: str | None, option: str | None, what: str) -> str:
    """The ``what`` (topic, group) named as an argument or with ``--what`` (Kafka tools'
    spelling), exactly once."""
    if positional and option and positional != option:
        raise InvalidConfigurationError(
            f"two {what}s named ({positional!r} and --{what} {option!r}); accepted: one of them"
        )
    name = positional or option
    if not name:
        raise InvalidConfigurationError(
            f"no {what} named; accepted: {what.upper()} or --{what} {what.upper()}"
        )
    return name


def one_group(positional: str | None, option: str | None) -> str:
    """The group named as an argument or with ``--group`` (kafka-consumer-groups)."""
    return one_named(positional, option, "group")


def one_topic(positional: str | None, option: str | None) -> str:
    """The topic named as an argument or with ``--topic`` (kafka-topics)."""
    return one_named(positional, option, "topic")
