"""Topic configuration with Kafka's key names, defaults and validation.

Every topic config Kafka defines is accepted (Kafka 4's ``LogConfig``, and the
three names Kafka 4.0 removed that clients built for Kafka 3 still send), typed
and range-checked as Kafka's ``ConfigDef`` checks it, stored, and described
back.  :data:`HONOURED` lists those with a meaning here; the others are kept
for compatibility and change nothing (docs/broker.md, "Topic configs").  Three
keys are sparklog's own (``commit.shards``, ``producer.id.expiration.ms``,
``marker.retention.ms``).  A name nobody defines is refused.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from sparklog.errors import InvalidConfigurationError
from sparklog.settings import (
    Setting,
    ValueKind,
    choice,
    choice_set,
    integer,
    unknown_key,
)

INT_MAX = 2**31 - 1
LONG_MAX = 2**63 - 1


def _int(minimum: int | None = None, maximum: int = INT_MAX) -> ValueKind:
    """Kafka's INT: a 32-bit integer within the range."""
    return integer(-(2**31) if minimum is None else minimum, maximum)


def _long(minimum: int | None = None) -> ValueKind:
    """Kafka's LONG: a 64-bit integer within the range (worded as every layer words an
    integer, without the 64-bit bound no setting reaches)."""
    bounded = integer(-(2**63) if minimum is None else minimum, LONG_MAX)
    return ValueKind(integer(minimum).accepted, bounded.convert)


def _kafka_boolean(raw: Any) -> bool:
    """Kafka's BOOLEAN: true or false in any case, nothing else."""
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text not in ("true", "false"):
        raise ValueError(raw)
    return text == "true"


def _ratio(raw: Any) -> float:
    """Kafka's DOUBLE between 0 and 1."""
    if isinstance(raw, bool):
        raise ValueError(raw)
    value = float(raw)
    if not 0 <= value <= 1:
        raise ValueError(raw)
    return value


def _throttled_replicas(raw: Any) -> str:
    """Kafka's ThrottledReplicaListValidator: empty, ``*``, or PARTITION:BROKER,..."""
    text = str(raw).strip()
    if text in ("", "*"):
        return text
    for item in text.split(","):
        partition, sep, broker = item.strip().partition(":")
        if not sep or not partition.isdigit() or not broker.isdigit():
            raise ValueError(raw)
    return ",".join(item.strip() for item in text.split(","))


def _gzip_level(raw: Any) -> int:
    """Kafka's gzip level: -1 (the codec's default) or 1 to 9."""
    value = integer(-1, 9).convert(raw)
    if value == 0:
        raise ValueError(raw)
    return int(value)


def _version(raw: Any) -> str:
    """A Kafka release as message.format.version names one (0.10.0, 2.8, 3.0-IV1)."""
    text = str(raw).strip()
    head = text.split("-")[0].split(".")
    if len(head) < 2 or not all(part.isdigit() for part in head):
        raise ValueError(raw)
    return text


BOOLEAN = ValueKind("true, false", _kafka_boolean)
GZIP_LEVEL = ValueKind("-1, or an integer >= 1 and <= 9", _gzip_level)
VERSION = ValueKind("a Kafka version such as 2.8 or 3.0-IV1", _version)
RATIO = ValueKind("a number >= 0 and <= 1", _ratio)
THROTTLED = ValueKind(
    "empty, * or a list of PARTITION:BROKER (e.g. 0:101,1:102)", _throttled_replicas
)
#: Kafka's ConfigEntry.ConfigType of each key (DescribeConfigs v3+ config_type)
KAFKA_TYPES = {"BOOLEAN": 1, "STRING": 2, "INT": 3, "LONG": 5, "DOUBLE": 6, "LIST": 7}
INACTIVE = "Accepted for Kafka compatibility; without effect here"


def _key(name: str, default: Any, doc: str, kind: ValueKind, kafka_type: str) -> Setting:
    setting = Setting(name, default, doc, kind)
    CONFIG_TYPES[name] = KAFKA_TYPES[kafka_type]
    return setting


CONFIG_TYPES: dict[str, int] = {}
TOPIC_CONFIG_KEYS: dict[str, Setting] = {
    k.name: k
    for k in [
        _key(
            "retention.ms",
            604_800_000,
            "Delete segments older than this; -1 keeps forever",
            _long(-1),
            "LONG",
        ),
        _key(
            "retention.bytes",
            -1,
            "Delete oldest segments while a partition is larger; -1 means no size limit",
            _long(-1),
            "LONG",
        ),
        _key(
            "cleanup.policy",
            "delete",
            "delete, compact, or compact,delete",
            choice_set("delete", "compact"),
            "LIST",
        ),
        _key(
            "delete.retention.ms",
            86_400_000,
            "How long compaction keeps tombstones",
            _long(0),
            "LONG",
        ),
        _key(
            "max.message.bytes",
            1_048_588,
            "Largest record accepted (key+value+headers)",
            _int(1),
            "INT",
        ),
        _key(
            "message.timestamp.type",
            "CreateTime",
            "CreateTime keeps the producer's timestamp; LogAppendTime stamps the write time",
            choice("CreateTime", "LogAppendTime"),
            "STRING",
        ),
        _key(
            "segment.bytes",
            67_108_864,
            "Target size when merging small segments",
            _int(1024),
            "INT",
        ),
        _key(
            "commit.shards",
            1,
            "How many shard logs the partitions share (partition p in shard p mod shards); each "
            "shard has one leader broker. Default: four per registered broker when a broker "
            "journalling its records creates the topic, one per registered broker otherwise "
            "(at most one per partition; 1 on a root no broker serves); fixed at creation",
            _int(1),
            "INT",
        ),
        _key(
            "producer.id.expiration.ms",
            86_400_000,
            "Idempotent producer state idle this long is dropped",
            _int(1),
            "INT",
        ),
        _key(
            "marker.retention.ms",
            604_800_000,
            "Spark sink (app id, version) markers older than this are dropped; a query "
            "replaying an older batch would append it again",
            _long(1),
            "LONG",
        ),
        _key(
            "compression.type",
            "producer",
            "Compression of stored objects (gzip is stored as zstd, snappy as lz4: Arrow IPC's "
            "codecs; uncompressed and none store them uncompressed)",
            choice("producer", "none", "uncompressed", "gzip", "snappy", "lz4", "zstd"),
            "STRING",
        ),
        # -- Kafka's other topic configs: accepted, validated, stored, described --------
        _key("compression.gzip.level", -1, INACTIVE, GZIP_LEVEL, "INT"),
        _key("compression.lz4.level", 9, INACTIVE, integer(1, 17), "INT"),
        _key("compression.zstd.level", 3, INACTIVE, integer(-131072, 22), "INT"),
        _key("file.delete.delay.ms", 60_000, INACTIVE, _long(0), "LONG"),
        _key("flush.messages", LONG_MAX, INACTIVE, _long(1), "LONG"),
        _key("flush.ms", LONG_MAX, INACTIVE, _long(0), "LONG"),
        _key("follower.replication.throttled.replicas", "", INACTIVE, THROTTLED, "LIST"),
        _key("index.interval.bytes", 4096, INACTIVE, _int(0), "INT"),
        _key("leader.replication.throttled.replicas", "", INACTIVE, THROTTLED, "LIST"),
        _key("local.retention.bytes", -2, INACTIVE, _long(-2), "LONG"),
        _key("local.retention.ms", -2, INACTIVE, _long(-2), "LONG"),
        _key(
            "max.compaction.lag.ms",
            LONG_MAX,
            "A dirty record older than this makes the cleaner compact, whatever the dirty ratio",
            _long(1),
            "LONG",
        ),
        _key(
            "message.timestamp.after.max.ms",
            3_600_000,
            "CreateTime: a record stamped further ahead of the broker's clock is refused",
            _long(0),
            "LONG",
        ),
        _key(
            "message.timestamp.before.max.ms",
            LONG_MAX,
            "CreateTime: a record stamped further behind the broker's clock is refused",
            _long(0),
            "LONG",
        ),
        _key(
            "min.cleanable.dirty.ratio",
            0.5,
            "The cleaner compacts once the dirty part is more than this share of the log's bytes",
            RATIO,
            "DOUBLE",
        ),
        _key(
            "min.compaction.lag.ms",
            0,
            "A record stays uncompacted at least this long (by its timestamp)",
            _long(0),
            "LONG",
        ),
        _key("min.insync.replicas", 1, INACTIVE, _int(1), "INT"),
        _key("preallocate", False, INACTIVE, BOOLEAN, "BOOLEAN"),
        _key("remote.log.copy.disable", False, INACTIVE, BOOLEAN, "BOOLEAN"),
        _key("remote.log.delete.on.disable", False, INACTIVE, BOOLEAN, "BOOLEAN"),
        _key("remote.storage.enable", False, INACTIVE, BOOLEAN, "BOOLEAN"),
        _key("segment.index.bytes", 10_485_760, INACTIVE, _int(4), "INT"),
        _key("segment.jitter.ms", 0, INACTIVE, _long(0), "LONG"),
        _key(
            "segment.ms",
            604_800_000,
            "A merged segment spans at most this much record time",
            _long(1),
            "LONG",
        ),
        _key("unclean.leader.election.enable", False, INACTIVE, BOOLEAN, "BOOLEAN"),
        # removed in Kafka 4.0; clients built for Kafka 3 (Connect, Debezium) still send them
        _key("message.downconversion.enable", True, INACTIVE, BOOLEAN, "BOOLEAN"),
        _key("message.format.version", "3.0-IV1", INACTIVE, VERSION, "STRING"),
        _key(
            "message.timestamp.difference.max.ms",
            LONG_MAX,
            "Deprecated: stands in for message.timestamp.before/after.max.ms where unset",
            _long(0),
            "LONG",
        ),
    ]
}
#: the keys with a meaning here; the others are stored and described, and change nothing
HONOURED = (
    "retention.ms",
    "retention.bytes",
    "cleanup.policy",
    "delete.retention.ms",
    "max.message.bytes",
    "message.timestamp.type",
    "segment.bytes",
    "commit.shards",
    "producer.id.expiration.ms",
    "marker.retention.ms",
    "compression.type",
    "message.timestamp.before.max.ms",
    "message.timestamp.after.max.ms",
    "message.timestamp.difference.max.ms",
    "min.compaction.lag.ms",
    "max.compaction.lag.ms",
    "min.cleanable.dirty.ratio",
    "segment.ms",
)


SPARKLOG_KEYS = ("commit.shards", "producer.id.expiration.ms", "marker.retention.ms")


def unknown_topic_key(name: str) -> InvalidConfigurationError:
    """The refusal of a topic config name neither Kafka nor sparklog defines."""
    close = difflib.get_close_matches(name, TOPIC_CONFIG_KEYS, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return InvalidConfigurationError(
        unknown_key(
            name,
            "topic config key",
            ["the topic configs Kafka defines (docs/broker.md lists them)", *SPARKLOG_KEYS],
        ).replace(";", f"{hint};", 1)
    )


def validate_config(config: Mapping[str, Any] | None) -> dict[str, Any]:
    """Parse user-supplied topic config into typed values; refuse unknown keys."""
    out: dict[str, Any] = {}
    for name, raw in (config or {}).items():
        key = TOPIC_CONFIG_KEYS.get(name)
        if key is None:
            raise unknown_topic_key(name)
        out[name] = key.parse(raw, label="config")
    return out


def check_combination(config: Mapping[str, Any]) -> None:
    """What Kafka's LogConfig.validateValues checks across keys (on the effective config)."""
    values = effective_config(config)
    low, high = values["min.compaction.lag.ms"], values["max.compaction.lag.ms"]
    if low > high:
        raise InvalidConfigurationError(
            f"config 'min.compaction.lag.ms'={low} is above 'max.compaction.lag.ms'={high}; "
            "accepted: min.compaction.lag.ms <= max.compaction.lag.ms"
        )


def timestamp_window(config: Mapping[str, Any]) -> tuple[int, int]:
    """How far (ms) a CreateTime record's timestamp may lie before and after the broker's
    clock: ``message.timestamp.before.max.ms`` / ``after.max.ms`` as Kafka reads them.

    ``config`` is the topic's own settings. The deprecated
    ``message.timestamp.difference.max.ms`` stands in for either when that one is not set
    (Kafka 3.6-3.9's rule; Kafka 4 dropped the key, clients built for Kafka 3 send it).
    """
    keys = TOPIC_CONFIG_KEYS
    difference = config.get("message.timestamp.difference.max.ms")
    window = []
    for name in ("message.timestamp.before.max.ms", "message.timestamp.after.max.ms"):
        if name in config:
            window.append(int(config[name]))
        elif difference is not None:
            window.append(int(difference))
        else:
            window.append(int(keys[name].default))
    return window[0], window[1]


def effective_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """Every key with its value: the topic's own where set, else the default."""
    return {name: config.get(name, key.default) for name, key in TOPIC_CONFIG_KEYS.items()}
