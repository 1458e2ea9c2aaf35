"""The old API versions' codec (:mod:`sparklog.broker_lite.kafka.legacy`) reads and writes
exactly the bytes the hand-written codec it replaced did (issue 40 item 6).

The frames, the requests the handlers got from them and the answers' bytes below were
produced by that hand-written codec (the last commit that had it) and are pinned: every old
version's request decodes to the same values, and every old version's answer to the same
handler response is the same bytes, now through aiokafka's protocol schemas (and, for the
two versions aiokafka lacks, schemas declared in aiokafka's types). Real clients speaking
these versions are in ``test_compat_versions.py`` and ``test_compat_burrow.py``.
"""

from __future__ import annotations

import dataclasses
import json
import typing
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka.protocol.types import Schema
from kio.index import load_response_schema

from sparklog.broker_lite.kafka.legacy import LEGACY, Legacy, LegacyDecodeError, decode_header
from sparklog.broker_lite.kafka.messages import make
from tests.kafka.wire import record_batch_bytes

#: what the handlers answer, per (api key, the version an old one is served as), as kio's
#: field values (nested entities as dicts); every old version of the API is written from it
RESPONSES: dict[tuple[int, int], dict[str, Any]] = {
    (8, 2): {"topics": [
        {"name": "t0", "partitions": [
            {"partition_index": 0, "error_code": 0},
            {"partition_index": 1, "error_code": 22}]},
        {"name": "t1", "partitions": []}]},
    (9, 1): {"topics": [{"name": "t0", "partitions": [
        {"partition_index": 0, "committed_offset": 42, "metadata": "m", "error_code": 0},
        {"partition_index": 1, "committed_offset": -1, "metadata": None, "error_code": 3}]}]},
    (2, 1): {"topics": [{"name": "t0", "partitions": [
        {"partition_index": 0, "error_code": 0, "timestamp": -1, "offset": 17},
        {"partition_index": 1, "error_code": 0, "timestamp": -1, "offset": -1},
        {"partition_index": 2, "error_code": 6, "timestamp": -1, "offset": -1}]}]},
    (32, 1): {"throttle_time": 5, "results": [
        {"error_code": 0, "error_message": None, "resource_type": 2, "resource_name": "t0",
         "configs": [
             {"name": "retention.ms", "value": "604800000", "read_only": False,
              "config_source": 5, "is_sensitive": False, "synonyms": []},
             {"name": "cleanup.policy", "value": "compact", "read_only": False,
              "config_source": 1, "is_sensitive": False, "synonyms": []},
             {"name": "sasl.jaas.config", "value": None, "read_only": True,
              "config_source": 4, "is_sensitive": True, "synonyms": []}]},
        {"error_code": 3, "error_message": "no such topic", "resource_type": 2,
         "resource_name": "gone", "configs": []}]},
    (23, 2): {"throttle_time": 0, "topics": [{"topic": "t0", "partitions": [
        {"error_code": 0, "partition": 0, "leader_epoch": 3, "end_offset": 99},
        {"error_code": 75, "partition": 1, "leader_epoch": -1, "end_offset": -1}]}]},
    (19, 2): {"throttle_time": 0, "topics": [
        {"name": "t0", "error_code": 0, "error_message": None},
        {"name": "t1", "error_code": 36, "error_message": "Topic 't1' already exists."}]},
    (20, 1): {"throttle_time": 0, "responses": [
        {"name": "t0", "error_code": 0}, {"name": "t1", "error_code": 3}]},
    (29, 1): {"throttle_time": 0, "error_code": 0, "error_message": None, "resources": [
        {"resource_type": 2, "resource_name": "t0", "pattern_type": 3, "acls": [
            {"principal": "User:alice", "host": "*", "operation": 3, "permission_type": 3},
            {"principal": "User:bob", "host": "10.0.0.1", "operation": 4,
             "permission_type": 2}]}]},
    (0, 3): {"throttle_time": 0, "responses": [{"name": "t0", "partition_responses": [
        {"index": 0, "error_code": 0, "base_offset": 40, "log_append_time": -1},
        {"index": 1, "error_code": 0, "base_offset": 7, "log_append_time": 1_700_000_000_123},
        {"index": 2, "error_code": 2, "base_offset": -1, "log_append_time": -1}]}]},
    (1, 4): {"throttle_time": 0, "responses": [{"topic": "t0", "partitions": [
        {"partition_index": 0, "error_code": 0, "high_watermark": 2, "last_stable_offset": 2,
         "aborted_transactions": (), "records": record_batch_bytes([b"a", b"bc"])},
        {"partition_index": 1, "error_code": 0, "high_watermark": 0, "last_stable_offset": 0,
         "aborted_transactions": (), "records": None},
        {"partition_index": 2, "error_code": 1, "high_watermark": -1,
         "last_stable_offset": -1, "aborted_transactions": (), "records": b""}]}]},
}  # fmt: skip


def _build(cls: type, values: dict[str, Any]) -> Any:
    """A kio entity of ``cls`` from field values, nested entities given as dicts."""
    hints = typing.get_type_hints(cls)
    built: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name not in values:
            continue
        value = values[f.name]
        (item_cls, *_rest) = typing.get_args(hints[f.name]) or (None,)
        if isinstance(value, list) and dataclasses.is_dataclass(item_cls):
            assert isinstance(item_cls, type)
            value = tuple(_build(item_cls, item) for item in value)
        built[f.name] = value
    return make(cls, **built)


def kio_response(api_key: int, served_as: int) -> Any:
    """The handler's response of :data:`RESPONSES` as the kio entity it returns."""
    return _build(load_response_schema(api_key, served_as), RESPONSES[(api_key, served_as)])


def plain(value: Any) -> Any:
    """A decoded request as JSON's values (comparable with the pinned ones): nested
    dicts and lists, bytes as ``{"hex": ...}``."""
    if isinstance(value, SimpleNamespace):
        return {name: plain(item) for name, item in vars(value).items()}
    if isinstance(value, tuple | list):
        return [plain(item) for item in value]
    if isinstance(value, bytes):
        return {"hex": value.hex()}
    return value


PINNED = json.loads((Path(__file__).parent / "legacy_codec_pinned.json").read_text())
#: the old versions aiokafka has no schema of (declared in legacy.py, in aiokafka's types)
NOT_IN_AIOKAFKA = {(23, 0), (23, 1)}


#: a test per old version, named by API key and version
EACH_OLD_VERSION = pytest.mark.parametrize(
    "key", sorted(LEGACY), ids=lambda key: f"api{key[0]}v{key[1]}"
)


def _key(old: Legacy) -> str:
    return f"{old.api_key}.{old.version}"


def test_the_pins_cover_every_old_version_served() -> None:
    assert sorted(PINNED["requests"]) == sorted(_key(old) for old in LEGACY.values())
    assert sorted(PINNED["responses"]) == sorted(PINNED["requests"])
    assert len(LEGACY) == 18


def test_every_old_version_but_two_is_read_with_aiokafka_schemas() -> None:
    from aiokafka.protocol import admin, commit, fetch, offset, produce

    shipped = {
        id(cls.SCHEMA)
        for module in (admin, commit, fetch, offset, produce)
        for cls in vars(module).values()
        if isinstance(getattr(cls, "SCHEMA", None), Schema)
    }
    from_aiokafka = {key for key, old in LEGACY.items() if id(old.request) in shipped}
    assert from_aiokafka == set(LEGACY) - NOT_IN_AIOKAFKA
    assert {key for key, old in LEGACY.items() if id(old.response) in shipped} == from_aiokafka


@EACH_OLD_VERSION
def test_each_old_request_decodes_to_what_the_hand_written_codec_gave(
    key: tuple[int, int],
) -> None:
    old = LEGACY[key]
    pinned = PINNED["requests"][_key(old)]
    frame = bytes.fromhex(pinned["frame"])
    api_key, version, correlation_id, client_id, body_offset = decode_header(frame)
    assert (api_key, version, correlation_id, client_id) == (*key, 7, "sarama")
    assert plain(old.read_request(frame, body_offset)) == pinned["request"]


@EACH_OLD_VERSION
def test_each_old_response_is_the_bytes_the_hand_written_codec_wrote(
    key: tuple[int, int],
) -> None:
    old = LEGACY[key]
    written = old.write_response(kio_response(old.api_key, old.served_as))
    assert written.hex() == PINNED["responses"][_key(old)]


@EACH_OLD_VERSION
def test_a_truncated_old_request_is_a_decode_error(key: tuple[int, int]) -> None:
    old = LEGACY[key]
    frame = bytes.fromhex(PINNED["requests"][_key(old)]["frame"])
    body_offset = decode_header(frame)[-1]
    with pytest.raises(LegacyDecodeError):
        old.read_request(frame[: body_offset + (len(frame) - body_offset) // 2], body_offset)


def test_a_request_with_bad_utf8_is_a_decode_error() -> None:
    old = LEGACY[(20, 0)]  # DeleteTopics v0: topic names, timeout
    body = b"\x00\x00\x00\x01" + b"\x00\x02\xff\xfe" + b"\x00\x00\x03\xe8"
    header = bytes.fromhex("0014000000000007ffff")  # no client id
    assert decode_header(header + body) == (20, 0, 7, None, len(header))
    with pytest.raises(LegacyDecodeError):
        old.read_request(header + body, len(header))


def test_a_rename_of_no_field_is_refused_when_the_table_is_built() -> None:
    from aiokafka.protocol.admin import DeleteTopicsRequest_v0, DeleteTopicsResponse_v0

    with pytest.raises(ValueError, match=r"api 20 v0 request: renames \['topic'\]"):
        Legacy(
            20, 0, 1, DeleteTopicsRequest_v0.SCHEMA, DeleteTopicsResponse_v0.SCHEMA,
            {"topic": "topic_names"},
        )  # fmt: skip
