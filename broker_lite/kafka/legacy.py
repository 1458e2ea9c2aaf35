"""Old API versions kio does not generate, read and written with aiokafka's protocol
schemas, served through the newer versions' handlers.

kio is generated from Kafka 4's schemas, which dropped the oldest versions that
Kafka 3.9 still served and that clients still send (sarama 1.22's OffsetCommit
v1, Burrow's ListOffsets v0, DescribeConfigs v0, kafka-go 0.2's Produce v0-2 and
Fetch v0-3, ...).  aiokafka, a runtime dependency already (the record batch codec),
ships the layouts of these versions as kafka-python wrote them
(``aiokafka.protocol``): 16 of the 18 old versions are read and written with
aiokafka's schemas and codec.  aiokafka lacks OffsetForLeaderEpoch v0 and v1 (API
23, which it never sends): those two are declared here in aiokafka's types, so
one codec reads and writes every old version and no encoder of our own is left.

aiokafka names fields as kafka-python did (``consumer_group``, ``topic``,
``partition``); the handlers read kio's names (``group_id``, ``name``,
``partition_index``).  Each old version lists its renames by the field's dotted
path in aiokafka's schema; a path that names no field is refused when the table is
built, so an aiokafka that renamed a field fails at import, never on a client's
request.  An old request is decoded into plain objects with kio's attribute names
(fields the old version lacks get the newer version's neutral value:
:attr:`Legacy.upgrade`), the handler runs as for the kio version named by
``served_as``, and its response is written back in the old layout (fields the old
version lacks are dropped; a few are derived, e.g. ListOffsets v0's offset list:
:attr:`Legacy.downgrade`).  ``tests/kafka/test_legacy_codec.py`` pins every
version's bytes to those of the hand-written codec this replaced.
"""

from __future__ import annotations

import datetime
import enum
import struct
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from io import BytesIO
from types import SimpleNamespace
from typing import Any

from aiokafka.protocol import admin, commit, fetch, offset, produce
from aiokafka.protocol.types import Array, Int16, Int32, Int64, Schema, String

from sparklog.broker_lite.kafka.message_format import to_message_set, to_record_batch
from sparklog.errors import SparklogError


class LegacyDecodeError(ValueError):
    """The bytes do not hold a request of the declared old version."""


def _paths(schema: Schema, prefix: str = "") -> Iterator[str]:
    """The dotted path of every field of ``schema``, nested ones included."""
    for name, kind in zip(schema.names, schema.fields, strict=True):
        yield prefix + name
        while isinstance(kind, Array):
            kind = kind.array_of
        if isinstance(kind, Schema):
            yield from _paths(kind, f"{prefix}{name}.")


def _named(kind: Any, value: Any, names: Mapping[str, str], path: str) -> Any:
    """aiokafka's decoded ``value`` (tuples by position) as the handlers read it:
    structs as objects with kio's attribute names, arrays as tuples."""
    if value is None:
        return None
    if isinstance(kind, Schema):
        out = SimpleNamespace()
        for name, inner, item in zip(kind.names, kind.fields, value, strict=True):
            here = path + name
            setattr(out, names.get(here, name), _named(inner, item, names, here + "."))
        return out
    if isinstance(kind, Array):
        return tuple(_named(kind.array_of, item, names, path) for item in value)
    return value


def _positional(kind: Any, value: Any, names: Mapping[str, str], path: str) -> Any:
    """A response ``value`` (kio's attribute names, or a dict of them) as aiokafka's
    schema encodes it: structs as tuples by position, arrays as lists, plain leaves."""
    value = _plain(value)
    if value is None:
        return None
    if isinstance(kind, Schema):
        return tuple(
            _positional(inner, _get(value, names.get(path + name, name)), names, f"{path}{name}.")
            for name, inner in zip(kind.names, kind.fields, strict=True)
        )
    if isinstance(kind, Array):
        return [_positional(kind.array_of, item, names, path) for item in value]
    return value


def _get(value: Any, name: str) -> Any:
    return value[name] if isinstance(value, dict) else getattr(value, name)


def _plain(value: Any) -> Any:
    """kio's typed leaves as the wire's: an error code's number, a duration's ms."""
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, datetime.timedelta):
        return int(value / datetime.timedelta(milliseconds=1))
    return value


@dataclass(frozen=True)
class Legacy:
    """One old version: its request and response layouts (aiokafka's schemas), the
    renames to kio's field names, and the kio version it runs as."""

    api_key: int
    version: int
    served_as: int
    request: Schema
    response: Schema
    #: aiokafka's field name -> the handlers' (kio's), by dotted path in :attr:`request`
    request_names: Mapping[str, str] = field(default_factory=dict)
    #: aiokafka's field name -> the handlers' (kio's), by dotted path in :attr:`response`
    response_names: Mapping[str, str] = field(default_factory=dict)
    #: fills in what the handler reads but the old request lacks
    upgrade: Callable[[SimpleNamespace], None] = field(default=lambda request: None)
    #: the handler's (kio) response as a value :attr:`response` can hold
    downgrade: Callable[[Any], Any] = field(default=lambda response: response)

    def __post_init__(self) -> None:
        for side, schema, names in (
            ("request", self.request, self.request_names),
            ("response", self.response, self.response_names),
        ):
            unknown = sorted(set(names) - set(_paths(schema)))
            if unknown:
                raise ValueError(
                    f"api {self.api_key} v{self.version} {side}: renames {unknown} name no "
                    f"field of aiokafka's schema (fields: {sorted(_paths(schema))})"
                )

    def read_request(self, frame: bytes, body_offset: int) -> SimpleNamespace:
        """The request body at ``body_offset`` of ``frame`` as the handler of
        :attr:`served_as` reads it (kio's names, upgraded)."""
        data = BytesIO(frame)
        data.seek(body_offset)
        try:
            values = self.request.decode(data)
        except (ValueError, struct.error) as exc:  # aiokafka's short reads, bad UTF-8
            raise LegacyDecodeError(str(exc)) from None
        request: SimpleNamespace = _named(self.request, values, self.request_names, "")
        self.upgrade(request)
        return request

    def write_response(self, response: Any) -> bytes:
        """The handler's (kio) response as this version's response body."""
        value = _positional(self.response, self.downgrade(response), self.response_names, "")
        body: bytes = self.response.encode(value)
        return body


#: Kafka's request header v1, which every non-flexible version has (aiokafka's class of it
#: has been renamed across its releases; its layout has not)
_REQUEST_HEADER_V1 = Schema(
    ("api_key", Int16),
    ("api_version", Int16),
    ("correlation_id", Int32),
    ("client_id", String("utf-8")),
)


def decode_header(frame: bytes) -> tuple[int, int, int, str | None, int]:
    """(api key, version, correlation id, client id, body offset) of a v1 request header."""
    data = BytesIO(frame)
    try:
        api_key, version, correlation_id, client_id = _REQUEST_HEADER_V1.decode(data)
    except (ValueError, struct.error) as exc:
        raise LegacyDecodeError(f"request header: {exc}") from None
    return api_key, version, correlation_id, client_id, data.tell()


def _set_each(items: Any, **values: Any) -> None:
    for item in items or ():
        for name, value in values.items():
            if not hasattr(item, name):
                setattr(item, name, value)


# -- OffsetCommit v0-v1 (served as v2) -----------------------------------------------
def _offset_commit_v0(request: SimpleNamespace) -> None:
    request.generation_id_or_member_epoch = -1
    request.member_id = ""
    _offset_commit_v1(request)


def _offset_commit_v1(request: SimpleNamespace) -> None:
    request.retention_time_ms = -1
    request.group_instance_id = None


_OFFSET_COMMIT_NAMES = {
    "consumer_group": "group_id",
    "consumer_group_generation_id": "generation_id_or_member_epoch",
    "consumer_id": "member_id",
    "topics.topic": "name",
    "topics.partitions.partition": "partition_index",
    "topics.partitions.offset": "committed_offset",
    "topics.partitions.timestamp": "commit_timestamp",
    "topics.partitions.metadata": "committed_metadata",
}
_OFFSET_COMMIT_RESPONSE_NAMES = {
    "topics.topic": "name",
    "topics.partitions.partition": "partition_index",
}


def _offset_commit(version: int, upgrade: Callable[[SimpleNamespace], None]) -> Legacy:
    request = (commit.OffsetCommitRequest_v0, commit.OffsetCommitRequest_v1)[version].SCHEMA
    names = {path: name for path, name in _OFFSET_COMMIT_NAMES.items() if path in _paths(request)}
    return Legacy(
        8, version, 2, request, commit.OffsetCommitResponse_v0.SCHEMA,
        names, _OFFSET_COMMIT_RESPONSE_NAMES, upgrade,
    )  # fmt: skip


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


# -- OffsetForLeaderEpoch v0-v1 (served as v2): not in aiokafka, declared in its types ----


def _epoch_v0(request: SimpleNamespace) -> None:
    request.replica_id = -1
    for t in request.topics:
        _set_each(t.partitions, current_leader_epoch=-1)


_EPOCH_REQUEST = Schema(
    ("topics", Array(
        ("topic", String("utf-8")),
        ("partitions", Array(("partition", Int32), ("leader_epoch", Int32))))),
)  # fmt: skip


def _epoch_response(version: int) -> Schema:
    partition = [("error_code", Int16), ("partition", Int32), ("end_offset", Int64)]
    if version >= 1:
        partition.insert(2, ("leader_epoch", Int32))
    return Schema(("topics", Array(("topic", String("utf-8")), ("partitions", Array(*partition)))))


# -- CreateTopics v0-v1 (served as v2) -----------------------------------------------
_CREATE_TOPICS_NAMES = {
    "create_topic_requests": "topics",
    "create_topic_requests.topic": "name",
    "create_topic_requests.replica_assignment": "assignments",
    "create_topic_requests.replica_assignment.partition_id": "partition_index",
    "create_topic_requests.replica_assignment.replicas": "broker_ids",
    "create_topic_requests.configs.config_key": "name",
    "create_topic_requests.configs.config_value": "value",
    "timeout": "timeout_ms",
}
_CREATE_TOPICS_RESPONSE_NAMES = {"topic_errors": "topics", "topic_errors.topic": "name"}


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


def _produce_legacy(version: int) -> Legacy:
    request = (produce.ProduceRequest_v0, produce.ProduceRequest_v1, produce.ProduceRequest_v2)
    response = (produce.ProduceResponse_v0, produce.ProduceResponse_v1, produce.ProduceResponse_v2)
    response_names = {
        "topics": "responses",
        "topics.topic": "name",
        "topics.partitions": "partition_responses",
        "topics.partitions.partition": "index",
        "topics.partitions.offset": "base_offset",
        "throttle_time_ms": "throttle_time",
    }
    if version >= 2:
        response_names["topics.partitions.timestamp"] = "log_append_time"
    if version < 1:
        del response_names["throttle_time_ms"]
    return Legacy(
        0, version, 3, request[version].SCHEMA, response[version].SCHEMA,
        {
            "required_acks": "acks",
            "topics": "topic_data",
            "topics.topic": "name",
            "topics.partitions": "partition_data",
            "topics.partitions.partition": "index",
            "topics.partitions.messages": "records",
        },
        response_names, _produce_upgrade, _produce_downgrade,
    )  # fmt: skip


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


def _fetch_legacy(version: int) -> Legacy:
    request = (fetch.FetchRequest_v0, fetch.FetchRequest_v1, fetch.FetchRequest_v2,
               fetch.FetchRequest_v3)[version]  # fmt: skip
    response = (fetch.FetchResponse_v0, fetch.FetchResponse_v1, fetch.FetchResponse_v2,
                fetch.FetchResponse_v3)[version]  # fmt: skip
    response_names = {
        "throttle_time_ms": "throttle_time",
        "topics": "responses",
        "topics.topics": "topic",
        "topics.partitions.partition": "partition_index",
        "topics.partitions.highwater_offset": "high_watermark",
        "topics.partitions.message_set": "records",
    }
    if version < 1:
        del response_names["throttle_time_ms"]
    return Legacy(
        1, version, 4, request.SCHEMA, response.SCHEMA,
        {
            "max_wait_time": "max_wait",
            "topics.partitions.offset": "fetch_offset",
            "topics.partitions.max_bytes": "partition_max_bytes",
        },
        response_names,
        lambda r: setattr(r, "isolation_level", 0),
        _fetch_downgrade(1 if version >= 2 else 0),
    )  # fmt: skip


LEGACY: dict[tuple[int, int], Legacy] = {
    (old.api_key, old.version): old
    for old in [
        _offset_commit(0, _offset_commit_v0),
        _offset_commit(1, _offset_commit_v1),
        # OffsetFetch v0 is v1's layout (v0 read ZooKeeper's offsets; there is one store here)
        Legacy(
            9, 0, 1, commit.OffsetFetchRequest_v0.SCHEMA, commit.OffsetFetchResponse_v0.SCHEMA,
            {"consumer_group": "group_id", "topics.topic": "name",
             "topics.partitions": "partition_indexes"},
            {"topics.topic": "name", "topics.partitions.partition": "partition_index",
             "topics.partitions.offset": "committed_offset"},
        ),
        Legacy(
            2, 0, 1, offset.OffsetRequest_v0.SCHEMA, offset.OffsetResponse_v0.SCHEMA,
            {"topics.topic": "name", "topics.partitions.partition": "partition_index",
             "topics.partitions.max_offsets": "max_num_offsets"},
            {"topics.topic": "name", "topics.partitions.partition": "partition_index",
             "topics.partitions.offsets": "old_style_offsets"},
            downgrade=_list_offsets_v0_response,
        ),
        Legacy(
            32, 0, 1,
            admin.DescribeConfigsRequest_v0.SCHEMA, admin.DescribeConfigsResponse_v0.SCHEMA,
            {"resources.config_names": "configuration_keys"},
            {"throttle_time_ms": "throttle_time", "resources": "results",
             "resources.config_entries": "configs",
             "resources.config_entries.config_names": "name",
             "resources.config_entries.config_value": "value"},
            upgrade=lambda r: setattr(r, "include_synonyms", False),
            downgrade=_describe_configs_v0_response,
        ),
        Legacy(23, 0, 2, _EPOCH_REQUEST, _epoch_response(0), upgrade=_epoch_v0),
        Legacy(23, 1, 2, _EPOCH_REQUEST, _epoch_response(1), upgrade=_epoch_v0),
        Legacy(
            19, 0, 2, admin.CreateTopicsRequest_v0.SCHEMA, admin.CreateTopicsResponse_v0.SCHEMA,
            _CREATE_TOPICS_NAMES, _CREATE_TOPICS_RESPONSE_NAMES,
            upgrade=lambda r: setattr(r, "validate_only", False),
        ),
        Legacy(
            19, 1, 2, admin.CreateTopicsRequest_v1.SCHEMA, admin.CreateTopicsResponse_v1.SCHEMA,
            _CREATE_TOPICS_NAMES, _CREATE_TOPICS_RESPONSE_NAMES,
        ),
        Legacy(
            20, 0, 1, admin.DeleteTopicsRequest_v0.SCHEMA, admin.DeleteTopicsResponse_v0.SCHEMA,
            {"topics": "topic_names", "timeout": "timeout_ms"},
            {"topic_error_codes": "responses", "topic_error_codes.topic": "name"},
        ),
        Legacy(
            29, 0, 1, admin.DescribeAclsRequest_v0.SCHEMA, admin.DescribeAclsResponse_v0.SCHEMA,
            {"resource_type": "resource_type_filter", "resource_name": "resource_name_filter",
             "principal": "principal_filter", "host": "host_filter"},
            {"throttle_time_ms": "throttle_time"},
        ),
        *(_produce_legacy(v) for v in range(3)),
        *(_fetch_legacy(v) for v in range(4)),
    ]
}  # fmt: skip
