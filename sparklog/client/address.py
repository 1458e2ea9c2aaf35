"""One address, two modes: a storage root URL (embedded) or ``sparklog://host:port,...`` (brokers).

Defaults come from the environment: ``SPARKLOG_ADDRESS`` for the address and
``SPARKLOG_STORAGE_<KEY>`` for fsspec storage options (``<KEY>`` lower-cased;
``__`` nests, so ``SPARKLOG_STORAGE_CLIENT_KWARGS__REGION_NAME`` sets
``client_kwargs.region_name``).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from sparklog.errors import ConfigError

BROKER_SCHEME = "sparklog://"
ROOT_SCHEMES = ("file", "memory", "s3", "s3a", "gs", "gcs", "abfs", "az")
ENV_ADDRESS = "SPARKLOG_ADDRESS"
ENV_STORAGE_PREFIX = "SPARKLOG_STORAGE_"
_HOST_PORT = re.compile(r"^[A-Za-z0-9_.\-\[\]:]+:\d{1,5}$")
ACCEPTED = (
    "a storage root (a local path, file://, memory:// or s3://bucket/prefix URL) or "
    "brokers as sparklog://host:port[,host:port] (or plain host:port[,host:port], as "
    "kafka-python's bootstrap_servers)"
)


@dataclass(frozen=True)
class Address:
    """A parsed address: ``root`` URL for embedded mode, or ``bootstrap`` for broker mode."""

    text: str
    root: str | None = None
    bootstrap: str | None = None

    @property
    def is_broker(self) -> bool:
        return self.bootstrap is not None


def parse_address(address: str | None = None, environ: Mapping[str, str] | None = None) -> Address:
    """Parse ``address`` (or ``$SPARKLOG_ADDRESS``); ConfigError naming what is accepted."""
    env = os.environ if environ is None else environ
    text = (address if address is not None else env.get(ENV_ADDRESS, "")).strip()
    if not text:
        raise ConfigError(f"no address given (--address or ${ENV_ADDRESS}); accepted: {ACCEPTED}")
    if "://" not in text and all(_HOST_PORT.match(h.strip()) for h in text.split(",")):
        text = BROKER_SCHEME + text  # a bootstrap list, as Kafka's clients write it
    if text.startswith(BROKER_SCHEME):
        hosts = [h.strip() for h in text[len(BROKER_SCHEME) :].rstrip("/").split(",")]
        bad = [h for h in hosts if not _HOST_PORT.match(h) or int(h.rsplit(":", 1)[1]) > 65535]
        if not hosts or bad:
            raise ConfigError(
                f"bad broker address {text!r} (at {bad[0] if bad else ''!r}); "
                "accepted: sparklog://host:port[,host:port]"
            )
        return Address(text, bootstrap=",".join(hosts))
    if "://" in text:
        scheme = text.split("://", 1)[0].lower()
        if scheme not in ROOT_SCHEMES:
            raise ConfigError(
                f"unsupported address scheme {scheme!r} in {text!r}; accepted: {ACCEPTED}"
            )
        if scheme in ("s3", "s3a", "gs", "gcs") and not text.split("://", 1)[1].strip("/"):
            raise ConfigError(f"address {text!r} names no bucket; accepted: {ACCEPTED}")
    return Address(text, root=text)


def _parse_value(raw: str) -> Any:
    text = raw.strip()
    if text[:1] in "{[":
        try:
            return json.loads(text)
        except ValueError:
            raise ConfigError(f"storage option value {raw!r} is not valid JSON") from None
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    return raw


def _set_nested(out: dict[str, Any], path: list[str], value: Any) -> None:
    for part in path[:-1]:
        child = out.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"storage option {'.'.join(path)!r} conflicts with a plain value")
        out = child
    out[path[-1]] = value


def storage_options_from_env(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Storage options from ``SPARKLOG_STORAGE_<KEY>`` variables."""
    env = os.environ if environ is None else environ
    out: dict[str, Any] = {}
    for name, raw in sorted(env.items()):
        if name.startswith(ENV_STORAGE_PREFIX) and len(name) > len(ENV_STORAGE_PREFIX):
            path = name[len(ENV_STORAGE_PREFIX) :].lower().split("__")
            _set_nested(out, path, _parse_value(raw))
    return out


def parse_storage_options(pairs: Iterable[str]) -> dict[str, Any]:
    """``key=value`` pairs (dots nest: ``client_kwargs.endpoint_url=...``) into a dict."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"storage option {pair!r} is not key=value")
        _set_nested(out, key.strip().split("."), _parse_value(value))
    return out


def merge_options(*layers: Mapping[str, Any] | None) -> dict[str, Any]:
    """Later layers win; nested dicts merge."""
    out: dict[str, Any] = {}
    for layer in layers:
        for key, value in (layer or {}).items():
            if isinstance(value, Mapping) and isinstance(out.get(key), dict):
                out[key] = merge_options(out[key], value)
            else:
                out[key] = dict(value) if isinstance(value, Mapping) else value
    return out
