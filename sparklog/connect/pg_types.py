"""PostgreSQL values (text form) as Debezium's PostgreSQL connector writes them in JSON.

Debezium's defaults are followed: ``time.precision.mode=adaptive`` (``timestamp``
as epoch microseconds, or milliseconds for precision 0-3; ``date`` as epoch days;
``time`` as microseconds of the day; ``timestamptz`` as an ISO-8601 string in
UTC), ``binary.handling.mode=bytes`` (``bytea`` as base64), ``json``/``jsonb``/``uuid``/
``interval`` as strings, arrays as JSON arrays, and ``decimal.handling.mode``
``precise`` (``numeric`` as base64 of the unscaled two's-complement bytes; a
numeric without a declared scale as ``{"scale": s, "value": base64}``), ``double``
or ``string``. The text form is what the slot and the snapshot give (the session
runs with ``TimeZone=UTC``, ``DateStyle=ISO``, ``bytea_output=hex``).
"""

from __future__ import annotations

import base64
import datetime as dt
import re
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from sparklog.connect.pgoutput import UNCHANGED_TOAST
from sparklog.errors import ConnectorConfigError

DECIMAL_MODES = ("precise", "double", "string")
EPOCH = dt.datetime(1970, 1, 1)
EPOCH_DATE = dt.date(1970, 1, 1)

BOOL, BYTEA, INT8, INT2, INT4, OID = 16, 17, 20, 21, 23, 26
FLOAT4, FLOAT8, NUMERIC = 700, 701, 1700
DATE, TIME, TIMESTAMP, TIMESTAMPTZ, TIMETZ = 1082, 1083, 1114, 1184, 1266
#: array type oid -> element type oid (the common built-in ones)
ARRAY_ELEMENTS = {
    1000: BOOL,
    1001: BYTEA,
    1005: INT2,
    1007: INT4,
    1016: INT8,
    1021: FLOAT4,
    1022: FLOAT8,
    1231: NUMERIC,
    1182: DATE,
    1183: TIME,
    1115: TIMESTAMP,
    1185: TIMESTAMPTZ,
    1009: 25,  # text
    1015: 1043,  # varchar
    1014: 1042,  # bpchar
    2951: 2950,  # uuid
    199: 114,  # json
    3807: 3802,  # jsonb
}

_TS = re.compile(
    r"(?P<date>\d{4,}-\d\d-\d\d)(?: (?P<time>\d\d:\d\d:\d\d)(?:\.(?P<frac>\d+))?)?"
    r"(?P<tz>[+-]\d\d(?::?\d\d)?(?::?\d\d)?)?(?P<bc> BC)?$"
)


def _micros(frac: str | None) -> int:
    return int((frac or "").ljust(6, "0")[:6])


def parse_timestamp(text: str) -> dt.datetime:
    """``'2024-05-01 10:00:00.5+02'`` -> an aware datetime (naive input stays naive)."""
    m = _TS.match(text)
    if not m or m.group("bc"):
        raise ValueError(f"timestamp {text!r}")
    day = dt.date.fromisoformat(m.group("date"))
    hh, mm, ss = (int(x) for x in (m.group("time") or "00:00:00").split(":"))
    value = dt.datetime(day.year, day.month, day.day, hh, mm, ss, _micros(m.group("frac")))
    tz = m.group("tz")
    if tz:
        sign = -1 if tz[0] == "-" else 1
        digits = tz[1:].replace(":", "")
        offset = dt.timedelta(
            hours=int(digits[:2]), minutes=int(digits[2:4] or 0), seconds=int(digits[4:6] or 0)
        )
        value = value.replace(tzinfo=dt.timezone(sign * offset))
    return value


def _time_micros(text: str) -> int:
    clock, _, frac = text.partition(".")
    hh, mm, ss = (int(x) for x in clock[:8].split(":"))
    return ((hh * 60 + mm) * 60 + ss) * 1_000_000 + _micros(frac)


def _zoned(text: str) -> str:
    value = parse_timestamp(text).astimezone(dt.UTC)
    return (
        value.strftime("%Y-%m-%dT%H:%M:%S")
        + (f".{value.microsecond:06d}".rstrip("0") if value.microsecond else "")
        + "Z"
    )


def _timestamp(text: str, typmod: int) -> int | str:
    try:
        value = parse_timestamp(text)
    except ValueError:
        return text  # infinity, BC dates: passed through as PostgreSQL writes them
    micros = (value - EPOCH) // dt.timedelta(microseconds=1)
    return micros // 1000 if 0 <= typmod <= 3 else micros


def _unscaled(value: Decimal, scale: int) -> str:
    number = int(value.scaleb(scale))
    size = max(1, (number.bit_length() + 8) // 8)
    return base64.b64encode(number.to_bytes(size, "big", signed=True)).decode()


def numeric_converter(mode: str) -> Callable[[str, int], Any]:
    if mode not in DECIMAL_MODES:
        raise ConnectorConfigError(
            f"decimal handling {mode!r} not accepted; accepted: {', '.join(DECIMAL_MODES)}"
        )

    def convert(text: str, typmod: int) -> Any:
        if text == "NaN":
            return "NaN" if mode != "double" else float("nan")
        value = Decimal(text)
        if mode == "string":
            return text
        if mode == "double":
            return float(value)
        if typmod >= 4:
            return _unscaled(value, (typmod - 4) & 0xFFFF)
        scale = max(0, -value.as_tuple().exponent)  # type: ignore[operator]
        return {"scale": scale, "value": _unscaled(value, scale)}

    return convert


def parse_array(text: str) -> Any:
    """PostgreSQL's array literal ``{1,2,NULL,"a b"}`` (nested too) -> lists of str/None."""
    pos = 0
    if text.startswith("["):  # explicit bounds: [0:1]={...}
        pos = text.index("=") + 1

    def parse() -> list[Any]:
        nonlocal pos
        assert text[pos] == "{"
        pos += 1
        out: list[Any] = []
        while pos < len(text):
            ch = text[pos]
            if ch == "}":
                pos += 1
                return out
            if ch == ",":
                pos += 1
                continue
            if ch == "{":
                out.append(parse())
            elif ch == '"':
                pos += 1
                buf = []
                while text[pos] != '"':
                    if text[pos] == "\\":
                        pos += 1
                    buf.append(text[pos])
                    pos += 1
                pos += 1
                out.append("".join(buf))
            else:
                end = pos
                while text[end] not in ",}":
                    end += 1
                item = text[pos:end].strip()
                out.append(None if item == "NULL" else item)
                pos = end
        raise ValueError(f"array {text!r}")

    return parse()


class Converter:
    """Text values of given type oids -> Debezium's JSON values."""

    def __init__(self, decimal_handling: str = "precise") -> None:
        self.numeric = numeric_converter(decimal_handling)

    def value(self, text: str | None, type_oid: int, typmod: int = -1) -> Any:
        if text is None or text == UNCHANGED_TOAST:
            return text
        if type_oid in ARRAY_ELEMENTS:
            element = ARRAY_ELEMENTS[type_oid]
            return self._array(parse_array(text), element, typmod)
        return self._scalar(text, type_oid, typmod)

    def _array(self, items: list[Any], element: int, typmod: int) -> list[Any]:
        return [
            self._array(i, element, typmod)
            if isinstance(i, list)
            else (None if i is None else self._scalar(i, element, typmod))
            for i in items
        ]

    def _scalar(self, text: str, oid: int, typmod: int) -> Any:
        if oid in (INT2, INT4, INT8, OID):
            return int(text)
        if oid in (FLOAT4, FLOAT8):
            number = float(text)
            return text if number != number or number in (float("inf"), float("-inf")) else number
        if oid == BOOL:
            return text in ("t", "true")
        if oid == NUMERIC:
            return self.numeric(text, typmod)
        if oid == BYTEA:
            raw = bytes.fromhex(text[2:]) if text.startswith("\\x") else text.encode()
            return base64.b64encode(raw).decode()
        if oid == DATE:
            try:
                return (dt.date.fromisoformat(text) - EPOCH_DATE).days
            except ValueError:
                return text
        if oid == TIME:
            return _time_micros(text)
        if oid == TIMESTAMP:
            return _timestamp(text, typmod)
        if oid == TIMESTAMPTZ:
            try:
                return _zoned(text)
            except ValueError:
                return text
        return text  # text, varchar, char, uuid, json, jsonb, interval, timetz, money...
