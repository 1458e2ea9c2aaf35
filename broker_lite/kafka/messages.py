"""Building kio response entities for whichever version a client asked for.

kio generates one frozen dataclass per message version; versions differ in
which fields exist.  :func:`make` takes a superset of field values, keeps those
the class has, and converts plain values to kio's types (error codes,
durations, timestamps), so one handler serves a range of versions.
"""

from __future__ import annotations

import datetime
import sys
from collections.abc import Callable
from dataclasses import MISSING, fields
from functools import cache
from typing import Any

from kio.schema.errors import ErrorCode

from sparklog.broker_lite.damage import report_damage
from sparklog.errors import CorruptRecordError, SparklogError, UnknownServerError


@cache
def _field_info(cls: type) -> dict[str, tuple[str | None, bool]]:
    """Field name -> (kafka_type, required) of a kio entity class."""
    out = {}
    for f in fields(cls):
        required = f.default is MISSING and f.default_factory is MISSING
        out[f.name] = (f.metadata.get("kafka_type"), required)
    return out


def _convert(kafka_type: str | None, value: Any) -> Any:
    if kafka_type == "error_code" and not isinstance(value, ErrorCode):
        return error_code(int(value))
    if kafka_type in ("timedelta_i32", "timedelta_i64") and isinstance(value, int):
        return datetime.timedelta(milliseconds=value)
    if kafka_type == "datetime_i64" and isinstance(value, int):
        if value < 0:
            return None
        return datetime.datetime.fromtimestamp(value / 1000, tz=datetime.UTC)
    return value


def make(cls: type, **values: Any) -> Any:
    """An instance of ``cls`` from the values it has fields for (others are ignored)."""
    info = _field_info(cls)
    kwargs = {}
    for name, (kafka_type, required) in info.items():
        if name in values:
            kwargs[name] = _convert(kafka_type, values[name])
        elif required:
            raise TypeError(f"{cls.__name__} needs field {name!r}")
    return cls(**kwargs)


def has_field(cls: type, name: str) -> bool:
    return name in _field_info(cls)


def nested(cls: type, name: str) -> type:
    """A class defined next to ``cls`` in the same kio version module."""
    found = getattr(sys.modules[cls.__module__], name)
    assert isinstance(found, type)
    return found


def error_code(errno: int) -> ErrorCode:
    try:
        return ErrorCode(errno)
    except ValueError:
        return ErrorCode.unknown_server_error


def errno_of(exc: BaseException) -> int:
    """Kafka's error code for an exception (sparklog.errors classes carry it).

    Every error a Kafka answer carries passes here, so damaged stored data met on
    any path is reported (once per file, counted each time) here too.
    """
    if isinstance(exc, CorruptRecordError):
        report_damage(exc)
    if isinstance(exc, SparklogError):
        return int(type(exc).errno)
    return int(UnknownServerError.errno)


def outcome(call: Callable[[], Any]) -> tuple[int, str | None, Any]:
    """One per-resource step of a request: (error code, message, result).

    Kafka answers a request about many topics or partitions with a result for
    each; a refused one carries its error code and message, and the others go on.
    """
    try:
        return 0, None, call()
    except SparklogError as exc:
        return errno_of(exc), str(exc), None


def ms(value: Any) -> int:
    """Milliseconds from a kio duration or timestamp field."""
    if isinstance(value, datetime.timedelta):
        return int(value / datetime.timedelta(milliseconds=1))
    if isinstance(value, datetime.datetime):
        return int(value.timestamp() * 1000)
    return int(value)
