"""Client configuration with Kafka's meanings, validated up front.

Keys are accepted in Python style (``linger_ms``) or Kafka style
(``linger.ms``).  An unknown key or a bad value raises ConfigError naming the
key and what is accepted.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sparklog.errors import ConfigError


@dataclass(frozen=True)
class Option:
    default: Any
    parse: Callable[[str, Any], Any]
    doc: str


def _int(minimum: int, maximum: int | None = None) -> Callable[[str, Any], int]:
    def parse(key: str, raw: Any) -> int:
        try:
            value = int(str(raw).strip()) if not isinstance(raw, bool) else None
        except ValueError:
            value = None
        if value is None or value < minimum or (maximum is not None and value > maximum):
            upper = f" and <= {maximum}" if maximum is not None else ""
            raise ConfigError(
                f"{key}={raw!r} is not accepted; accepted: integers >= {minimum}{upper}"
            )
        return value

    return parse


def _choice(*choices: str, aliases: Mapping[str, str] | None = None) -> Callable[[str, Any], str]:
    def parse(key: str, raw: Any) -> str:
        text = str(raw).strip().lower()
        text = (aliases or {}).get(text, text)
        if text not in choices:
            raise ConfigError(f"{key}={raw!r} is not accepted; accepted: {', '.join(choices)}")
        return text

    return parse


def _bool(key: str, raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off"):
        return False
    raise ConfigError(f"{key}={raw!r} is not accepted; accepted: true, false")


def _str(key: str, raw: Any) -> str:
    return str(raw)


def _any(key: str, raw: Any) -> Any:
    return raw


def _callable(key: str, raw: Any) -> Any:
    if not callable(raw):
        raise ConfigError(f"{key}={raw!r} is not accepted; accepted: a function or None")
    return raw


PRODUCER_OPTIONS: dict[str, Option] = {
    "acks": Option("all", _choice("all", "1", "0", aliases={"-1": "all"}), "all, 1 or 0"),
    "linger_ms": Option(5, _int(0), "wait this long for more records before a flush"),
    "batch_size": Option(
        1 << 20, _int(1), "flush a partition's batch once it holds this many bytes"
    ),
    "compression": Option(
        None,
        _choice("none", "lz4", "zstd"),
        "none, lz4 or zstd; unset: the broker's setting (broker mode) or none (embedded)",
    ),
    "enable_idempotence": Option(True, _bool, "deduplicate retried batches"),
    "retries": Option(2_147_483_647, _int(0), "retry attempts within delivery_timeout_ms"),
    "retry_backoff_ms": Option(100, _int(0), "first retry delay; doubles up to 1 s"),
    "delivery_timeout_ms": Option(120_000, _int(1), "give up on a record after this long"),
    "buffer_memory": Option(64 << 20, _int(1024), "bytes buffered before send() blocks"),
    "max_block_ms": Option(60_000, _int(0), "how long send() blocks on a full buffer"),
    "metadata_max_age_ms": Option(5_000, _int(0), "refresh partition counts this often"),
    "client_id": Option("sparklog-producer", _str, "name in logs"),
    "storage_options": Option(None, _any, "fsspec storage options (embedded mode)"),
    "retry_timeout_ms": Option(30_000, _int(1), "broker mode: retry unreachable brokers this long"),
    "key_serializer": Option(None, _callable, "key -> bytes (called for non-null keys)"),
    "value_serializer": Option(None, _callable, "value -> bytes (called for non-null values)"),
}

CONSUMER_OPTIONS: dict[str, Option] = {
    "auto_offset_reset": Option(
        "latest",
        _choice("earliest", "latest", "error", aliases={"none": "error"}),
        "earliest, latest or error",
    ),
    "enable_auto_commit": Option(True, _bool, "commit positions every auto_commit_interval_ms"),
    "auto_commit_interval_ms": Option(5_000, _int(0), "auto-commit period"),
    "session_timeout_ms": Option(10_000, _int(100), "a member silent this long is removed"),
    "heartbeat_interval_ms": Option(None, _int(10), "default: session_timeout_ms / 3"),
    "rebalance_timeout_ms": Option(30_000, _int(100), "how long a rebalance waits for members"),
    "max_poll_records": Option(500, _int(1), "records returned by one poll()"),
    "fetch_max_bytes": Option(8 << 20, _int(1), "bytes fetched from a partition at once"),
    "fetch_max_wait_ms": Option(100, _int(0), "long-poll time of one fetch"),
    "partition_assignment_strategy": Option(
        "range", _choice("range", "roundrobin", "sticky"), "range, roundrobin or sticky"
    ),
    "metadata_max_age_ms": Option(
        5_000, _int(0), "how often a pattern subscription looks for new topics"
    ),
    "client_id": Option("sparklog-consumer", _str, "name in logs and member ids"),
    "storage_options": Option(None, _any, "fsspec storage options (embedded mode)"),
    "retry_timeout_ms": Option(30_000, _int(1), "broker mode: retry unreachable brokers this long"),
    "key_deserializer": Option(None, _callable, "bytes -> key (called for non-null keys)"),
    "value_deserializer": Option(None, _callable, "bytes -> value (called for non-null values)"),
    "consumer_timeout_ms": Option(
        None, _int(0), "iteration stops after this long without a record (default: never)"
    ),
}

#: Other names for a key: kafka-python's, confluent-kafka's (dotted, after "." -> "_").
ALIASES = {
    "compression_type": "compression",
    "max_poll_interval_ms": "rebalance_timeout_ms",
}

#: Keys naming the address, in the spellings kafka-python and confluent-kafka use.
ADDRESS_KEYS = ("bootstrap_servers", "bootstrap.servers", "address")


def client_settings(
    kind: str, address: Any, config: Mapping[str, Any]
) -> tuple[str | None, dict[str, Any]]:
    """Split an address and config given the sparklog, kafka-python or confluent-kafka way.

    ``address`` may be an address string, a list of ``host:port`` strings, or a
    confluent-kafka-style dict (``{"bootstrap.servers": ..., "linger.ms": 5}``)
    whose dotted keys are translated.  ``bootstrap_servers`` in the config names
    the address too (a broker list or a storage root).
    """
    merged: dict[str, Any] = {}
    if isinstance(address, Mapping):
        merged.update(address)
        address = None
    merged.update(config)
    given = [k for k in ADDRESS_KEYS if merged.get(k) is not None]
    if len(given) + (address is not None) > 1:
        raise ConfigError(
            f"{kind}: the address is given twice ({', '.join(given) or 'address'} and the first "
            "argument); accepted: one of them"
        )
    for key in ADDRESS_KEYS:
        value = merged.pop(key, None)
        if value is not None:
            address = value
    if isinstance(address, list | tuple):
        if not all(isinstance(a, str) for a in address):
            raise ConfigError(
                f"{kind}: bootstrap_servers={address!r} is not accepted; accepted: "
                "'host:port[,host:port]', a list of 'host:port' strings, or a storage root"
            )
        address = ",".join(a.strip() for a in address)
    if address is not None and not isinstance(address, str):
        raise ConfigError(
            f"{kind}: address {address!r} is not accepted; accepted: a string "
            "('host:port[,host:port]', sparklog://..., or a storage root URL/path)"
        )
    return address, merged


def parse_config(
    kind: str, options: Mapping[str, Option], given: Mapping[str, Any]
) -> dict[str, Any]:
    """Defaults overlaid with ``given`` (keys in Python or Kafka style), every value checked."""
    out = {k: o.default for k, o in options.items()}
    for raw_key, raw in given.items():
        key = raw_key.replace(".", "_").replace("-", "_")
        key = ALIASES.get(key, key)
        option = options.get(key)
        if option is None:
            raise ConfigError(
                f"unknown {kind} config {raw_key!r}; accepted (Python style, or Kafka's dotted "
                f"names): {', '.join(sorted(options))}"
            )
        out[key] = option.parse(raw_key, raw) if raw is not None else option.default
    return out
