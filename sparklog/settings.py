"""Typed settings: the one parser behind broker, topic, client and Spark option keys.

Every layer names its keys with their defaults and documentation in its own
module (``broker_lite/config.py``, ``storage/config.py``,
``sparklog/client/config.py``, ``sparklog/spark/options.py``); what a value may
be, how text from a file, an environment variable or a Spark option becomes
that value, and how a refusal is worded are decided here, once.  A refusal
names the key, the value as given, where it came from and what is accepted:

    config key 'linger_ms'=-1 (from environment SPARKLOG_LINGER_MS) is not accepted; accepted: ...
    option 'maxOffsetsPerTrigger'='lots' is not accepted; accepted: an integer >= 1
    linger.ms='soon' is not accepted; accepted: an integer >= 0      (client config)

It lives at the bottom of the package, beside ``errors``, so storage may use it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import MISSING, dataclass, field, fields
from typing import Any

from sparklog.errors import InvalidConfigurationError, SparklogError

TRUE_WORDS = ("true", "1", "yes", "on")
FALSE_WORDS = ("false", "0", "no", "off")


#: Kafka's compression.type values as the codec objects are written with (Arrow IPC has
#: lz4 and zstd: gzip is stored as zstd, snappy as lz4); "none" is sparklog's spelling.
#: Here, at the bottom of the package, so the Spark sink's options and the topic configs
#: share it without the Spark planner importing storage.
KAFKA_CODECS = {
    "none": "none",
    "uncompressed": "none",
    "gzip": "zstd",
    "snappy": "lz4",
    "lz4": "lz4",
    "zstd": "zstd",
}


@dataclass(frozen=True)
class ValueKind:
    """What a setting's value may be: a converter (raising ValueError) and its description."""

    accepted: str
    convert: Callable[[Any], Any]


def integer(minimum: int | None = None, maximum: int | None = None) -> ValueKind:
    """Whole numbers (given as int or text) within ``[minimum, maximum]``; booleans refused."""

    def convert(raw: Any) -> int:
        if isinstance(raw, bool | float):
            raise ValueError(raw)
        value = raw if isinstance(raw, int) else int(str(raw).strip())
        if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
            raise ValueError(raw)
        return value

    if minimum is None:
        accepted = "an integer" if maximum is None else f"an integer <= {maximum}"
    else:
        accepted = f"an integer >= {minimum}" + (
            f" and <= {maximum}" if maximum is not None else ""
        )
    return ValueKind(accepted, convert)


def _boolean(raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in TRUE_WORDS:
        return True
    if text in FALSE_WORDS:
        return False
    raise ValueError(raw)


BOOLEAN = ValueKind("true, false", _boolean)


def choice(
    *choices: str, aliases: Mapping[str, str] | None = None, fold_case: bool = False
) -> ValueKind:
    """One of ``choices`` (``aliases`` map other spellings; ``fold_case`` ignores case)."""
    by_text = {(c.lower() if fold_case else c): c for c in choices}

    def convert(raw: Any) -> str:
        text = str(raw).strip()
        if fold_case:
            text = text.lower()
        text = (aliases or {}).get(text, text)
        if text not in by_text:
            raise ValueError(raw)
        return by_text[text]

    return ValueKind(", ".join(choices), convert)


def choice_set(*choices: str) -> ValueKind:
    """A comma-separated, non-empty set of ``choices``, returned sorted (``compact,delete``)."""

    def convert(raw: Any) -> str:
        parts = sorted({p.strip() for p in str(raw).split(",") if p.strip()})
        if not parts or any(p not in choices for p in parts):
            raise ValueError(raw)
        return ",".join(parts)

    accepted = ", ".join([*choices, ",".join(sorted(choices))])
    return ValueKind(accepted, convert)


def address(disableable: bool = False) -> ValueKind:
    """``HOST:PORT`` with a port in 0-65535 (``""`` too when the listener may be disabled)."""

    def convert(raw: Any) -> str:
        text = str(raw).strip()
        if text == "" and disableable:
            return ""
        host, sep, port = text.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
            raise ValueError(raw)
        return text

    tail = " or empty to disable" if disableable else ""
    return ValueKind("HOST:PORT with PORT in 0-65535" + tail, convert)


def _json_object(raw: Any) -> dict[str, Any]:
    value = json.loads(raw) if isinstance(raw, str) else raw
    if not isinstance(value, dict):
        raise ValueError(raw)
    return dict(value)


def json_object(accepted: str = "a JSON object") -> ValueKind:
    """A mapping, or text holding a JSON object."""
    return ValueKind(accepted, _json_object)


def _text(raw: Any) -> str:
    if not isinstance(raw, str | int | float) or isinstance(raw, bool):
        raise ValueError(raw)
    return str(raw)


def _function(raw: Any) -> Any:
    if not callable(raw):
        raise ValueError(raw)
    return raw


TEXT = ValueKind("a string", _text)
FUNCTION = ValueKind("a function or None", _function)
ANYTHING = ValueKind("any value", lambda raw: raw)


@dataclass(frozen=True)
class Setting:
    """One accepted key: its name, default, meaning and value kind."""

    name: str
    default: Any
    doc: str
    kind: ValueKind = field(default=TEXT)

    def parse(
        self,
        raw: Any,
        *,
        source: str = "",
        label: str = "",
        spelled: str | None = None,
        error: type[SparklogError] = InvalidConfigurationError,
    ) -> Any:
        """``raw`` as this setting's value; ``error`` names the key, value and what is accepted.

        ``label`` prefixes the key in the message (``option``, ``config``), ``source`` says
        where the value came from (a file, an environment variable), ``spelled`` is the key
        as the user wrote it (``linger.ms`` for ``linger_ms``).
        """
        return parse_value(
            spelled or self.name, raw, self.kind, source=source, label=label, error=error
        )


def about(doc: str, kind: ValueKind = TEXT) -> dict[str, Any]:
    """Dataclass field metadata declaring a setting: ``field(default=5, metadata=about(...))``."""
    return {"doc": doc, "kind": kind}


def settings_of(cls: Any) -> dict[str, Setting]:
    """The settings a dataclass declares with :func:`about`, by field name, in order."""
    out: dict[str, Setting] = {}
    for f in fields(cls):
        if "kind" not in f.metadata:
            continue
        default = f.default if f.default is not MISSING else f.default_factory()  # type: ignore[operator]
        out[f.name] = Setting(f.name, default, f.metadata["doc"], f.metadata["kind"])
    return out


def parse_value(
    name: str,
    raw: Any,
    kind: ValueKind,
    *,
    source: str = "",
    label: str = "",
    error: type[SparklogError] = InvalidConfigurationError,
) -> Any:
    """``raw`` converted by ``kind``, or ``error`` with :func:`refusal`'s wording."""
    try:
        return kind.convert(raw)
    except (ValueError, TypeError):
        raise error(refusal(name, raw, kind.accepted, source=source, label=label)) from None


def refusal(name: str, raw: Any, accepted: str, *, source: str = "", label: str = "") -> str:
    """The one wording of a refused value."""
    where = f" (from {source})" if source else ""
    key = f"{label} {name!r}" if label else name
    return f"{key}={raw!r}{where} is not accepted; accepted: {accepted}"


def unknown_key(name: str, what: str, accepted: Iterable[str], *, source: str = "") -> str:
    """The one wording of a key nobody defines."""
    where = f" in {source}" if source else ""
    return f"unknown {what} {name!r}{where}; accepted: {', '.join(accepted)}"
