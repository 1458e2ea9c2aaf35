"""PostgreSQL values (text form) as Debezium's PostgreSQL connector writes them in JSON.

Debezium's defaults, and the options it offers, per column type (docs/connect.md's
table says exactly what each gives):

* ``time.precision.mode``: ``adaptive`` (default: ``date`` as epoch days; ``time``
  as milliseconds of the day for precision 0-3, else microseconds; ``timestamp`` as
  epoch milliseconds for precision 0-3, else microseconds), ``adaptive_time_microseconds``
  (``time`` always microseconds) or ``connect`` (Kafka Connect's types: ``time`` in
  milliseconds of the day, ``timestamp`` in epoch milliseconds). ``timestamptz`` is an
  ISO-8601 string in UTC and ``timetz`` an ISO-8601 time normalised to UTC
  (``07:25:41.5Z``) in every mode, as Debezium's ``ZonedTimestamp``/``ZonedTime``.
* ``interval.handling.mode``: ``numeric`` (default: Debezium's ``MicroDuration``,
  approximate microseconds with a month of 365.25 / 12 days) or ``string`` (ISO 8601,
  ``P1Y2M3DT4H5M6.78S``, Debezium's ``Interval``).
* ``decimal.handling.mode``: ``precise`` (default: ``numeric`` as base64 of the
  unscaled two's-complement bytes; a numeric without a declared scale as
  ``{"scale": s, "value": base64}``), ``double`` or ``string``.
* ``binary.handling.mode=bytes`` (``bytea`` as base64); ``json``/``jsonb``/``uuid`` as
  strings; arrays as JSON arrays.

The text form is what the slot and the snapshot give (the session runs with
``TimeZone=UTC``, ``DateStyle=ISO``, ``IntervalStyle=iso_8601``, ``bytea_output=hex``).
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
TIME_PRECISION_MODES = ("adaptive", "adaptive_time_microseconds", "connect")
INTERVAL_MODES = ("numeric", "string")
#: Debezium's MicroDuration: a month is 365.25 / 12 days
DAYS_PER_MONTH_AVG = 30.4375
EPOCH = dt.datetime(1970, 1, 1)
EPOCH_DATE = dt.date(1970, 1, 1)

BOOL, BYTEA, INT8, INT2, INT4, OID = 16, 17, 20, 21, 23, 26
FLOAT4, FLOAT8, NUMERIC = 700, 701, 1700
DATE, TIME, TIMESTAMP, TIMESTAMPTZ, TIMETZ, INTERVAL = 1082, 1083, 1114, 1184, 1266, 1186
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
    1270: TIMETZ,
    1187: INTERVAL,
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


def _fraction(microsecond: int) -> str:
    """``.5``, ``.000123`` or nothing: Java's ISO formatters' fraction (no trailing zeros)."""
    return f".{microsecond:06d}".rstrip("0") if microsecond else ""


def _zoned_time(text: str) -> str:
    """``'10:15:30.5+02'`` -> ``'08:15:30.5Z'``: Debezium's ZonedTime, in UTC."""
    m = re.fullmatch(r"(\d\d):(\d\d):(\d\d)(?:\.(\d+))?([+-]\d\d)(?::?(\d\d))?(?::?(\d\d))?", text)
    if not m:
        raise ValueError(f"timetz {text!r}")
    hh, mi, ss = int(m.group(1)), int(m.group(2)), int(m.group(3))
    sign = -1 if m.group(5)[0] == "-" else 1
    offset_s = sign * (
        int(m.group(5)[1:]) * 3600 + int(m.group(6) or 0) * 60 + int(m.group(7) or 0)
    )
    seconds = (hh * 3600 + mi * 60 + ss - offset_s) % 86400  # 24:00:00+00 is midnight too
    return (
        f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
        f"{_fraction(_micros(m.group(4)))}Z"
    )


_ISO_INTERVAL = re.compile(
    r"P(?:(?P<y>-?\d+)Y)?(?:(?P<mo>-?\d+)M)?(?:(?P<d>-?\d+)D)?"
    r"(?:T(?:(?P<h>-?\d+)H)?(?:(?P<mi>-?\d+)M)?(?:(?P<s>-?\d+(?:\.\d+)?)S)?)?"
)


def parse_interval(text: str) -> tuple[int, int, int, int, int, Decimal]:
    """PostgreSQL's ``iso_8601`` interval text -> (years, months, days, hours, minutes, seconds)."""
    m = _ISO_INTERVAL.fullmatch(text)
    if not m or text in ("P", "PT"):
        raise ValueError(f"interval {text!r}")
    y, mo, d, h, mi = (int(m.group(k) or 0) for k in ("y", "mo", "d", "h", "mi"))
    return y, mo, d, h, mi, Decimal(m.group("s") or 0)


def interval_converter(mode: str) -> Callable[[str], Any]:
    """Interval text -> Debezium's ``MicroDuration`` (``numeric``) or ``Interval`` (``string``)."""
    check_mode("interval handling", mode, INTERVAL_MODES)

    def convert(text: str) -> Any:
        try:
            y, mo, d, h, mi, sec = parse_interval(text)
        except ValueError:
            return text  # infinity (PostgreSQL 17+): passed through as PostgreSQL writes it
        if mode == "string":
            whole = sec.normalize()
            seconds = f"{whole:f}" if whole != whole.to_integral() else str(int(whole))
            return f"P{y}Y{mo}M{d}DT{h}H{mi}M{seconds}S"
        # as MicroDuration.durationMicros does it: in doubles, truncated toward zero
        days = (y * 12 + mo) * DAYS_PER_MONTH_AVG + d
        total_s = ((days * 24.0 + h) * 60.0 + mi) * 60.0 + float(sec)
        return int(total_s * 1_000_000.0)

    return convert


def _zoned(text: str) -> str:
    value = parse_timestamp(text).astimezone(dt.UTC)
    return value.strftime("%Y-%m-%dT%H:%M:%S") + _fraction(value.microsecond) + "Z"


def _timestamp(text: str, typmod: int, mode: str) -> int | str:
    """Epoch milliseconds (precision 0-3 in the adaptive modes; always in ``connect``), else µs."""
    try:
        value = parse_timestamp(text)
    except ValueError:
        return text  # infinity, BC dates: passed through as PostgreSQL writes them
    micros = (value - EPOCH) // dt.timedelta(microseconds=1)
    return micros // 1000 if mode == "connect" or 0 <= typmod <= 3 else micros


def _time(text: str, typmod: int, mode: str) -> int:
    """Milliseconds of the day (``connect``; precision 0-3 in ``adaptive``), else µs."""
    micros = _time_micros(text)
    if mode == "connect" or (mode == "adaptive" and 0 <= typmod <= 3):
        return micros // 1000
    return micros


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


def check_mode(kind: str, mode: str, accepted: tuple[str, ...]) -> str:
    """``mode`` if it is one of ``accepted``; else one line naming the setting and the choices."""
    if mode not in accepted:
        raise ConnectorConfigError(f"{kind} {mode!r} not accepted; accepted: {', '.join(accepted)}")
    return mode


class Converter:
    """Text values of given type oids -> Debezium's JSON values, in the modes given."""

    def __init__(
        self,
        decimal_handling: str = "precise",
        time_precision: str = "adaptive",
        interval_handling: str = "numeric",
    ) -> None:
        self.numeric = numeric_converter(decimal_handling)
        self.time_precision = check_mode("time precision", time_precision, TIME_PRECISION_MODES)
        self.interval = interval_converter(interval_handling)

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
            return _time(text, typmod, self.time_precision)
        if oid == TIMESTAMP:
            return _timestamp(text, typmod, self.time_precision)
        if oid == TIMESTAMPTZ:
            try:
                return _zoned(text)
            except ValueError:
                return text
        if oid == TIMETZ:
            return _zoned_time(text)
        if oid == INTERVAL:
            return self.interval(text)
        return text  # text, varchar, char, uuid, json, jsonb, money...
