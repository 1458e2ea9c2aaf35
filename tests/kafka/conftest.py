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


@pytest.fixture(scope="module", params=[1, 3], ids=["one-broker", "three-brokers"])
def brokers(request: pytest.FixtureRequest, tmp_path_factory) -> Iterator[Cluster]:
    """A running cluster shared by a module's tests: one broker, then three on one root.

    DESIGN §4: every test of the Kafka listener runs against one broker and a
    three-broker cluster. Tests sharing it name their own topics, groups and ids;
    a test that kills or restarts brokers takes ``kafka_cluster`` instead.
    """
    count = int(request.param)
    workdir = tmp_path_factory.mktemp(f"brokers-{count}")
    cluster = Cluster(workdir, f"file://{workdir}/root")
    try:
        for broker_id in range(count):
            cluster.start(broker_id)
        if count > 1:
            cluster.wait_live(count)
        yield cluster
    finally:
        cluster.stop_all()
