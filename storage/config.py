"""Topic configuration with Kafka's key names, defaults and validation."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sparklog.errors import InvalidConfigurationError
from sparklog.settings import Setting, choice, choice_set, integer, unknown_key

TOPIC_CONFIG_KEYS: dict[str, Setting] = {
    k.name: k
    for k in [
        Setting(
            "retention.ms",
            604_800_000,
            "Delete segments older than this; -1 keeps forever",
            integer(-1),
        ),
        Setting(
            "retention.bytes",
            -1,
            "Delete oldest segments while a partition is larger; -1 means no size limit",
            integer(-1),
        ),
        Setting(
            "cleanup.policy",
            "delete",
            "delete, compact, or compact,delete",
            choice_set("delete", "compact"),
        ),
        Setting(
            "delete.retention.ms", 86_400_000, "How long compaction keeps tombstones", integer(0)
        ),
        Setting(
            "max.message.bytes",
            1_048_588,
            "Largest record accepted (key+value+headers)",
            integer(1),
        ),
        Setting(
            "message.timestamp.type",
            "CreateTime",
            "CreateTime keeps the producer's timestamp; LogAppendTime stamps the write time",
            choice("CreateTime", "LogAppendTime"),
        ),
        Setting(
            "segment.bytes", 67_108_864, "Target size when merging small segments", integer(1024)
        ),
        Setting(
            "commit.shards",
            1,
            "How many shard logs the partitions share (partition p in shard p mod shards); each "
            "shard has one leader broker. Default: one per registered broker when the topic is "
            "created (at most one per partition; 1 on a root no broker serves); fixed at creation",
            integer(1),
        ),
        Setting(
            "producer.id.expiration.ms",
            86_400_000,
            "Idempotent producer state idle this long is dropped",
            integer(1),
        ),
        Setting(
            "marker.retention.ms",
            604_800_000,
            "Spark sink (app id, version) markers older than this are dropped; a query "
            "replaying an older batch would append it again",
            integer(1),
        ),
        Setting(
            "compression.type",
            "producer",
            "Compression of stored objects",
            choice("producer", "none", "lz4", "zstd"),
        ),
    ]
}


def validate_config(config: Mapping[str, Any] | None) -> dict[str, Any]:
    """Parse user-supplied topic config into typed values; refuse unknown keys."""
    out: dict[str, Any] = {}
    for name, raw in (config or {}).items():
        key = TOPIC_CONFIG_KEYS.get(name)
        if key is None:
            raise InvalidConfigurationError(
                unknown_key(name, "topic config key", TOPIC_CONFIG_KEYS)
            )
        out[name] = key.parse(raw, label="config")
    return out


def effective_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """Every key with its value: the topic's own where set, else the default."""
    return {name: config.get(name, key.default) for name, key in TOPIC_CONFIG_KEYS.items()}
