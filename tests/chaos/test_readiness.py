"""A starting broker refuses with a retriable error until it is ready (issue 15, item 2)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from sparklog.broker_lite.config import load_config
from sparklog.broker_lite.server import FlightBroker
from sparklog.broker_lite.service import Broker
from sparklog.client.transports.flight_client import BrokerClient
from sparklog.errors import BrokerNotAvailableError
from sparklog.protocol import actions
from tests.support.waiting import wait_for


def _refused(broker: Broker, code: str) -> float:
    return sum(
        s.value
        for metric in broker.metrics.requests.collect()
        for s in metric.samples
        if s.name.endswith("_total") and s.labels.get("code") == code
    )


def test_requests_before_start_are_retried_not_failed(tmp_path) -> None:
    config = load_config(
        None,
        {"root": f"file://{tmp_path}/root", "listen": "127.0.0.1:0", "cleaner_interval_ms": 0},
    )
    broker = Broker(config)
    server = FlightBroker(broker, "grpc://127.0.0.1:0")
    location = f"127.0.0.1:{server.port}"
    outcome: dict[str, Any] = {}

    def ask() -> None:
        with BrokerClient(location, retry_timeout_ms=60_000) as client:
            try:
                outcome["topics"] = client.call(actions.LIST_TOPICS)
            except Exception as exc:  # the assertion below names it
                outcome["error"] = exc

    asker = threading.Thread(target=ask)
    try:
        asker.start()
        # The listener is up and the broker is not: the client must be told "not yet".
        wait_for(
            lambda: _refused(broker, "BROKER_NOT_AVAILABLE") > 0 or "error" in outcome,
            timeout_s=30,
            what="a refused request",
        )
        assert "error" not in outcome, outcome
        broker.start(location)
        asker.join(timeout=60)
        assert outcome == {"topics": []}
    finally:
        broker.close()
        server.shutdown()


def test_not_ready_error_is_retriable(tmp_path) -> None:
    config = load_config(None, {"root": f"file://{tmp_path}/root", "listen": "127.0.0.1:0"})
    broker = Broker(config)
    server = FlightBroker(broker, "grpc://127.0.0.1:0")
    try:
        with (
            BrokerClient(f"127.0.0.1:{server.port}", retry_timeout_ms=0) as client,
            pytest.raises(BrokerNotAvailableError) as info,
        ):
            client.call(actions.LIST_TOPICS)
        assert info.value.retriable and "starting" in str(info.value)
    finally:
        server.shutdown()
