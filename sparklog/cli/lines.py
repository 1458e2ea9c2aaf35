"""Input lines into records and records into output lines, as Kafka's console tools and kcat do.

Producing: ``--key-separator`` (kcat ``-K``, Kafka ``parse.key``), ``--parse-headers``
(KIP-798: ``h1:v1,h2:v2<TAB>key<SEP>value``), ``--null-marker`` (KIP-810) and ``-Z``
(kcat: empty key/value is null, so an empty value is a tombstone).

Consuming: kcat format strings (``-f '%k %s %p %o %T %h'``) and Kafka's
``print.*`` properties of its DefaultMessageFormatter.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sparklog.errors import InvalidConfigurationError

Headers = list[tuple[str, bytes | None]]


@dataclass(frozen=True)
class LineFormat:
    """How one input line becomes (headers, key, value)."""

    key_separator: bytes | None = None
    parse_headers: bool = False
    headers_delimiter: bytes = b"\t"
    headers_separator: bytes = b","
    headers_key_separator: bytes = b":"
    null_marker: bytes | None = None
    empty_is_null: bool = False

    def _nullable(self, raw: bytes) -> bytes | None:
        if self.null_marker is not None and raw == self.null_marker:
            return None
        if self.empty_is_null and raw == b"":
            return None
        return raw

    def parse(self, line: bytes, number: int) -> tuple[Headers, bytes | None, bytes | None]:
        """One line; InvalidConfigurationError naming the line number and the form accepted."""
        headers: Headers = []
        rest = line
        if self.parse_headers:
            head, found, rest = line.partition(self.headers_delimiter)
            if not found:
                raise InvalidConfigurationError(
                    f"line {number} has no headers delimiter {self.headers_delimiter.decode()!r}; "
                    "accepted: h1:v1,h2:v2<DELIM>[key<SEP>]value"
                )
            for item in head.split(self.headers_separator) if head else []:
                name, sep, header_value = item.partition(self.headers_key_separator)
                if not sep or not name:
                    raise InvalidConfigurationError(
                        f"line {number}: header {item.decode(errors='replace')!r} is not "
                        f"name{self.headers_key_separator.decode()}value"
                    )
                headers.append((name.decode(errors="replace"), self._nullable(header_value)))
        key: bytes | None = None
        value: bytes | None = rest
        if self.key_separator is not None:
            raw_key, found, raw_value = rest.partition(self.key_separator)
            if not found:
                raise InvalidConfigurationError(
                    f"line {number} has no key separator {self.key_separator.decode()!r}; "
                    "accepted: KEY<SEP>VALUE on every line"
                )
            key, value = self._nullable(raw_key), raw_value
        return headers, key, None if value is None else self._nullable(value)


#: Kafka console-producer properties (``--property k=v``) and what they set.
PRODUCER_PROPERTIES = (
    "parse.key",
    "key.separator",
    "parse.headers",
    "headers.delimiter",
    "headers.separator",
    "headers.key.separator",
    "null.marker",
)


def unescape(text: str) -> str:
    r"""``\t``, ``\n``, ``\r`` and ``\\`` in option values, as shells pass them literally."""
    return (
        text.replace("\\\\", "\0").replace("\\t", "\t").replace("\\n", "\n").replace("\\r", "\r")
    ).replace("\0", "\\")


def line_format_from(properties: Mapping[str, str], **given: Any) -> LineFormat:
    """A LineFormat from CLI options, overridden by Kafka ``--property`` items."""
    unknown = [k for k in properties if k not in PRODUCER_PROPERTIES]
    if unknown:
        raise InvalidConfigurationError(
            f"--property {unknown[0]!r} is not accepted; accepted: {', '.join(PRODUCER_PROPERTIES)}"
        )
    opts = dict(given)
    if properties.get("parse.key", "").lower() == "true" and opts.get("key_separator") is None:
        opts["key_separator"] = "\t"
    for prop, name in (
        ("key.separator", "key_separator"),
        ("headers.delimiter", "headers_delimiter"),
        ("headers.separator", "headers_separator"),
        ("headers.key.separator", "headers_key_separator"),
        ("null.marker", "null_marker"),
    ):
        if prop in properties and (prop != "key.separator" or "parse.key" in properties):
            opts[name] = properties[prop]
    if properties.get("parse.headers", "").lower() == "true":
        opts["parse_headers"] = True
    encoded: dict[str, Any] = {}
    for name, value in opts.items():
        if isinstance(value, str):
            value = unescape(value)
            if not value and name != "null_marker":
                raise InvalidConfigurationError(f"{name.replace('_', '-')} must not be empty")
            encoded[name] = value.encode()
        elif value is not None:
            encoded[name] = value
    return LineFormat(**encoded)


# -- output ------------------------------------------------------------------------------
def text_of(value: Any) -> bytes | None:
    """A record value as bytes (JSON for Arrow-typed values), None for a tombstone."""
    if value is None or isinstance(value, bytes):
        return value
    return json.dumps(value, default=str).encode()


def decode(value: bytes | None) -> Any:
    """bytes for JSON: text if utf-8, else {"base64": ...}; None stays null."""
    if value is None:
        return None
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        import base64

        return {"base64": base64.b64encode(value).decode()}


def iso_ms(ms: int) -> str:
    """A timestamp in milliseconds as ISO 8601 UTC (records' ``timestamp`` in JSON)."""
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).isoformat(timespec="milliseconds")


def record_doc(record: Any) -> dict[str, Any]:
    """The JSON shape of a record, the same in every command that prints one."""
    value = record.value
    return {
        "topic": record.topic,
        "partition": record.partition,
        "offset": record.offset,
        "timestamp_ms": record.timestamp_ms,
        "timestamp": iso_ms(record.timestamp_ms),
        "key": decode(record.key),
        "value": decode(value) if isinstance(value, bytes | None) else value,
        "headers": [[k, decode(v)] for k, v in record.headers],
    }


def _headers_text(headers: Headers, separator: bytes = b",", key_sep: bytes = b":") -> bytes:
    return separator.join(k.encode() + key_sep + (b"" if v is None else v) for k, v in headers)


def kcat_format(fmt: str) -> Any:
    """A kcat ``-f`` format string as a function record -> bytes.

    %t topic, %p partition, %o offset, %k key, %K key length, %s value, %S value
    length, %T timestamp (ms), %h headers (k=v,...), %% a percent; \\n \\t \\r escapes.
    A newline ends each record unless the format already ends with one.
    """
    text = unescape(fmt)
    pieces: list[Any] = []
    literal = ""
    index = 0
    while index < len(text):
        char = text[index]
        if char != "%":
            literal += char
            index += 1
            continue
        code = text[index + 1 : index + 2]
        index += 2
        if code == "%":
            literal += "%"
            continue
        if code not in "tpokKsSTh" or not code:
            raise InvalidConfigurationError(
                f"format {fmt!r} has unknown %{code}; accepted: %t %p %o %k %K %s %S %T %h %%"
            )
        if literal:
            pieces.append(literal.encode())
            literal = ""
        pieces.append(code)
    if not text.endswith("\n"):
        literal += "\n"
    if literal:
        pieces.append(literal.encode())

    def render(record: Any) -> bytes:
        out = bytearray()
        for piece in pieces:
            if isinstance(piece, bytes):
                out += piece
                continue
            value = text_of(record.value)
            if piece == "t":
                out += record.topic.encode()
            elif piece == "p":
                out += str(record.partition).encode()
            elif piece == "o":
                out += str(record.offset).encode()
            elif piece == "k":
                out += record.key or b""
            elif piece == "K":
                out += str(-1 if record.key is None else len(record.key)).encode()
            elif piece == "s":
                out += value or b""
            elif piece == "S":
                out += str(-1 if value is None else len(value)).encode()
            elif piece == "T":
                out += str(record.timestamp_ms).encode()
            elif piece == "h":
                out += _headers_text(record.headers, b",", b"=")
        return bytes(out)

    return render


#: Kafka console-consumer properties (DefaultMessageFormatter) accepted by --property.
CONSUMER_PROPERTIES = (
    "print.timestamp",
    "print.partition",
    "print.offset",
    "print.headers",
    "print.key",
    "print.value",
    "key.separator",
    "line.separator",
    "headers.separator",
    "headers.key.separator",
    "null.literal",
)


def kafka_formatter(properties: Mapping[str, str]) -> Any:
    """Kafka's DefaultMessageFormatter: the ``print.*`` toggles, in Kafka's order."""
    unknown = [k for k in properties if k not in CONSUMER_PROPERTIES]
    if unknown:
        raise InvalidConfigurationError(
            f"--property {unknown[0]!r} is not accepted; accepted: {', '.join(CONSUMER_PROPERTIES)}"
        )

    def flag(name: str, default: bool) -> bool:
        raw = properties.get(name)
        if raw is None:
            return default
        if raw.lower() not in ("true", "false"):
            raise InvalidConfigurationError(
                f"--property {name}={raw!r} is not accepted; accepted: true, false"
            )
        return raw.lower() == "true"

    shown = {
        name: flag(f"print.{name}", name == "value")
        for name in ("timestamp", "partition", "offset", "headers", "key", "value")
    }
    sep = unescape(properties.get("key.separator", "\t")).encode()
    line_end = unescape(properties.get("line.separator", "\n")).encode()
    headers_sep = unescape(properties.get("headers.separator", ",")).encode()
    headers_key_sep = unescape(properties.get("headers.key.separator", ":")).encode()
    null = properties.get("null.literal", "null").encode()

    def render(record: Any) -> bytes:
        fields: list[bytes] = []
        if shown["timestamp"]:
            kind = "LogAppendTime" if getattr(record, "timestamp_type", 0) == 1 else "CreateTime"
            fields.append(f"{kind}:{record.timestamp_ms}".encode())
        if shown["partition"]:
            fields.append(f"Partition:{record.partition}".encode())
        if shown["offset"]:
            fields.append(f"Offset:{record.offset}".encode())
        if shown["headers"]:
            fields.append(
                _headers_text(record.headers, headers_sep, headers_key_sep)
                if record.headers
                else b"NO_HEADERS"
            )
        if shown["key"]:
            fields.append(null if record.key is None else record.key)
        if shown["value"]:
            value = text_of(record.value)
            fields.append(null if value is None else value)
        return sep.join(fields) + line_end

    return render
