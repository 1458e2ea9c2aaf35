"""The CLI given a broker's Kafka port names it as such and the Flight address to use
(issue 24 item 9); before, it said "unreachable"."""

from __future__ import annotations

import os
import subprocess
import sys

from sparklog.client.transports.kafka_probe import probe
from tests.support.brokers import REPO, Cluster


def test_cli_on_the_kafka_port_names_the_flight_address(brokers: Cluster) -> None:
    broker = brokers.brokers[0]
    kafka = broker.kafka_address
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPARKLOG_")}
    env.update(PYTHONPATH=str(REPO), COLUMNS="200")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "sparklog.cli",
            "--address",
            f"sparklog://{kafka}",
            "topics",
            "list",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=120,
    )
    assert proc.returncode != 0
    assert "Kafka protocol listener" in proc.stderr and kafka in proc.stderr
    flight = broker.location.removeprefix("grpc://")
    assert f"sparklog://{flight}" in proc.stderr
    assert "unreachable" not in proc.stderr


def test_probe_tells_kafka_listeners_from_other_ports(brokers: Cluster) -> None:
    broker = brokers.brokers[0]
    found = probe(broker.kafka_address)
    assert found is not None and found.flight_address.endswith(
        broker.location.removeprefix("grpc://")
    )
    assert probe(broker.location.removeprefix("grpc://")) is None  # the Flight port itself
    assert probe("127.0.0.1:1") is None  # nothing listening
