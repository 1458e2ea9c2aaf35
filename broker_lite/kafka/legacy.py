"""Old API versions kio does not generate, served through the newer versions' handlers.

kio is generated from Kafka 4's schemas, which dropped the oldest versions that
Kafka 3.9 still served and that clients still send (sarama 1.22's OffsetCommit
v1, Burrow's ListOffsets v0, DescribeConfigs v0, ...).  Those versions are all
non-flexible and differ from the oldest version kio has by a few fields, so each
is declared here as a small schema: its request is decoded into plain objects
with the attribute names the handlers read (fields the old version lacks get the
newer version's neutral value), the handler runs as for the kio version named
by ``served_as``, and its response is written back in the old layout (fields
the old version lacks are dropped; a few are derived, e.g. ListOffsets v0's
offset list).
"""

from __future__ import annotations

import datetime
import enum
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from sparklog.broker_lite.kafka.message_format import to_message_set, to_record_batch
from sparklog.errors import SparklogError

#: a field: (name, type); type is a primitive name or ("array", item) with item a
#: primitive name or a list of fields
Field = tuple[str, Any]

_FIXED = {
    "int8": struct.Struct(">b"),
    "int16": struct.Struct(">h"),
    "int32": struct.Struct(">i"),
    "int64": struct.Struct(">q"),
    "bool": struct.Struct(">?"),
}


class LegacyDecodeError(ValueError):
    """The bytes do not hold a request of the declared old version."""


def decode(schema: list[Field], buf: bytes, pos: int) -> tuple[SimpleNamespace, int]:
    out = SimpleNamespace()
    for name, kind in schema:
        value, pos = _decode_value(kind, buf, pos)
        setattr(out, name, value)
    return out, pos


def _decode_value(kind: Any, buf: bytes, pos: int) -> tuple[Any, int]:
    try:
        if isinstance(kind, tuple):
            (count,) = _FIXED["int32"].unpack_from(buf, pos)
            pos += 4
            if count < 0:
                return None, pos
            if count > len(buf):
                raise LegacyDecodeError(f"array of {count} items in {len(buf)} bytes")
            items = []
            for _ in range(count):
                if isinstance(kind[1], list):
                    item, pos = decode(kind[1], buf, pos)
                else:
                    item, pos = _decode_value(kind[1], buf, pos)
                items.append(item)
            return tuple(items), pos
        if kind in _FIXED:
            fixed = _FIXED[kind]
            return fixed.unpack_from(buf, pos)[0], pos + fixed.size
        if kind in ("string", "nullable_string"):
            (size,) = _FIXED["int16"].unpack_from(buf, pos)
            pos += 2
            if size < 0:
                return None, pos
            if pos + size > len(buf):
                raise LegacyDecodeError("string beyond the frame")
            return buf[pos : pos + size].decode("utf-8"), pos + size
        if kind in ("bytes", "nullable_bytes"):
            (size,) = _FIXED["int32"].unpack_from(buf, pos)
            pos += 4
            if size < 0:
                return None, pos
            if pos + size > len(buf):
                raise LegacyDecodeError("bytes beyond the frame")
            return buf[pos : pos + size], pos + size
    except (struct.error, UnicodeDecodeError) as exc:
        raise LegacyDecodeError(str(exc)) from None
    raise AssertionError(f"unknown legacy type {kind!r}")


def encode(schema: list[Field], value: Any) -> bytes:
    return b"".join(_encode_value(kind, _get(value, name)) for name, kind in schema)


def _get(value: Any, name: str) -> Any:
    return value[name] if isinstance(value, dict) else getattr(value, name)


def _plain(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, datetime.timedelta):
        return int(value / datetime.timedelta(milliseconds=1))
    return value


def _encode_value(kind: Any, value: Any) -> bytes:
    value = _plain(value)
    if isinstance(kind, tuple):
        if value is None:
            return _FIXED["int32"].pack(-1)
        items = list(value)
        head = _FIXED["int32"].pack(len(items))
        if isinstance(kind[1], list):
            return head + b"".join(encode(kind[1], item) for item in items)
        return head + b"".join(_encode_value(kind[1], item) for item in items)
    if kind in _FIXED:
        return _FIXED[kind].pack(value)
    if kind in ("string", "nullable_string"):
        if value is None:
            return _FIXED["int16"].pack(-1)
        data = str(value).encode("utf-8")
        return _FIXED["int16"].pack(len(data)) + data
    if kind in ("bytes", "nullable_bytes"):
        if value is None:
            return _FIXED["int32"].pack(-1)
        return _FIXED["int32"].pack(len(value)) + bytes(value)
    raise AssertionError(f"unknown legacy type {kind!r}")


@dataclass(frozen=True)
class Legacy:
    """One old version: its request and response layouts and the kio version it runs as."""

    api_key: int
    version: int
    served_as: int
    request: list[Field]
    response: list[Field]
    #: fills in what the handler reads but the old request lacks
    upgrade: Callable[[SimpleNamespace], None] = field(default=lambda request: None)
    #: the handler's (kio) response as a value :func:`encode` can write in the old layout
    downgrade: Callable[[Any], Any] = field(default=lambda response: response)


def _set_each(items: Any, **values: Any) -> None:
    for item in items or ():
        for name, value in values.items():
            if not hasattr(item, name):
                setattr(item, name, value)


def _topics(*partition: Field, name: str = "name") -> Field:
    """``topics: [{name, partitions: [partition...]}]``, the common shape."""
    return ("topics", ("array", [(name, "string"), ("partitions", ("array", list(partition)))]))


# -- OffsetCommit v0-v1 (served as v2) -------------------------------------------
def _offset_commit_v0(request: SimpleNamespace) -> None:
    request.generation_id_or_member_epoch = -1
    request.member_id = ""
    _offset_commit_v1(request)


def _offset_commit_v1(request: SimpleNamespace) -> None:
    request.retention_time_ms = -1
    request.group_instance_id = None


_OFFSET_COMMIT_RESPONSE: list[Field] = [
    _topics(("partition_index", "int32"), ("error_code", "int16"))
]

# -- ListOffsets v0 (served as v1) ---------------------------------------------------


def _list_offsets_v0_response(response: Any) -> Any:
    return {
        "topics": [
            {
                "name": t.name,
                "partitions": [
                    {
                        "partition_index": p.partition_index,
                        "error_code": p.error_code,
                        "old_style_offsets": [p.offset] if int(p.offset) >= 0 else [],
                    }
                    for p in t.partitions
                ],
            }
            for t in response.topics
        ]
    }


# -- DescribeConfigs v0 (served as v1) -----------------------------------------------
#: Kafka's ConfigSource.DEFAULT_CONFIG: v0's is_default
DEFAULT_CONFIG = 5


def _describe_configs_v0_response(response: Any) -> Any:
    return {
        "throttle_time": response.throttle_time,
        "results": [
            {
                "error_code": r.error_code,
                "error_message": r.error_message,
                "resource_type": r.resource_type,
                "resource_name": r.resource_name,
                "configs": [
                    {
                        "name": c.name,
                        "value": c.value,
                        "read_only": c.read_only,
                        "is_default": int(c.config_source) == DEFAULT_CONFIG,
                        "is_sensitive": c.is_sensitive,
                    }
                    for c in r.configs
                ],
            }
            for r in response.results
        ],
    }


# -- OffsetForLeaderEpoch v0-v1 (served as v2) ------------------------------------------


def _epoch_v0(request: SimpleNamespace) -> None:
    request.replica_id = -1
    for t in request.topics:
        _set_each(t.partitions, current_leader_epoch=-1)


_EPOCH_REQUEST: list[Field] = [
    _topics(("partition", "int32"), ("leader_epoch", "int32"), name="topic")
]

_CREATE_TOPICS_REQUEST: list[Field] = [
    ("topics", ("array", [
        ("name", "string"), ("num_partitions", "int32"), ("replication_factor", "int16"),
        ("assignments", ("array", [
            ("partition_index", "int32"), ("broker_ids", ("array", "int32"))])),
        ("configs", ("array", [("name", "string"), ("value", "nullable_string")])),
    ])),
    ("timeout_ms", "int32"),
]  # fmt: skip


# -- Produce v0-v2 (served as v3) and Fetch v0-v3 (served as v4): old message formats ---


#: bytes the produce path refuses as CORRUPT_MESSAGE ("records end inside a batch header")
_UNREADABLE = b"\x00"


def _produce_upgrade(request: SimpleNamespace) -> None:
    request.transactional_id = None
    for topic in request.topic_data:
        for part in topic.partition_data:
            try:
                part.records = to_record_batch(part.records or b"")
            except SparklogError:
                # too short for a batch header: the produce path answers CORRUPT_MESSAGE
                # for this partition alone, as Kafka does for a message set that fails
                part.records = _UNREADABLE


def _stamp_ms(value: Any) -> int:
    if value is None:
        return -1
    if isinstance(value, datetime.datetime):
        return int(value.timestamp() * 1000)
    return int(value)


def _produce_downgrade(response: Any) -> Any:
    return {
        "throttle_time": response.throttle_time,
        "responses": [
            {
                "name": t.name,
                "partition_responses": [
                    {
                        "index": p.index,
                        "error_code": p.error_code,
                        "base_offset": p.base_offset,
                        "log_append_time": _stamp_ms(p.log_append_time),
                    }
                    for p in t.partition_responses
                ],
            }
            for t in response.responses
        ],
    }


def _fetch_downgrade(magic: int) -> Callable[[Any], Any]:
    def downgrade(response: Any) -> Any:
        return {
            "throttle_time": response.throttle_time,
            "responses": [
                {
                    "topic": t.topic,
                    "partitions": [
                        {
                            "partition_index": p.partition_index,
                            "error_code": p.error_code,
                            "high_watermark": p.high_watermark,
                            "records": to_message_set(p.records, magic),
                        }
                        for p in t.partitions
                    ],
                }
                for t in response.responses
            ],
        }

    return downgrade


def _produce_legacy(version: int) -> Legacy:
    partition: list[Field] = [("index", "int32"), ("error_code", "int16"), ("base_offset", "int64")]
    if version >= 2:
        partition.append(("log_append_time", "int64"))
    response: list[Field] = [
        (
            "responses",
            ("array", [("name", "string"), ("partition_responses", ("array", partition))]),
        )
    ]
    if version >= 1:
        response.append(("throttle_time", "int32"))
    request: list[Field] = [
        ("acks", "int16"),
        ("timeout", "int32"),
        ("topic_data", ("array", [("name", "string"), ("partition_data", ("array", [
            ("index", "int32"), ("records", "nullable_bytes")]))])),
    ]  # fmt: skip
    return Legacy(0, version, 3, request, response, _produce_upgrade, _produce_downgrade)


def _fetch_legacy(version: int) -> Legacy:
    request: list[Field] = [("replica_id", "int32"), ("max_wait", "int32"), ("min_bytes", "int32")]
    if version >= 3:
        request.append(("max_bytes", "int32"))
    request.append(_topics(("partition", "int32"), ("fetch_offset", "int64"),
                           ("partition_max_bytes", "int32"), name="topic"))  # fmt: skip
    partitions: list[Field] = [
        ("partition_index", "int32"), ("error_code", "int16"), ("high_watermark", "int64"),
        ("records", "bytes"),
    ]  # fmt: skip
    response: list[Field] = [
        ("responses", ("array", [("topic", "string"), ("partitions", ("array", partitions))]))
    ]
    if version >= 1:
        response.insert(0, ("throttle_time", "int32"))
    return Legacy(
        1, version, 4, request, response,
        lambda r: setattr(r, "isolation_level", 0),
        _fetch_downgrade(1 if version >= 2 else 0),
    )  # fmt: skip


LEGACY: dict[tuple[int, int], Legacy] = {
    (old.api_key, old.version): old
    for old in [
        Legacy(
            8, 0, 2,
            [("group_id", "string"), _topics(
                ("partition_index", "int32"), ("committed_offset", "int64"),
                ("committed_metadata", "nullable_string"))],
            _OFFSET_COMMIT_RESPONSE,
            upgrade=_offset_commit_v0,
        ),
        Legacy(
            8, 1, 2,
            [("group_id", "string"), ("generation_id_or_member_epoch", "int32"),
             ("member_id", "string"), _topics(
                 ("partition_index", "int32"), ("committed_offset", "int64"),
                 ("commit_timestamp", "int64"), ("committed_metadata", "nullable_string"))],
            _OFFSET_COMMIT_RESPONSE,
            upgrade=_offset_commit_v1,
        ),
        # OffsetFetch v0 is v1's layout (v0 read ZooKeeper's offsets; there is one store here)
        Legacy(
            9, 0, 1,
            [("group_id", "string"), ("topics", ("array", [
                ("name", "string"), ("partition_indexes", ("array", "int32"))]))],
            [_topics(("partition_index", "int32"), ("committed_offset", "int64"),
                     ("metadata", "nullable_string"), ("error_code", "int16"))],
        ),
        Legacy(
            2, 0, 1,
            [("replica_id", "int32"), _topics(
                ("partition_index", "int32"), ("timestamp", "int64"),
                ("max_num_offsets", "int32"))],
            [_topics(("partition_index", "int32"), ("error_code", "int16"),
                     ("old_style_offsets", ("array", "int64")))],
            downgrade=_list_offsets_v0_response,
        ),
        Legacy(
            32, 0, 1,
            [("resources", ("array", [("resource_type", "int8"), ("resource_name", "string"),
                                      ("configuration_keys", ("array", "string"))]))],
            [("throttle_time", "int32"), ("results", ("array", [
                ("error_code", "int16"), ("error_message", "nullable_string"),
                ("resource_type", "int8"), ("resource_name", "string"),
                ("configs", ("array", [("name", "string"), ("value", "nullable_string"),
                                       ("read_only", "bool"), ("is_default", "bool"),
                                       ("is_sensitive", "bool")]))]))],
            upgrade=lambda r: setattr(r, "include_synonyms", False),
            downgrade=_describe_configs_v0_response,
        ),
        Legacy(
            23, 0, 2, _EPOCH_REQUEST,
            [_topics(("error_code", "int16"), ("partition", "int32"), ("end_offset", "int64"),
                     name="topic")],
            upgrade=_epoch_v0,
        ),
        Legacy(
            23, 1, 2, _EPOCH_REQUEST,
            [_topics(("error_code", "int16"), ("partition", "int32"), ("leader_epoch", "int32"),
                     ("end_offset", "int64"), name="topic")],
            upgrade=_epoch_v0,
        ),
        Legacy(
            19, 0, 2, _CREATE_TOPICS_REQUEST,
            [("topics", ("array", [("name", "string"), ("error_code", "int16")]))],
            upgrade=lambda r: setattr(r, "validate_only", False),
        ),
        Legacy(
            19, 1, 2, [*_CREATE_TOPICS_REQUEST, ("validate_only", "bool")],
            [("topics", ("array", [("name", "string"), ("error_code", "int16"),
                                   ("error_message", "nullable_string")]))],
        ),
        Legacy(
            20, 0, 1,
            [("topic_names", ("array", "string")), ("timeout_ms", "int32")],
            [("responses", ("array", [("name", "string"), ("error_code", "int16")]))],
        ),
        Legacy(
            29, 0, 1,
            [("resource_type_filter", "int8"), ("resource_name_filter", "nullable_string"),
             ("principal_filter", "nullable_string"), ("host_filter", "nullable_string"),
             ("operation", "int8"), ("permission_type", "int8")],
            [("throttle_time", "int32"), ("error_code", "int16"),
             ("error_message", "nullable_string"), ("resources", ("array", [
                 ("resource_type", "int8"), ("resource_name", "string"), ("acls", ("array", [
                     ("principal", "string"), ("host", "string"), ("operation", "int8"),
                     ("permission_type", "int8")]))]))],
        ),
        *(_produce_legacy(v) for v in range(3)),
        *(_fetch_legacy(v) for v in range(4)),
    ]
}  # fmt: skip


def decode_header(frame: bytes) -> tuple[int, int, int, str | None, int]:
    """(api key, version, correlation id, client id, body offset) of a v1 request header."""
    api_key, version, correlation_id = struct.unpack_from(">hhi", frame, 0)
    client_id, pos = _decode_value("nullable_string", frame, 8)
    return api_key, version, correlation_id, client_id, pos
