"""Fixtures of the client tests: real brokers on loopback ports."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.sparklog.brokers import BrokerCluster


@pytest.fixture
def broker(tmp_path) -> Iterator[BrokerCluster]:
    """One broker on a fresh file root."""
    cluster = BrokerCluster(f"file://{tmp_path}/broker-root", tmp_path)
    cluster.start(1)
    try:
        cluster.wait_live(1)
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def two_brokers(tmp_path) -> Iterator[BrokerCluster]:
    """Two brokers sharing a file root (for failover)."""
    cluster = BrokerCluster(f"file://{tmp_path}/broker-root", tmp_path)
    cluster.start(1)
    cluster.start(2)
    try:
        cluster.wait_live(2)
        yield cluster
    finally:
        cluster.stop()
