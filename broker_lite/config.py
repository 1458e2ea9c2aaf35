"""Broker configuration: ``conf/broker.toml`` keys, defaults, validation, env overrides.

Precedence, lowest first: the defaults below, the TOML file, ``SPARKLOG_<KEY>``
environment variables (``SPARKLOG_LINGER_MS=2``), then explicit overrides
(the CLI's ``--root``, ``--listen``, ``--id``).  A bad value raises
:class:`~broker_lite.errors.InvalidConfigError` naming the key and what it accepts.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from sparklog.errors import InvalidConfigError
from sparklog.settings import (
    BOOLEAN,
    TEXT,
    Setting,
    address,
    choice,
    integer,
    json_object,
    unknown_key,
)
from sparklog.storage.log import STAGED_OBJECT_MAX_AGE_MS

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ENV_PREFIX = "SPARKLOG_"


KEYS: dict[str, Setting] = {
    k.name: k
    for k in [
        Setting(
            "root", "./sparklog-data", "Storage root URL: a path, file://, memory:// or s3://", TEXT
        ),
        Setting(
            "storage_options",
            {},
            "fsspec storage options for the root (s3 endpoint, keys)",
            json_object("a table (TOML) or a JSON object (environment)"),
        ),
        Setting("fsync", False, "fsync objects and commits on a local root", BOOLEAN),
        Setting("snapshot_interval", 32, "Partition log snapshot every N commits", integer(1)),
        Setting(
            "listen", "127.0.0.1:8815", "Arrow Flight address; port 0 picks a free one", address()
        ),
        Setting(
            "advertised_host",
            "",
            "Host name other brokers and clients use; empty = listen host",
            TEXT,
        ),
        Setting(
            "kafka_listen",
            "127.0.0.1:9092",
            "Kafka protocol address; port 0 picks a free one; empty disables",
            address(disableable=True),
        ),
        Setting(
            "kafka_advertised",
            "",
            "HOST:PORT Kafka clients are told (Metadata); empty = the listen address",
            address(disableable=True),
        ),
        Setting(
            "kafka_max_request_bytes",
            104_857_600,
            "Largest Kafka request frame; a bigger one closes that connection",
            integer(1024),
        ),
        Setting("broker_id", 0, "This broker's id, unique in the cluster", integer(0)),
        Setting(
            "linger_ms", 5, "How long the leader gathers produce requests per topic", integer(0)
        ),
        Setting(
            "batch_bytes", 4_194_304, "Flush a topic's pending records at this size", integer(1)
        ),
        Setting("max_request_bytes", 67_108_864, "Largest produce request accepted", integer(1)),
        Setting(
            "max_request_batches",
            10_000,
            "Most record batches one produce request (DoPut) may carry",
            integer(1),
        ),
        Setting(
            "max_inflight_request_bytes",
            268_435_456,
            "Memory all produce requests being received or committed may hold together",
            integer(1),
        ),
        Setting(
            "max_concurrent_calls",
            512,
            "Flight calls served at once (each holds a server thread)",
            integer(1),
        ),
        Setting(
            "max_calls_per_connection",
            128,
            "Flight calls one client connection may have open at once",
            integer(1),
        ),
        Setting(
            "compression",
            "none",
            "Object compression when the topic says 'producer' and the request names no codec",
            choice("none", "lz4", "zstd"),
        ),
        Setting(
            "tail_cache_bytes", 67_108_864, "Memory for recently committed batches", integer(0)
        ),
        Setting("fetch_max_wait_ms", 30_000, "Upper bound on a fetch's long-poll wait", integer(0)),
        Setting(
            "fetch_refresh_ms",
            200,
            "How often a waiting fetch re-reads the root for other writers",
            integer(1),
        ),
        Setting(
            "lease_interval_ms", 1000, "How often a broker renews its liveness lease", integer(10)
        ),
        Setting(
            "lease_timeout_ms", 6000, "A broker whose lease is older than this is dead", integer(20)
        ),
        Setting(
            "replication_factor",
            1,
            "Brokers serving each partition (leader + warm followers)",
            integer(1),
        ),
        Setting(
            "force_leader",
            False,
            "Fault injection only: lead every partition regardless of the live set",
            BOOLEAN,
        ),
        Setting(
            "cleaner_interval_ms",
            300_000,
            "Period of retention, compaction and GC; 0 disables",
            integer(0),
        ),
        Setting(
            "gc_grace_ms",
            7_200_000,
            "Unreferenced objects older than this are deleted (>= the staged-object age limit)",
            integer(0),
        ),
        Setting(
            "group_min_session_timeout_ms",
            1000,
            "Smallest session timeout a member may ask for",
            integer(1),
        ),
        Setting(
            "group_max_session_timeout_ms",
            1_800_000,
            "Largest session timeout a member may ask for",
            integer(1),
        ),
        Setting(
            "group_initial_rebalance_delay_ms",
            0,
            "Wait for more members when an empty group gets its first",
            integer(0),
        ),
        Setting(
            "group_poll_ms", 50, "How often a waiting join or sync re-reads group state", integer(1)
        ),
        Setting(
            "retry_timeout_ms", 30_000, "Client: how long calls retry retriable errors", integer(0)
        ),
        Setting(
            "metrics_listen",
            "127.0.0.1:9815",
            "Prometheus endpoint HOST:PORT; empty disables",
            address(disableable=True),
        ),
        Setting("log_level", "INFO", "Log level", choice("DEBUG", "INFO", "WARNING", "ERROR")),
        Setting("log_format", "json", "json (one object per line) or text", choice("json", "text")),
    ]
}


@dataclass(frozen=True)
class BrokerConfig:
    """Every broker setting, typed (see ``KEYS`` and conf/broker.toml for meanings)."""

    root: str = "./sparklog-data"
    storage_options: dict[str, Any] = field(default_factory=dict)
    fsync: bool = False
    snapshot_interval: int = 32
    listen: str = "127.0.0.1:8815"
    advertised_host: str = ""
    kafka_listen: str = "127.0.0.1:9092"
    kafka_advertised: str = ""
    kafka_max_request_bytes: int = 104_857_600
    broker_id: int = 0
    linger_ms: int = 5
    batch_bytes: int = 4_194_304
    max_request_bytes: int = 67_108_864
    max_request_batches: int = 10_000
    max_inflight_request_bytes: int = 268_435_456
    max_concurrent_calls: int = 512
    max_calls_per_connection: int = 128
    compression: str = "none"
    tail_cache_bytes: int = 67_108_864
    fetch_max_wait_ms: int = 30_000
    fetch_refresh_ms: int = 200
    lease_interval_ms: int = 1_000
    lease_timeout_ms: int = 6_000
    replication_factor: int = 1
    force_leader: bool = False
    cleaner_interval_ms: int = 300_000
    gc_grace_ms: int = 7_200_000
    group_min_session_timeout_ms: int = 1_000
    group_max_session_timeout_ms: int = 1_800_000
    group_initial_rebalance_delay_ms: int = 0
    group_poll_ms: int = 50
    retry_timeout_ms: int = 30_000
    metrics_listen: str = "127.0.0.1:9815"
    log_level: str = "INFO"
    log_format: str = "json"

    @property
    def listen_host(self) -> str:
        return self.listen.rpartition(":")[0]

    @property
    def listen_port(self) -> int:
        return int(self.listen.rpartition(":")[2])


def _check_consistency(values: Mapping[str, Any]) -> None:
    kafka_host = values["kafka_listen"].rpartition(":")[0]
    if kafka_host in ("0.0.0.0", "::", "[::]") and not values["kafka_advertised"]:
        raise InvalidConfigError(
            f"config key 'kafka_listen' = {values['kafka_listen']!r} listens on every interface, "
            "so Kafka clients cannot be told where to connect; set 'kafka_advertised' "
            "(SPARKLOG_KAFKA_ADVERTISED) to the HOST:PORT clients should use"
        )
    grace = values["gc_grace_ms"]
    if grace != 0 and grace < STAGED_OBJECT_MAX_AGE_MS:
        raise InvalidConfigError(
            f"config key 'gc_grace_ms' = {grace} is not accepted; accepted: 0 (tests only) or "
            f">= {STAGED_OBJECT_MAX_AGE_MS} (the age past which a staged object is never "
            "committed)"
        )
    if values["lease_timeout_ms"] <= values["lease_interval_ms"]:
        raise InvalidConfigError(
            f"config key 'lease_timeout_ms' = {values['lease_timeout_ms']} is not accepted; "
            f"accepted: more than lease_interval_ms ({values['lease_interval_ms']})"
        )
    if values["group_max_session_timeout_ms"] < values["group_min_session_timeout_ms"]:
        raise InvalidConfigError(
            "config key 'group_max_session_timeout_ms' = "
            f"{values['group_max_session_timeout_ms']} is not accepted; accepted: at least "
            f"group_min_session_timeout_ms ({values['group_min_session_timeout_ms']})"
        )


def load_config(
    path: str | os.PathLike[str] | None = None,
    overrides: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
) -> BrokerConfig:
    """Defaults, then the TOML file, then SPARKLOG_* variables, then ``overrides``."""
    values: dict[str, Any] = {name: key.default for name, key in KEYS.items()}
    if path is not None:
        try:
            with open(path, "rb") as f:
                doc = tomllib.load(f)
        except FileNotFoundError:
            raise InvalidConfigError(f"config file {str(path)!r} does not exist") from None
        except tomllib.TOMLDecodeError as exc:
            raise InvalidConfigError(
                f"config file {str(path)!r} is not valid TOML: {exc}"
            ) from None
        for name, raw in doc.items():
            key = KEYS.get(name)
            if key is None:
                raise InvalidConfigError(unknown_key(name, "config key", KEYS, source=str(path)))
            values[name] = key.parse(raw, source=str(path), label="config key")
    environ = os.environ if env is None else env
    for name, key in KEYS.items():
        var = ENV_PREFIX + name.upper()
        if var in environ:
            values[name] = key.parse(environ[var], source=f"environment {var}", label="config key")
    for name, raw in (overrides or {}).items():
        if raw is None:
            continue
        key = KEYS.get(name)
        if key is None:
            raise InvalidConfigError(unknown_key(name, "config key", KEYS))
        values[name] = key.parse(raw, source="override", label="config key")
    _check_consistency(values)
    names = {f.name for f in fields(BrokerConfig)}
    assert names == set(KEYS), "BrokerConfig and KEYS must list the same keys"
    return BrokerConfig(**values)
