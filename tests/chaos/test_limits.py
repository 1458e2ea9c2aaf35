"""The Flight listener's resources are bounded (issue 15, item 6)."""

from __future__ import annotations

import json
import logging
import threading

import pyarrow as pa
import pyarrow.flight as flight
import pytest

from sparklog.broker_lite.logs import _FIELDS
from sparklog.client.transports.flight_client import BrokerClient
from sparklog.errors import (
    InvalidRecordError,
    InvalidRequestError,
    MessageSizeTooLargeError,
    ThrottlingQuotaExceededError,
)
from sparklog.protocol import actions
from sparklog.protocol.flight import decode
from sparklog.storage import make_batch
from tests.chaos.inproc import inproc_broker
from tests.support.waiting import wait_for


def _put(location: str, topic: str, batches: list[pa.RecordBatch]) -> Exception | None:
    """Send ``batches`` as one DoPut; the decoded error, or None if accepted."""
    conn = flight.connect(f"grpc://{location}")
    command = json.dumps({"topic": topic, "partition": 0}).encode()
    try:
        writer, reader = conn.do_put(
            flight.FlightDescriptor.for_command(command), batches[0].schema
        )
        try:
            for batch in batches:
                writer.write_batch(batch)
            writer.done_writing()
            reader.read()
        finally:
            writer.close()
    except flight.FlightError as exc:
        return decode(str(exc)) or exc
    finally:
        conn.close()
    return None


def test_many_tiny_batches_are_refused_while_streaming(tmp_path) -> None:
    with inproc_broker(f"file://{tmp_path}/root", max_request_batches=1_000) as (server, loc):
        BrokerClient(loc).create_topic("t", 1)
        tiny = make_batch([b"x"])
        err = _put(loc, "t", [tiny] * 5_000)
        assert isinstance(err, InvalidRequestError) and "max_request_batches=1000" in str(err)
        assert _put(loc, "t", [tiny] * 10) is None
        assert server.request_bytes.used == 0


def test_request_bytes_are_checked_batch_by_batch(tmp_path) -> None:
    with inproc_broker(f"file://{tmp_path}/root", max_request_bytes=1 << 20) as (server, loc):
        BrokerClient(loc).create_topic("t", 1)
        big = make_batch([b"v" * 100_000] * 3)
        err = _put(loc, "t", [big] * 20)
        assert isinstance(err, MessageSizeTooLargeError), err
        assert server.request_bytes.used == 0


def test_memory_of_requests_in_flight_is_bounded(tmp_path) -> None:
    with (
        inproc_broker(f"file://{tmp_path}/root", max_inflight_request_bytes=1 << 20) as (
            server,
            loc,
        ),
        BrokerClient(loc, retry_timeout_ms=0) as client,
    ):
        client.create_topic("t", 1)
        assert server.request_bytes.take(1 << 20)  # other requests hold all of it
        with pytest.raises(ThrottlingQuotaExceededError) as info:
            client.produce("t", 0, make_batch([b"v" * 1000]))
        assert info.value.retriable
        server.request_bytes.give(1 << 20)
        assert client.produce("t", 0, make_batch([b"v" * 1000])).base_offset == 0


def test_large_binary_values_obey_max_message_bytes(tmp_path) -> None:
    with inproc_broker(f"file://{tmp_path}/root") as (_, loc), BrokerClient(loc) as client:
        client.create_topic("t", 1, {"max.message.bytes": 1000})
        batch = pa.record_batch({"value": pa.array([b"v" * 5_000], pa.large_binary())})
        with pytest.raises(InvalidRecordError, match=r"max\.message\.bytes"):
            client.produce("t", 0, batch)


def test_calls_per_connection_are_limited(tmp_path) -> None:
    with inproc_broker(f"file://{tmp_path}/root", max_calls_per_connection=2) as (server, loc):
        BrokerClient(loc).create_topic("t", 1)
        conn = flight.connect(f"grpc://{loc}")
        ticket = flight.Ticket(
            json.dumps({"topic": "t", "partition": 0, "offset": 0, "max_wait_ms": 3_000}).encode()
        )
        waiting = [
            threading.Thread(target=lambda: conn.do_get(ticket).read_all()) for _ in range(2)
        ]
        for t in waiting:
            t.start()
        wait_for(lambda: sum(server._per_connection.values()) == 2, 30, "two long polls")
        with pytest.raises(flight.FlightError) as info:
            conn.do_get(ticket).read_all()
        assert isinstance(decode(str(info.value)), ThrottlingQuotaExceededError)
        # another connection is not affected
        assert BrokerClient(loc).call(actions.LIST_TOPICS) == ["t"]
        for t in waiting:
            t.join(timeout=30)
        assert server._per_connection == {}
        conn.close()


def test_concurrent_calls_are_limited(tmp_path) -> None:
    with inproc_broker(f"file://{tmp_path}/root", max_concurrent_calls=2) as (server, loc):
        BrokerClient(loc).create_topic("t", 1)
        ticket = flight.Ticket(
            json.dumps({"topic": "t", "partition": 0, "offset": 0, "max_wait_ms": 3_000}).encode()
        )
        conns = [flight.connect(f"grpc://{loc}") for _ in range(3)]
        waiting = [
            threading.Thread(target=lambda c=c: c.do_get(ticket).read_all()) for c in conns[:2]
        ]
        for t in waiting:
            t.start()
        wait_for(lambda: server.call_limit.calls.used == 2, 30, "two long polls")
        with pytest.raises(flight.FlightError) as info:
            conns[2].do_get(ticket).read_all()
        assert isinstance(decode(str(info.value)), ThrottlingQuotaExceededError)
        for t in waiting:
            t.join(timeout=30)
        wait_for(lambda: server.call_limit.calls.used == 0, 30, "calls released")
        for c in conns:
            c.close()


def test_refused_requests_are_logged_at_a_bounded_rate(tmp_path, caplog) -> None:
    caplog.set_level(logging.INFO, logger="sparklog.broker_lite.server")
    with inproc_broker(f"file://{tmp_path}/root") as (server, loc):
        conn = flight.connect(f"grpc://{loc}")
        for _ in range(300):
            with pytest.raises(flight.FlightError):
                list(conn.do_action(flight.Action("no_such_action", b"{}")))
        conn.close()
        pending = server.refusals.suppressed
    lines = [r for r in caplog.records if r.getMessage() == "request refused"]
    # 300 refusals within a few seconds: at most 10 lines a second are written ...
    assert 0 < len(lines) < 100
    # ... and every refusal not written is counted in the next line written
    suppressed = sum(vars(r)[_FIELDS]["suppressed"] for r in lines)
    assert len(lines) + suppressed + pending == 300


def test_echoed_input_is_capped(tmp_path) -> None:
    with inproc_broker(f"file://{tmp_path}/root") as (_, loc), BrokerClient(loc) as client:
        conn = flight.connect(f"grpc://{loc}")
        body = json.dumps({"name": 7, "partitions": "p" * 1_000_000}).encode()
        with pytest.raises(flight.FlightError) as info:
            list(conn.do_action(flight.Action("create_topic", body)))
        err = decode(str(info.value))
        assert isinstance(err, InvalidRequestError) and len(err.message) < 2_100
        conn.close()
        assert client.call(actions.LIST_TOPICS) == []
