"""Topic configuration with Kafka's key names, defaults and validation."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sparklog.errors import InvalidConfigError


@dataclass(frozen=True)
class ConfigKey:
    """One accepted topic config key: its default and what values it accepts."""

    name: str
    default: Any
    doc: str
    kind: str  # "int" or "choice"
    minimum: int | None = None
    choices: tuple[str, ...] = ()

    def parse(self, raw: Any) -> Any:
        if self.kind == "int":
            try:
                value = int(str(raw).strip())
            except ValueError:
                raise InvalidConfigError(
                    f"config {self.name}={raw!r} is not an integer; accepted: integers "
                    f">= {self.minimum}"
                ) from None
            if self.minimum is not None and value < self.minimum:
                raise InvalidConfigError(
                    f"config {self.name}={value} is out of range; accepted: integers >= "
                    f"{self.minimum}"
                )
            return value
        text = str(raw).strip()
        if self.name == "cleanup.policy":
            parts = sorted({p.strip() for p in text.split(",") if p.strip()})
            if not parts or any(p not in ("compact", "delete") for p in parts):
                raise InvalidConfigError(
                    f"config cleanup.policy={raw!r} is not accepted; accepted: delete, compact, "
                    "compact,delete"
                )
            return ",".join(parts)
        if text not in self.choices:
            raise InvalidConfigError(
                f"config {self.name}={raw!r} is not accepted; accepted: {', '.join(self.choices)}"
            )
        return text


TOPIC_CONFIG_KEYS: dict[str, ConfigKey] = {
    k.name: k
    for k in [
        ConfigKey(
            "retention.ms",
            604_800_000,
            "Delete segments older than this; -1 keeps forever",
            "int",
            minimum=-1,
        ),
        ConfigKey(
            "retention.bytes",
            -1,
            "Delete oldest segments while a partition is larger; -1 means no size limit",
            "int",
            minimum=-1,
        ),
        ConfigKey(
            "cleanup.policy",
            "delete",
            "delete, compact, or compact,delete",
            "choice",
            choices=("delete", "compact", "compact,delete"),
        ),
        ConfigKey(
            "delete.retention.ms",
            86_400_000,
            "How long compaction keeps tombstones",
            "int",
            minimum=0,
        ),
        ConfigKey(
            "max.message.bytes",
            1_048_588,
            "Largest record accepted (key+value+headers)",
            "int",
            minimum=1,
        ),
        ConfigKey(
            "message.timestamp.type",
            "CreateTime",
            "CreateTime keeps the producer's timestamp; LogAppendTime stamps the write time",
            "choice",
            choices=("CreateTime", "LogAppendTime"),
        ),
        ConfigKey(
            "segment.bytes",
            67_108_864,
            "Target size when merging small segments",
            "int",
            minimum=1024,
        ),
        ConfigKey(
            "commit.shards",
            1,
            "How many shard logs the partitions share (partition p in shard p mod shards); "
            "fixed at creation",
            "int",
            minimum=1,
        ),
        ConfigKey(
            "producer.id.expiration.ms",
            86_400_000,
            "Idempotent producer state idle this long is dropped",
            "int",
            minimum=1,
        ),
        ConfigKey(
            "marker.retention.ms",
            604_800_000,
            "Spark sink (app id, version) markers older than this are dropped; a query "
            "replaying an older batch would append it again",
            "int",
            minimum=1,
        ),
        ConfigKey(
            "compression.type",
            "producer",
            "Compression of stored objects",
            "choice",
            choices=("producer", "none", "lz4", "zstd"),
        ),
    ]
}


def validate_config(config: Mapping[str, Any] | None) -> dict[str, Any]:
    """Parse user-supplied topic config into typed values; refuse unknown keys."""
    out: dict[str, Any] = {}
    for name, raw in (config or {}).items():
        key = TOPIC_CONFIG_KEYS.get(name)
        if key is None:
            raise InvalidConfigError(
                f"unknown topic config key {name!r}; accepted: {', '.join(TOPIC_CONFIG_KEYS)}"
            )
        out[name] = key.parse(raw)
    return out


def effective_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """Every key with its value: the topic's own where set, else the default."""
    return {name: config.get(name, key.default) for name, key in TOPIC_CONFIG_KEYS.items()}
