"""Client configuration with Kafka's meanings, validated up front.

Keys are accepted in Python style (``linger_ms``) or Kafka style
(``linger.ms``).  An unknown key or a bad value raises InvalidConfigurationError naming the
key and what is accepted.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sparklog.errors import InvalidConfigurationError
from sparklog.settings import (
    ANYTHING,
    BOOLEAN,
    FUNCTION,
    TEXT,
    Setting,
    choice,
    integer,
)

#: Settings producers and consumers share.
SHARED_OPTIONS = (
    Setting("storage_options", None, "fsspec storage options (embedded mode)", ANYTHING),
    Setting(
        "retry_timeout_ms", 30_000, "broker mode: retry unreachable brokers this long", integer(1)
    ),
    # broker mode: TLS and users, kafka-python's names (sparklog/client/security.py)
    Setting(
        "security_protocol",
        None,
        "PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL (unset: $SPARKLOG_SECURITY_PROTOCOL)",
        choice("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL", fold_case=True),
    ),
    Setting(
        "sasl_mechanism",
        None,
        "PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (the broker checks the same users)",
        choice("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", fold_case=True),
    ),
    Setting("sasl_plain_username", None, "SASL user", TEXT),
    Setting("sasl_plain_password", None, "SASL password (never logged)", TEXT),
    Setting("ssl_cafile", None, "PEM CAs that sign the brokers' certificates", TEXT),
    Setting("ssl_certfile", None, "PEM client certificate (brokers asking for one)", TEXT),
    Setting("ssl_keyfile", None, "PEM key of ssl_certfile", TEXT),
)

PRODUCER_OPTIONS: dict[str, Setting] = {
    s.name: s
    for s in [
        Setting(
            "acks",
            "all",
            "all, 1 or 0",
            choice("all", "1", "0", aliases={"-1": "all"}, fold_case=True),
        ),
        Setting("linger_ms", 5, "wait this long for more records before a flush", integer(0)),
        Setting(
            "batch_size",
            1_048_576,
            "flush a partition's batch once it holds this many bytes",
            integer(1),
        ),
        Setting(
            "compression",
            None,
            "none, lz4 or zstd; unset: the broker's setting (broker mode) or none (embedded)",
            choice("none", "lz4", "zstd", fold_case=True),
        ),
        Setting("enable_idempotence", True, "deduplicate retried batches", BOOLEAN),
        Setting("retries", 2_147_483_647, "retry attempts within delivery_timeout_ms", integer(0)),
        Setting("retry_backoff_ms", 100, "first retry delay; doubles up to 1 s", integer(0)),
        Setting("delivery_timeout_ms", 120_000, "give up on a record after this long", integer(1)),
        Setting("buffer_memory", 67_108_864, "bytes buffered before send() blocks", integer(1024)),
        Setting("max_block_ms", 60_000, "how long send() blocks on a full buffer", integer(0)),
        Setting("metadata_max_age_ms", 5000, "refresh partition counts this often", integer(0)),
        Setting("client_id", "sparklog-producer", "name in logs", TEXT),
        *SHARED_OPTIONS,
        Setting("key_serializer", None, "key -> bytes (called for non-null keys)", FUNCTION),
        Setting("value_serializer", None, "value -> bytes (called for non-null values)", FUNCTION),
    ]
}

CONSUMER_OPTIONS: dict[str, Setting] = {
    s.name: s
    for s in [
        Setting(
            "auto_offset_reset",
            "latest",
            "earliest, latest or error",
            choice("earliest", "latest", "error", aliases={"none": "error"}, fold_case=True),
        ),
        Setting(
            "enable_auto_commit", True, "commit positions every auto_commit_interval_ms", BOOLEAN
        ),
        Setting("auto_commit_interval_ms", 5000, "auto-commit period", integer(0)),
        Setting("session_timeout_ms", 10_000, "a member silent this long is removed", integer(100)),
        Setting("heartbeat_interval_ms", None, "default: session_timeout_ms / 3", integer(10)),
        Setting(
            "rebalance_timeout_ms", 30_000, "how long a rebalance waits for members", integer(100)
        ),
        Setting("max_poll_records", 500, "records returned by one poll()", integer(1)),
        Setting("fetch_max_bytes", 8_388_608, "bytes fetched from a partition at once", integer(1)),
        Setting("fetch_max_wait_ms", 100, "long-poll time of one fetch", integer(0)),
        Setting(
            "isolation_level",
            "read_uncommitted",
            "read_committed: only committed transactions' records, up to the last stable offset",
            choice("read_uncommitted", "read_committed", fold_case=True),
        ),
        Setting(
            "partition_assignment_strategy",
            "range",
            "range, roundrobin or sticky",
            choice("range", "roundrobin", "sticky", fold_case=True),
        ),
        Setting(
            "metadata_max_age_ms",
            5000,
            "how often a pattern subscription looks for new topics",
            integer(0),
        ),
        Setting("client_id", "sparklog-consumer", "name in logs and member ids", TEXT),
        *SHARED_OPTIONS,
        Setting("key_deserializer", None, "bytes -> key (called for non-null keys)", FUNCTION),
        Setting(
            "value_deserializer", None, "bytes -> value (called for non-null values)", FUNCTION
        ),
        Setting(
            "consumer_timeout_ms",
            None,
            "iteration stops after this long without a record (default: never)",
            integer(0),
        ),
    ]
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
        raise InvalidConfigurationError(
            f"{kind}: the address is given twice ({', '.join(given) or 'address'} and the first "
            "argument); accepted: one of them"
        )
    for key in ADDRESS_KEYS:
        value = merged.pop(key, None)
        if value is not None:
            address = value
    if isinstance(address, list | tuple):
        if not all(isinstance(a, str) for a in address):
            raise InvalidConfigurationError(
                f"{kind}: bootstrap_servers={address!r} is not accepted; accepted: "
                "'host:port[,host:port]', a list of 'host:port' strings, or a storage root"
            )
        address = ",".join(a.strip() for a in address)
    if address is not None and not isinstance(address, str):
        raise InvalidConfigurationError(
            f"{kind}: address {address!r} is not accepted; accepted: a string "
            "('host:port[,host:port]', sparklog://..., or a storage root URL/path)"
        )
    return address, merged


def parse_config(
    kind: str, options: Mapping[str, Setting], given: Mapping[str, Any]
) -> dict[str, Any]:
    """Defaults overlaid with ``given`` (keys in Python or Kafka style), every value checked."""
    out = {k: o.default for k, o in options.items()}
    for raw_key, raw in given.items():
        key = raw_key.replace(".", "_").replace("-", "_")
        key = ALIASES.get(key, key)
        option = options.get(key)
        if option is None:
            raise InvalidConfigurationError(
                f"unknown {kind} config {raw_key!r}; accepted (Python style, or Kafka's dotted "
                f"names): {', '.join(sorted(options))}"
            )
        out[key] = (
            option.parse(raw, spelled=raw_key, error=InvalidConfigurationError)
            if raw is not None
            else option.default
        )
    return out
