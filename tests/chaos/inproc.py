"""A broker and its Flight listener in the test process, for tests that look inside."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sparklog.broker_lite.config import load_config
from sparklog.broker_lite.server import FlightBroker
from sparklog.broker_lite.service import Broker


@contextmanager
def inproc_broker(root: str, **overrides: Any) -> Iterator[tuple[FlightBroker, str]]:
    """(listener, host:port) of a started broker on ``root``; stopped at exit."""
    config = load_config(
        None,
        {
            "root": root,
            "listen": "127.0.0.1:0",
            "cleaner_interval_ms": 0,
            "linger_ms": 1,
            "metrics_listen": "",
            **overrides,
        },
    )
    broker = Broker(config)
    server = FlightBroker(broker, "grpc://127.0.0.1:0")
    location = f"127.0.0.1:{server.port}"
    broker.start(location)
    try:
        yield server, location
    finally:
        broker.close()
        server.shutdown()
