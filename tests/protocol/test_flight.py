"""The Flight wire format, defined once in ``sparklog.protocol.flight``: what both ends rely on."""

from __future__ import annotations

import pytest

from sparklog.errors import InvalidRequestError, NotLeaderError
from sparklog.protocol import actions
from sparklog.protocol import flight as wire


def test_a_built_request_parses_back_with_defaults_filled() -> None:
    raw = wire.build(wire.FETCH, topic="t", partition=2, offset=7)
    assert wire.parse(wire.FETCH, wire.body(raw)) == {
        "topic": "t",
        "partition": 2,
        "offset": 7,
        "max_bytes": 1 << 20,
        "max_wait_ms": 500,
        "isolation_level": "read_uncommitted",
    }


def test_the_client_cannot_send_a_field_the_broker_does_not_read() -> None:
    with pytest.raises(TypeError, match="no field"):
        actions.build("heartbeat", group="g", generation=1, member_id="m", extra=1)
    with pytest.raises(TypeError, match="lacks required"):
        actions.HEARTBEAT.build(group="g")
    with pytest.raises(KeyError):
        actions.build("no_such_action")


def test_the_broker_names_a_bad_field_and_what_it_accepts() -> None:
    with pytest.raises(
        InvalidRequestError, match="'partition'=True is not accepted; accepted: integer"
    ):
        wire.parse(wire.FETCH, {"topic": "t", "partition": True, "offset": 0})
    with pytest.raises(InvalidRequestError, match="'offset'.* is required"):
        wire.parse(wire.FETCH, {"topic": "t", "partition": 0})


def test_a_mutable_default_is_a_fresh_copy_each_time() -> None:
    first = actions.ALTER_TOPIC_CONFIG.parse({"name": "t"})
    first["updates"]["x"] = 1
    assert actions.ACTIONS["alter_topic_config"].parse({"name": "t"})["updates"] == {}


def test_replies_round_trip() -> None:
    appends = [wire.PartitionAppend(1, 10, 3, False), wire.PartitionAppend(1, 13, 2, True)]
    assert wire.decode_produce_reply(wire.encode_produce_reply(appends)) == appends
    assert wire.decode_fetch_meta(wire.encode_fetch_meta(9, 4)) == (9, 4)
    assert wire.decode_fetch_meta(None) == (-1, -1)
    assert wire.decode_result(wire.encode_result([1, "a"])) == [1, "a"]


def test_an_error_crosses_as_its_own_class_with_details() -> None:
    text = wire.encode(NotLeaderError("moved", leader_location="h:1"))
    err = wire.decode(text + " (gRPC detail with } braces)")
    assert isinstance(err, NotLeaderError)
    assert err.retriable and err.details == {"leader_location": "h:1"}
    assert wire.decode("no error here") is None
