"""kafka_listen / kafka_advertised: parsing, the 0.0.0.0 rule, disabling, port 0."""

from __future__ import annotations

import pytest

from sparklog.broker_lite.config import load_config
from sparklog.broker_lite.server import start_broker, stop_broker
from sparklog.errors import InvalidConfigurationError


def test_defaults_and_environment() -> None:
    config = load_config(None, env={})
    assert (config.kafka_listen, config.kafka_advertised) == ("127.0.0.1:9092", "")
    config = load_config(
        None,
        env={
            "SPARKLOG_KAFKA_LISTEN": "0.0.0.0:0",
            "SPARKLOG_KAFKA_ADVERTISED": "kafka.local:9",
            "SPARKLOG_ALLOW_INSECURE_LISTENER": "true",
        },
    )
    assert (config.kafka_listen, config.kafka_advertised) == ("0.0.0.0:0", "kafka.local:9")
    assert load_config(None, {"kafka_listen": ""}, env={}).kafka_listen == ""


def test_every_interface_without_an_advertised_address_is_refused() -> None:
    with pytest.raises(InvalidConfigurationError, match="kafka_advertised"):
        load_config(None, {"kafka_listen": "0.0.0.0:9092"}, env={})


def test_bad_address_names_the_key() -> None:
    with pytest.raises(InvalidConfigurationError, match="kafka_listen.*HOST:PORT"):
        load_config(None, {"kafka_listen": "nonsense"}, env={})


def test_port_zero_is_reported_and_empty_disables(tmp_path) -> None:
    base = {"root": f"file://{tmp_path}/root", "listen": "127.0.0.1:0", "metrics_listen": ""}
    server, broker, _ = start_broker(
        load_config(None, {**base, "kafka_listen": "127.0.0.1:0"}, env={})
    )
    try:
        address = server.kafka.advertised
        assert address.startswith("127.0.0.1:") and not address.endswith(":0")
        brokers = broker.describe_cluster()["brokers"]
        assert [b["kafka_address"] for b in brokers] == [address]
    finally:
        stop_broker(server, broker)
    server, broker, _ = start_broker(load_config(None, {**base, "kafka_listen": ""}, env={}))
    try:
        assert server.kafka is None
        assert broker.describe_cluster()["brokers"][0]["kafka_address"] is None
    finally:
        stop_broker(server, broker)
