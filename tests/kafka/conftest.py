"""Fixtures: sparklog broker processes whose Kafka listeners real Kafka clients use."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.brokers import Cluster


@pytest.fixture
def kafka_cluster(tmp_path) -> Iterator[Cluster]:
    """A cluster on a local root; ``start(id)`` adds brokers, all stopped at teardown."""
    cluster = Cluster(tmp_path, f"file://{tmp_path}/root")
    yield cluster
    cluster.stop_all()


@pytest.fixture
def one_broker(kafka_cluster: Cluster) -> Cluster:
    kafka_cluster.start(0)
    return kafka_cluster
