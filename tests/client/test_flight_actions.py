"""The small request path's Flight messages against pyarrow.flight's own encoding."""

from __future__ import annotations

import pyarrow.flight as flight
import pytest

from sparklog.client.transports.flight_actions import decode_result, encode_action


@pytest.mark.parametrize(
    ("action", "body"),
    [("list_topics", b""), ("describe", b'{"name": "t"}'), ("x" * 200, bytes(range(256)) * 600)],
)
def test_an_action_is_encoded_as_pyarrow_flight_encodes_it(action: str, body: bytes) -> None:
    assert encode_action(action, body) == flight.Action(action, body).serialize()


@pytest.mark.parametrize("body", [b"", b'{"result": ["a", "b"]}', bytes(range(256)) * 600])
def test_a_result_is_decoded_from_pyarrow_flights_encoding(body: bytes) -> None:
    assert decode_result(flight.Result(body).serialize()) == body
