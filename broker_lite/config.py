"""Broker configuration: ``conf/broker.toml`` keys, defaults, validation, env overrides.

Precedence, lowest first: the defaults below, the TOML file, ``SPARKLOG_<KEY>``
environment variables (``SPARKLOG_LINGER_MS=2``), then explicit overrides
(the CLI's ``--root``, ``--listen``, ``--id``).  A bad value raises
:class:`~broker_lite.errors.InvalidConfigError` naming the key and what it accepts.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from sparklog.errors import InvalidConfigError
from sparklog.storage.log import STAGED_OBJECT_MAX_AGE_MS

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ENV_PREFIX = "SPARKLOG_"
#: Address keys whose empty value disables the listener.
DISABLEABLE = ("metrics_listen", "kafka_listen", "kafka_advertised")


@dataclass(frozen=True)
class Key:
    """One accepted broker config key."""

    name: str
    kind: str  # int, bool, str, address, choice, table
    default: Any
    doc: str
    minimum: int | None = None
    choices: tuple[str, ...] = ()

    def accepted(self) -> str:
        if self.kind == "int":
            return f"an integer >= {self.minimum}" if self.minimum is not None else "an integer"
        if self.kind == "bool":
            return "true or false"
        if self.kind == "choice":
            return ", ".join(self.choices)
        if self.kind == "address":
            tail = " or empty to disable" if self.name in DISABLEABLE else ""
            return "HOST:PORT with PORT in 0-65535" + tail
        if self.kind == "table":
            return "a table (TOML) or a JSON object (environment)"
        return "a string"

    def parse(self, raw: Any, source: str) -> Any:
        def bad() -> InvalidConfigError:
            return InvalidConfigError(
                f"config key {self.name!r} = {raw!r} (from {source}) is not accepted; "
                f"accepted: {self.accepted()}"
            )

        if self.kind == "int":
            if isinstance(raw, bool):
                raise bad()
            try:
                value = int(str(raw).strip()) if not isinstance(raw, int) else raw
            except ValueError:
                raise bad() from None
            if self.minimum is not None and value < self.minimum:
                raise bad()
            return value
        if self.kind == "bool":
            if isinstance(raw, bool):
                return raw
            text = str(raw).strip().lower()
            if text in ("1", "true", "yes", "on"):
                return True
            if text in ("0", "false", "no", "off"):
                return False
            raise bad()
        if self.kind == "choice":
            text = str(raw).strip()
            if text not in self.choices:
                raise bad()
            return text
        if self.kind == "address":
            text = str(raw).strip()
            if text == "" and self.name in DISABLEABLE:
                return ""
            host, sep, port = text.rpartition(":")
            if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
                raise bad()
            return text
        if self.kind == "table":
            if isinstance(raw, str):
                try:
                    raw = json.loads(raw)
                except ValueError:
                    raise bad() from None
            if not isinstance(raw, dict):
                raise bad()
            return dict(raw)
        if not isinstance(raw, str | int | float):
            raise bad()
        return str(raw)


KEYS: dict[str, Key] = {
    k.name: k
    for k in [
        Key(
            "root",
            "str",
            "./sparklog-data",
            "Storage root URL: a path, file://, memory:// or s3://",
        ),
        Key(
            "storage_options",
            "table",
            {},
            "fsspec storage options for the root (s3 endpoint, keys)",
        ),
        Key("fsync", "bool", False, "fsync objects and commits on a local root"),
        Key("snapshot_interval", "int", 32, "Partition log snapshot every N commits", minimum=1),
        Key("listen", "address", "127.0.0.1:8815", "Arrow Flight address; port 0 picks a free one"),
        Key(
            "advertised_host",
            "str",
            "",
            "Host name other brokers and clients use; empty = listen host",
        ),
        Key(
            "kafka_listen",
            "address",
            "127.0.0.1:9092",
            "Kafka protocol address; port 0 picks a free one; empty disables",
        ),
        Key(
            "kafka_advertised",
            "address",
            "",
            "HOST:PORT Kafka clients are told (Metadata); empty = the listen address",
        ),
        Key(
            "kafka_max_request_bytes",
            "int",
            104_857_600,
            "Largest Kafka request frame; a bigger one closes that connection",
            minimum=1024,
        ),
        Key("broker_id", "int", 0, "This broker's id, unique in the cluster", minimum=0),
        Key(
            "linger_ms",
            "int",
            5,
            "How long the leader gathers produce requests per topic",
            minimum=0,
        ),
        Key(
            "batch_bytes",
            "int",
            4_194_304,
            "Flush a topic's pending records at this size",
            minimum=1,
        ),
        Key("max_request_bytes", "int", 67_108_864, "Largest produce request accepted", minimum=1),
        Key(
            "max_request_batches",
            "int",
            10_000,
            "Most record batches one produce request (DoPut) may carry",
            minimum=1,
        ),
        Key(
            "max_inflight_request_bytes",
            "int",
            268_435_456,
            "Memory all produce requests being received or committed may hold together",
            minimum=1,
        ),
        Key(
            "max_concurrent_calls",
            "int",
            512,
            "Flight calls served at once (each holds a server thread)",
            minimum=1,
        ),
        Key(
            "max_calls_per_connection",
            "int",
            128,
            "Flight calls one client connection may have open at once",
            minimum=1,
        ),
        Key(
            "compression",
            "choice",
            "none",
            "Object compression when the topic says 'producer' and the request names no codec",
            choices=("none", "lz4", "zstd"),
        ),
        Key(
            "tail_cache_bytes",
            "int",
            67_108_864,
            "Memory for recently committed batches",
            minimum=0,
        ),
        Key(
            "fetch_max_wait_ms", "int", 30_000, "Upper bound on a fetch's long-poll wait", minimum=0
        ),
        Key(
            "fetch_refresh_ms",
            "int",
            200,
            "How often a waiting fetch re-reads the root for other writers",
            minimum=1,
        ),
        Key(
            "lease_interval_ms",
            "int",
            1_000,
            "How often a broker renews its liveness lease",
            minimum=10,
        ),
        Key(
            "lease_timeout_ms",
            "int",
            6_000,
            "A broker whose lease is older than this is dead",
            minimum=20,
        ),
        Key(
            "replication_factor",
            "int",
            1,
            "Brokers serving each partition (leader + warm followers)",
            minimum=1,
        ),
        Key(
            "force_leader",
            "bool",
            False,
            "Fault injection only: lead every partition regardless of the live set",
        ),
        Key(
            "cleaner_interval_ms",
            "int",
            300_000,
            "Period of retention, compaction and GC; 0 disables",
            minimum=0,
        ),
        Key(
            "gc_grace_ms",
            "int",
            7_200_000,
            "Unreferenced objects older than this are deleted (>= the staged-object age limit)",
            minimum=0,
        ),
        Key(
            "group_min_session_timeout_ms",
            "int",
            1_000,
            "Smallest session timeout a member may ask for",
            minimum=1,
        ),
        Key(
            "group_max_session_timeout_ms",
            "int",
            1_800_000,
            "Largest session timeout a member may ask for",
            minimum=1,
        ),
        Key(
            "group_initial_rebalance_delay_ms",
            "int",
            0,
            "Wait for more members when an empty group gets its first",
            minimum=0,
        ),
        Key(
            "group_poll_ms",
            "int",
            50,
            "How often a waiting join or sync re-reads group state",
            minimum=1,
        ),
        Key(
            "retry_timeout_ms",
            "int",
            30_000,
            "Client: how long calls retry retriable errors",
            minimum=0,
        ),
        Key(
            "metrics_listen",
            "address",
            "127.0.0.1:9815",
            "Prometheus endpoint HOST:PORT; empty disables",
        ),
        Key(
            "log_level",
            "choice",
            "INFO",
            "Log level",
            choices=("DEBUG", "INFO", "WARNING", "ERROR"),
        ),
        Key(
            "log_format",
            "choice",
            "json",
            "json (one object per line) or text",
            choices=("json", "text"),
        ),
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
                raise InvalidConfigError(
                    f"unknown config key {name!r} in {str(path)!r}; accepted: {', '.join(KEYS)}"
                )
            values[name] = key.parse(raw, str(path))
    environ = os.environ if env is None else env
    for name, key in KEYS.items():
        var = ENV_PREFIX + name.upper()
        if var in environ:
            values[name] = key.parse(environ[var], f"environment {var}")
    for name, raw in (overrides or {}).items():
        if raw is None:
            continue
        key = KEYS.get(name)
        if key is None:
            raise InvalidConfigError(f"unknown config key {name!r}; accepted: {', '.join(KEYS)}")
        values[name] = key.parse(raw, "override")
    _check_consistency(values)
    names = {f.name for f in fields(BrokerConfig)}
    assert names == set(KEYS), "BrokerConfig and KEYS must list the same keys"
    return BrokerConfig(**values)
