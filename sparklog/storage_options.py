"""Storage options (fsspec's, for the root): one spelling for every layer.

The broker, the CLI, the Python clients, ``open_root`` and the Spark source take
storage options the same way:

* in code: a dict (``open_root(url, {"key": ..., "client_kwargs": {...}})``);
* as text pairs: ``key=value``, dots nest (``client_kwargs.endpoint_url=http://...``):
  the CLI's ``-S``, Spark's ``storage.<key>`` options;
* in the environment: ``SPARKLOG_STORAGE_<KEY>``, ``<KEY>`` lower-cased and ``__``
  nesting (``SPARKLOG_STORAGE_CLIENT_KWARGS__ENDPOINT_URL``), read by the broker,
  the CLI, the clients and ``open_root`` when it is given no options;
* in ``conf/broker.toml``: the ``storage_options`` table.

A value starting with ``{`` or ``[`` is JSON, ``true``/``false`` a bool, anything
else a string.  ``SPARKLOG_STORAGE_OPTIONS`` (a JSON object, the broker's former
spelling) is refused with a message naming the right one, so one shell never
holds two spellings that break each other.  It lives at the bottom of the
package, beside ``errors``, so storage may use it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sparklog.errors import InvalidConfigurationError, SparklogError

ENV_STORAGE_PREFIX = "SPARKLOG_STORAGE_"
#: the former broker-only spelling, refused
REFUSED_ENV = "SPARKLOG_STORAGE_OPTIONS"


def _parse_value(key: str, raw: str, error: type[SparklogError]) -> Any:
    text = raw.strip()
    if text[:1] in "{[":
        try:
            return json.loads(text)
        except ValueError:
            raise error(
                f"storage option {key!r} = {raw!r} is not valid JSON; accepted: a JSON object "
                "or array, true/false, or a plain string"
            ) from None
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    return raw


def set_storage_option(
    out: dict[str, Any],
    path: Sequence[str],
    raw: str,
    *,
    key: str | None = None,
    error: type[SparklogError] = InvalidConfigurationError,
) -> None:
    """Set one storage option in ``out`` (the one rule for env, CLI and Spark options).

    ``path`` nests (``client_kwargs``, ``endpoint_url``); a value starting with
    ``{`` or ``[`` is JSON, ``true``/``false`` a bool, anything else a string.
    ``key`` is the option as the user wrote it, named in errors of class ``error``.
    """
    name = key if key is not None else ".".join(path)
    value = _parse_value(name, raw, error)
    node = out
    for part in path[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise error(f"storage option {name!r} conflicts with a plain value at {part!r}")
        node = child
    node[path[-1]] = value


def storage_options_from_env(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Storage options from ``SPARKLOG_STORAGE_<KEY>`` variables."""
    env = os.environ if environ is None else environ
    if REFUSED_ENV in env:
        raise InvalidConfigurationError(
            f"environment variable {REFUSED_ENV} is not read; accepted: one variable per "
            f"storage option, {ENV_STORAGE_PREFIX}<KEY> with __ nesting (for example "
            f"{ENV_STORAGE_PREFIX}CLIENT_KWARGS__ENDPOINT_URL=http://127.0.0.1:9000, or "
            f'{ENV_STORAGE_PREFIX}CLIENT_KWARGS=\'{{"endpoint_url": "..."}}\')'
        )
    out: dict[str, Any] = {}
    for name, raw in sorted(env.items()):
        if name.startswith(ENV_STORAGE_PREFIX) and len(name) > len(ENV_STORAGE_PREFIX):
            path = name[len(ENV_STORAGE_PREFIX) :].lower().split("__")
            set_storage_option(out, path, raw, key=name)
    return out


def parse_storage_options(pairs: Iterable[str]) -> dict[str, Any]:
    """``key=value`` pairs (dots nest: ``client_kwargs.endpoint_url=...``) into a dict."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise InvalidConfigurationError(f"storage option {pair!r} is not key=value")
        set_storage_option(out, key.strip().split("."), value, key=key.strip())
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
