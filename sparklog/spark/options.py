"""Options of ``format("sparklog")``: parsed once, validated with clear messages.

The option names and meanings are those of Spark's Kafka source and sink, so a
pipeline moves over by changing ``format("kafka")`` to ``format("sparklog")``;
sparklog adds ``root``, ``broker``, ``storage.<key>``, ``group``, ``txnAppId``
and ``compression``.  Spark passes options case-insensitively (lower-cased);
messages use the documented spelling.  Unknown options are refused so that a
typo never silently changes what a query reads.  Kafka client properties
(``kafka.*``) are accepted and ignored, except: ``kafka.bootstrap.servers`` is
taken as ``broker``, ``kafka.group.id`` as ``group``, ``kafka.isolation.level``
is honoured (read_committed: up to the last stable offset, no aborted
transactions' records), and the properties Kafka's
connector refuses (``kafka.auto.offset.reset``, the (de)serializers,
``kafka.enable.auto.commit``, ``kafka.interceptor.classes``) are refused with
its reasons.  Like Kafka's connector, a batch read ignores the streaming-only
rate options with a warning, so one options dict serves a stream and its backfill.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sparklog.errors import SparkOptionError
from sparklog.settings import KAFKA_CODECS as KAFKA_COMPRESSIONS
from sparklog.settings import choice, integer, parse_value, refusal
from sparklog.storage_options import set_storage_option

log = logging.getLogger(__name__)

ROOT_ENV = "SPARKLOG_ROOT"

# Canonical spellings (Spark lower-cases option keys).
SOURCE_KEYS = (
    "root",
    "broker",
    "subscribe",
    "subscribePattern",
    "assign",
    "startingOffsets",
    "startingTimestamp",
    "startingOffsetsByTimestamp",
    "startingOffsetsByTimestampStrategy",
    "endingOffsets",
    "endingTimestamp",
    "endingOffsetsByTimestamp",
    "maxOffsetsPerTrigger",
    "minOffsetsPerTrigger",
    "maxTriggerDelay",
    "maxBytesPerTrigger",
    "failOnDataLoss",
    "includeHeaders",
    "minPartitions",
    "maxRecordsPerPartition",
    "group",
)
#: Streaming-only options that a batch read ignores with a warning (as Kafka's connector does).
STREAM_ONLY_KEYS = ("maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay")
STARTING_OFFSETS_INSTEAD = (
    "Kafka option 'auto.offset.reset' is not supported. Instead set the source option "
    "'startingOffsets' to 'earliest' or 'latest' to specify where to start. Structured "
    "Streaming manages which offsets are consumed internally, rather than relying on the "
    "consumer to do it, so no data is missed when topics or partitions are added. Note that "
    "'startingOffsets' only applies when a new streaming query is started; a resumed query "
    "always continues where it left off"
)
#: kafka.* consumer properties Kafka's connector refuses, with its reasons.
REFUSED_SOURCE_KAFKA_KEYS = {
    "kafka.auto.offset.reset": STARTING_OFFSETS_INSTEAD,
    "kafka.key.deserializer": (
        "Kafka option 'key.deserializer' is not supported as keys are deserialized as byte "
        "arrays. Use DataFrame operations to explicitly deserialize the keys"
    ),
    "kafka.value.deserializer": (
        "Kafka option 'value.deserializer' is not supported as values are deserialized as byte "
        "arrays (or the topic's struct on a typed topic). Use DataFrame operations to "
        "explicitly deserialize the values"
    ),
    "kafka.enable.auto.commit": (
        "Kafka option 'enable.auto.commit' is not supported: the checkpoint holds the offsets; "
        "set option 'group' to also record them as the group's committed offsets"
    ),
    "kafka.interceptor.classes": "Kafka option 'interceptor.classes' is not supported",
}
#: kafka.* producer properties Kafka's connector refuses.
REFUSED_SINK_KAFKA_KEYS = {
    "kafka.key.serializer": (
        "Kafka option 'key.serializer' is not supported as keys are serialized as byte arrays. "
        "Use DataFrame operations to explicitly serialize the keys into a string or binary column"
    ),
    "kafka.value.serializer": (
        "Kafka option 'value.serializer' is not supported as values are serialized as byte "
        "arrays. Use DataFrame operations to explicitly serialize the values into a string or "
        "binary column"
    ),
    "kafka.interceptor.classes": "Kafka option 'interceptor.classes' is not supported",
}
SINK_KEYS = (
    "root",
    "broker",
    "topic",
    "txnAppId",
    "txnVersion",
    "compression",
    "includeHeaders",
)
#: Kafka-source options that tune Kafka's consumer; accepted so pipelines move
#: over unchanged, without effect here.
IGNORED_KEYS = (
    "groupIdPrefix",
    "kafkaConsumer.pollTimeoutMs",
    "fetchOffset.numRetries",
    "fetchOffset.retryIntervalMs",
    "maxOffsetsPerTrigger.strict",
    "path",
    "checkpointLocation",
    "queryName",
)
COMPRESSIONS = ("none", "lz4", "zstd")
#: Kafka producer codecs -> the Arrow IPC codec the stored objects use.  Arrow IPC
#: compresses with lz4 or zstd only, so gzip (a ratio codec) is stored as zstd and snappy
#: (a speed codec) as lz4: compressed as Kafka's producer would, by the nearest codec.
DURATION_RE = re.compile(r"^\s*(\d+)\s*(us|ms|s|m|min|h|d)?\s*$", re.IGNORECASE)
DURATION_MS = {"us": 0.001, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000}
DURATION_MS["d"] = 86_400_000


@dataclass(frozen=True)
class Subscription:
    """Which topic-partitions a query reads: exactly one of the three Kafka ways."""

    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assign: tuple[tuple[str, tuple[int, ...]], ...] = ()

    @property
    def kind(self) -> str:
        if self.pattern is not None:
            return "subscribePattern"
        return "assign" if self.assign else "subscribe"

    def covers(self, topic: str, partition: int) -> bool:
        """Whether this subscription reads ``partition`` of ``topic`` (when it exists)."""
        if self.assign:
            return partition in dict(self.assign).get(topic, ())
        return self.matches(topic)

    def matches(self, topic: str) -> bool:
        if self.pattern is not None:
            # Kafka's connector searches (java.util.regex find): unanchored, like re.search.
            return re.search(self.pattern, topic) is not None
        if self.assign:
            return any(t == topic for t, _ in self.assign)
        return topic in self.topics


@dataclass(frozen=True)
class OffsetSpec:
    """A starting or ending position: earliest, latest, per-partition offsets or timestamps.

    ``offsets`` maps topic -> partition -> offset, where -2 means earliest and
    -1 latest (Kafka's convention).  ``timestamps`` maps topic -> partition ->
    ms; ``timestamp_ms`` applies one timestamp to every partition.
    """

    kind: str  # earliest | latest | offsets | timestamp | timestamps
    offsets: dict[str, dict[int, int]] = field(default_factory=dict)
    timestamps: dict[str, dict[int, int]] = field(default_factory=dict)
    timestamp_ms: int = -1


@dataclass(frozen=True)
class SourceOptions:
    """Everything the reader needs, validated."""

    root: str
    storage_options: dict[str, Any]
    broker: str | None
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec | None
    timestamp_strategy: str = "error"
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = 15 * 60_000
    max_bytes_per_trigger: int | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    group: str | None = None
    #: a new query (no checkpoint) starts at the group's offsets: option ``group`` only;
    #: ``kafka.group.id`` keeps Kafka's meaning (progress recorded, start from startingOffsets)
    group_resumes: bool = False
    #: ``kafka.isolation.level=read_committed``: "latest" is the last stable offset and
    #: aborted transactions' records are left out (Kafka's connector's default is uncommitted)
    read_committed: bool = False


@dataclass(frozen=True)
class SinkOptions:
    """Everything the writer needs, validated."""

    root: str
    storage_options: dict[str, Any]
    broker: str | None
    topic: str | None
    txn_app_id: str | None
    compression: str = "none"
    txn_version: int | None = None


SPARK_BOOLEAN = choice("true", "false", fold_case=True)


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items() if v is not None}


def _check_known(opts: Mapping[str, str], allowed: tuple[str, ...], what: str) -> None:
    known = {k.lower() for k in (*allowed, *IGNORED_KEYS)}
    refused = REFUSED_SOURCE_KAFKA_KEYS if what == "source" else REFUSED_SINK_KAFKA_KEYS
    for key in opts:
        if key in refused:
            raise SparkOptionError(refused[key])
        if what == "source" and key == "kafka.isolation.level":
            level = opts[key].strip().lower()
            if level not in ("read_uncommitted", "read_committed"):
                raise SparkOptionError(
                    f"option 'kafka.isolation.level'={opts[key]!r} is not accepted; accepted: "
                    "read_uncommitted, read_committed"
                )
        if key in known or key.startswith(("storage.", "kafka.", "spark.")):
            continue
        raise SparkOptionError(
            f"unknown {what} option {key!r}; accepted: {', '.join(allowed)}, storage.<key>, "
            "kafka.* (ignored; kafka.bootstrap.servers is taken as broker, kafka.group.id as "
            "group)"
        )


def storage_options_of(opts: Mapping[str, str]) -> dict[str, Any]:
    """``storage.<key>`` options as fsspec storage options; dots nest (client_kwargs.x).

    Values follow :func:`~sparklog.storage_options.set_storage_option` (JSON, booleans).
    """
    out: dict[str, Any] = {}
    for key, raw in opts.items():
        if not key.startswith("storage."):
            continue
        path = key[len("storage.") :].split(".")
        set_storage_option(out, path, raw, key=key, error=SparkOptionError)
    return out


def _root(opts: Mapping[str, str]) -> str:
    root = opts.get("root") or os.environ.get(ROOT_ENV)
    if not root:
        raise SparkOptionError(
            "option 'root' is required: the sparklog storage URL (a path, file:///path or "
            f"s3://bucket/prefix); it may also come from the {ROOT_ENV} environment variable"
        )
    return root


def _broker(opts: Mapping[str, str]) -> str | None:
    broker = opts.get("broker") or opts.get("kafka.bootstrap.servers")
    if broker is None:
        return None
    for address in broker.split(","):
        host, _, port = address.strip().rpartition(":")
        if not host or not port.isdigit():
            raise SparkOptionError(
                refusal("broker", broker, "host:port[,host:port]", label="option")
            )
    return broker


def _int(opts: Mapping[str, str], name: str, minimum: int = 1) -> int | None:
    raw = opts.get(name.lower())
    if raw is None:
        return None
    return int(parse_value(name, raw, integer(minimum), label="option", error=SparkOptionError))


def _bool(opts: Mapping[str, str], name: str, default: bool) -> bool:
    raw = opts.get(name.lower())
    if raw is None:
        return default
    # Spark's own options take only true/false (any case)
    value = parse_value(name, raw, SPARK_BOOLEAN, label="option", error=SparkOptionError)
    return bool(value == "true")


def parse_duration_ms(name: str, raw: str) -> int:
    """Spark's time strings: ``500ms``, ``10s``, ``15m``, ``1h``, ``2d`` (bare number = ms)."""
    match = DURATION_RE.match(raw)
    if not match:
        raise SparkOptionError(
            refusal(name, raw, "a duration such as 500ms, 10s, 15m, 1h, 2d", label="option")
        )
    unit = (match.group(2) or "ms").lower()
    return int(int(match.group(1)) * DURATION_MS[unit])


def _json(name: str, raw: str, example: str) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise SparkOptionError(refusal(name, raw, f"JSON like {example}", label="option"))
    return value


def _partition_map(name: str, raw: str, low: int, example: str) -> dict[str, dict[int, int]]:
    """``{"topic": {"0": n}}`` with integer partitions and values >= ``low``."""
    doc = _json(name, raw, example)
    out: dict[str, dict[int, int]] = {}
    for topic, parts in doc.items():
        if not isinstance(parts, dict):
            raise SparkOptionError(
                f"option {name!r}: topic {topic!r} maps to {parts!r}; accepted: JSON like {example}"
            )
        for p, v in parts.items():
            ok = str(p).lstrip("-").isdigit() and int(p) >= 0
            if not ok or not isinstance(v, int) or isinstance(v, bool) or v < low:
                raise SparkOptionError(
                    f"option {name!r}: {topic!r} partition {p!r} -> {v!r} is not accepted; "
                    f"accepted: partition >= 0 mapped to an integer >= {low} (like {example})"
                )
            out.setdefault(topic, {})[int(p)] = v
    return out


def _subscription(opts: Mapping[str, str]) -> Subscription:
    given = [k for k in ("subscribe", "subscribepattern", "assign") if opts.get(k)]
    if len(given) != 1:
        got = "none" if not given else ", ".join(given)
        raise SparkOptionError(
            "exactly one of the options 'subscribe', 'subscribePattern', 'assign' must be set; "
            f"got {got}"
        )
    if given[0] == "subscribe":
        topics = tuple(t.strip() for t in opts["subscribe"].split(",") if t.strip())
        if not topics:
            raise SparkOptionError(
                "option 'subscribe' names no topic; accepted: comma-separated topic names"
            )
        return Subscription(topics=tuple(dict.fromkeys(topics)))
    if given[0] == "subscribepattern":
        return Subscription(pattern=_pattern(opts["subscribepattern"]))
    example = '{"topicA":[0,1],"topicB":[2]}'
    doc = _json("assign", opts["assign"], example)
    assign = []
    for topic, parts in sorted(doc.items()):
        if (
            not isinstance(parts, list)
            or not parts
            or not all(isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in parts)
        ):
            raise SparkOptionError(
                f"option 'assign': topic {topic!r} maps to {parts!r}; accepted: a non-empty list "
                f"of partition numbers (like {example})"
            )
        assign.append((topic, tuple(sorted(set(parts)))))
    return Subscription(assign=tuple(assign))


#: java.util.regex syntax that Python's re lacks or reads differently (re would accept the
#: character-class intersection ``[a-z&&[^x]]`` as a plain set, so it is refused by name)
JAVA_ONLY_REGEX = re.compile(r"\\[pP]\{|\\Q|\\E|\\[hHRXzG]|&&\[")


def _pattern(raw: str) -> str:
    """``subscribePattern``: trimmed like Spark's connector, compiled with Python's ``re``."""
    pattern = raw.strip()
    dialect = (
        "subscribePattern is a Python regular expression (the re module), not a Java one: "
        "for example \\p{Alpha} is [a-zA-Z], \\Q...\\E is an escaped literal, and "
        "[a-z&&[^x]] is [a-wyz]"
    )
    java = JAVA_ONLY_REGEX.search(pattern)
    if java is not None:
        raise SparkOptionError(
            f"option 'subscribePattern'={raw!r} uses Java-only regex syntax "
            f"{java.group(0)!r}; {dialect}"
        )
    try:
        re.compile(pattern)
    except re.error as exc:
        raise SparkOptionError(
            f"option 'subscribePattern'={raw!r} is not a valid regular expression ({exc}); "
            f"{dialect}"
        ) from exc
    if not pattern:
        raise SparkOptionError(
            "option 'subscribePattern' is empty; accepted: a Python regular expression"
        )
    return pattern


def _offset_spec(opts: Mapping[str, str], which: str, batch: bool) -> OffsetSpec | None:
    """Kafka's precedence: <which>Timestamp, then <which>OffsetsByTimestamp, then <which>Offsets."""
    ts_key, by_ts_key, off_key = f"{which}Timestamp", f"{which}OffsetsByTimestamp", None
    off_key = f"{which}Offsets"
    raw_ts = opts.get(ts_key.lower())
    if raw_ts is not None:
        value = _int(opts, ts_key, minimum=0)
        assert value is not None
        return OffsetSpec("timestamp", timestamp_ms=value)
    raw_by_ts = opts.get(by_ts_key.lower())
    if raw_by_ts is not None:
        example = '{"topicA":{"0":1700000000000}}'
        return OffsetSpec("timestamps", timestamps=_partition_map(by_ts_key, raw_by_ts, 0, example))
    raw = opts.get(off_key.lower())
    if raw is None:
        return None
    text = raw.strip()
    if text.lower() in ("earliest", "latest"):
        kind = text.lower()
        if which == "starting" and kind == "latest" and batch:
            raise SparkOptionError(
                "option 'startingOffsets'='latest' is not accepted for batch queries; accepted: "
                "earliest or JSON offsets"
            )
        if which == "ending" and kind == "earliest":
            raise SparkOptionError(
                "option 'endingOffsets'='earliest' is not accepted; accepted: latest or JSON "
                "offsets"
            )
        return OffsetSpec(kind)
    low = -2 if which == "starting" else -1
    example = '{"topicA":{"0":23,"1":-2}}' if which == "starting" else '{"topicA":{"0":50}}'
    offsets = _partition_map(off_key, text, low, example)
    if which == "starting" and batch:
        bad = [(t, p) for t, ps in offsets.items() for p, v in ps.items() if v == -1]
        if bad:
            raise SparkOptionError(
                f"option 'startingOffsets': {bad[0][0]!r} partition {bad[0][1]} is -1 (latest), "
                "which is not accepted for batch queries; accepted: -2 (earliest) or an offset"
            )
    return OffsetSpec("offsets", offsets=offsets)


def _group(opts: Mapping[str, str]) -> str | None:
    """The group whose offsets record the query's progress: ``group`` or ``kafka.group.id``.

    Both name the group; only sparklog's ``group`` also makes a new query start
    at the group's offsets (``SourceOptions.group_resumes``).
    """
    group = opts.get("group")
    kafka_group = opts.get("kafka.group.id")
    if group is not None and kafka_group is not None and group != kafka_group:
        raise SparkOptionError(
            f"options 'group'={group!r} and 'kafka.group.id'={kafka_group!r} differ; "
            "accepted: one of them (kafka.group.id is taken as group)"
        )
    group = group if group is not None else kafka_group
    if group is not None and not group:
        name = "group" if "group" in opts else "kafka.group.id"
        raise SparkOptionError(
            f"option {name!r}={group!r} is not accepted; accepted: any non-empty string "
            "(Kafka's group ids)"
        )
    return group


def _check_start_not_after_end(starting: OffsetSpec | None, ending: OffsetSpec | None) -> None:
    """Kafka's check of explicit offsets: a start after its end is an error, not 0 rows."""
    if starting is None or ending is None or starting.kind != ending.kind:
        return
    if starting.kind not in ("offsets", "timestamps"):
        return
    first = starting.offsets if starting.kind == "offsets" else starting.timestamps
    last = ending.offsets if ending.kind == "offsets" else ending.timestamps
    what = "offset" if starting.kind == "offsets" else "timestamp"
    for topic in sorted(first):
        for partition, start in sorted(first[topic].items()):
            end = last.get(topic, {}).get(partition)
            if end is not None and start >= 0 and end >= 0 and start > end:
                raise SparkOptionError(
                    f"the specified start {what} {start} is greater than the end {what} {end} "
                    f"for topic {topic!r} partition {partition}"
                )


def parse_source_options(options: Mapping[str, str], *, streaming: bool) -> SourceOptions:
    """Validate the reader options of a streaming (readStream) or batch (read) query."""
    opts = _lower(options)
    _check_known(opts, SOURCE_KEYS, "source")
    subscription = _subscription(opts)
    starting = _offset_spec(opts, "starting", batch=not streaming)
    ending = _offset_spec(opts, "ending", batch=not streaming)
    if streaming and ending is not None:
        raise SparkOptionError(
            "options 'endingOffsets', 'endingTimestamp' and 'endingOffsetsByTimestamp' are for "
            "batch queries only; a streaming query reads until it is stopped"
        )
    if not streaming:
        for key in STREAM_ONLY_KEYS:
            if key.lower() in opts:
                log.warning("%s option ignored in batch queries", key)
    strategy = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise SparkOptionError(
            f"option 'startingOffsetsByTimestampStrategy'={strategy!r} is not accepted; "
            "accepted: error, latest"
        )
    delay_raw = opts.get("maxtriggerdelay") if streaming else None
    max_offsets = _int(opts, "maxOffsetsPerTrigger") if streaming else None
    min_offsets = _int(opts, "minOffsetsPerTrigger") if streaming else None
    if max_offsets is not None and min_offsets is not None and min_offsets > max_offsets:
        raise SparkOptionError(
            f"option 'minOffsetsPerTrigger'={min_offsets} is higher than "
            f"'maxOffsetsPerTrigger'={max_offsets}; accepted: minOffsetsPerTrigger <= "
            "maxOffsetsPerTrigger"
        )
    _check_start_not_after_end(starting, ending)
    return SourceOptions(
        root=_root(opts),
        storage_options=storage_options_of(opts),
        broker=_broker(opts),
        subscription=subscription,
        starting=starting or OffsetSpec("latest" if streaming else "earliest"),
        ending=ending or (None if streaming else OffsetSpec("latest")),
        timestamp_strategy=strategy,
        max_offsets_per_trigger=max_offsets,
        min_offsets_per_trigger=min_offsets,
        max_trigger_delay_ms=(
            parse_duration_ms("maxTriggerDelay", delay_raw) if delay_raw else 15 * 60_000
        ),
        max_bytes_per_trigger=_int(opts, "maxBytesPerTrigger"),
        fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
        include_headers=_bool(opts, "includeHeaders", False),
        min_partitions=_int(opts, "minPartitions"),
        max_records_per_partition=_int(opts, "maxRecordsPerPartition"),
        group=_group(opts),
        group_resumes="group" in opts,
        read_committed=opts.get("kafka.isolation.level", "").strip().lower() == "read_committed",
    )


def _kafka_compression(raw: str) -> str:
    """Kafka's ``compression.type`` as a stored codec (see KAFKA_COMPRESSIONS); unknown refused."""
    codec = raw.strip().lower()
    if codec not in KAFKA_COMPRESSIONS:
        raise SparkOptionError(
            f"option 'kafka.compression.type'={raw!r} is not accepted; accepted: "
            f"{', '.join(KAFKA_COMPRESSIONS)} (gzip is stored as zstd and snappy as lz4: Arrow "
            "IPC's codecs)"
        )
    stored = KAFKA_COMPRESSIONS[codec]
    if stored != codec and codec != "uncompressed":
        log.info("kafka.compression.type=%s: objects are written with %s", codec, stored)
    return stored


def parse_sink_options(options: Mapping[str, str]) -> SinkOptions:
    """Validate the writer options (batch write and writeStream)."""
    opts = _lower(options)
    _check_known(opts, SINK_KEYS, "sink")
    compression = opts.get("compression")
    if compression is None and "kafka.compression.type" in opts:
        compression = _kafka_compression(opts["kafka.compression.type"])
    compression = (compression or "none").strip().lower()
    if compression not in COMPRESSIONS:
        raise SparkOptionError(
            f"option 'compression'={compression!r} is not accepted; accepted: "
            f"{', '.join(COMPRESSIONS)}"
        )
    topic = opts.get("topic")
    if topic is not None and not re.fullmatch(r"[a-zA-Z0-9._-]{1,249}", topic):
        raise SparkOptionError(
            f"option 'topic'={topic!r} is not accepted; accepted: a topic name of 1-249 "
            "characters from [a-zA-Z0-9._-]"
        )
    txn_app_id = opts.get("txnappid")
    txn_version = _int(opts, "txnVersion", minimum=0)
    if (txn_app_id is None) != (txn_version is None) and txn_version is not None:
        raise SparkOptionError(
            "option 'txnVersion' needs option 'txnAppId' (the writer's stable id); set both, as "
            "with Delta's idempotent writes"
        )
    return SinkOptions(
        root=_root(opts),
        storage_options=storage_options_of(opts),
        broker=_broker(opts),
        topic=topic,
        txn_app_id=txn_app_id,
        compression=compression,
        txn_version=txn_version,
    )


def parse_subscription_options(
    options: Mapping[str, str],
) -> tuple[str, dict[str, Any], Subscription, bool]:
    """What the schema depends on: root, storage options, subscription, includeHeaders.

    Spark asks for the schema before it says whether the query is streaming or
    batch, so only the options shared by both are checked here.
    """
    opts = _lower(options)
    _check_known(opts, SOURCE_KEYS, "source")
    return (
        _root(opts),
        storage_options_of(opts),
        _subscription(opts),
        _bool(opts, "includeHeaders", False),
    )
