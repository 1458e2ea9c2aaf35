"""The control plane answers from memory: costs flat in topics, O(brokers) when idle.

Brokers run as processes on a moto S3 root reached through the tests' counting
proxy (``tests/support/counting_s3``: S3 requests by kind, what S3 bills) or
through the fault proxy; assertions compare request counts with each other
(per lease renewal), never with times.
"""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import urlparse

import pytest

from sparklog.client.transports.flight_client import BrokerClient
from sparklog.protocol import actions
from tests.support.brokers import Cluster
from tests.support.counting_s3 import CountingProxy
from tests.support.s3 import MotoS3
from tests.support.tcp_proxy import FaultProxy
from tests.support.waiting import wait_for


@pytest.fixture
def counted_s3(moto_s3: MotoS3) -> Iterator[tuple[CountingProxy, str, dict]]:
    proxy = CountingProxy(moto_s3.endpoint_url)
    try:
        yield proxy, moto_s3.fresh_root(), proxy.storage_options()
    finally:
        proxy.close()


@pytest.fixture
def faulty_s3(moto_s3: MotoS3) -> Iterator[tuple[FaultProxy, str, dict]]:
    url = urlparse(moto_s3.endpoint_url)
    proxy = FaultProxy.start((url.hostname or "127.0.0.1", int(url.port or 80)))
    options = {
        **moto_s3.storage_options,
        "client_kwargs": {"endpoint_url": proxy.endpoint_url, "region_name": "us-east-1"},
        "request_timeout_ms": 2_000,
    }
    try:
        yield proxy, moto_s3.fresh_root(), options
    finally:
        proxy.stop()


@pytest.mark.slow
def test_an_idle_cluster_costs_o_brokers_and_lists_nothing(tmp_path, counted_s3) -> None:
    """Five idle brokers and 40 topics: no LIST; per lease renewal (one PUT) at most the
    lease of its monitored peer and one probe of the metadata log are read, whatever the
    topic count (reading every peer's lease would be four GETs per PUT, plus the probe)."""
    proxy, root, options = counted_s3
    cluster = Cluster(tmp_path, root, options)
    intervals = {"lease_interval_ms": 300, "lease_timeout_ms": 3_000, "metadata_refresh_ms": 300}
    try:
        for broker_id in range(1, 6):
            cluster.start(broker_id, **intervals)
        cluster.wait_live(5)
        with BrokerClient(cluster.bootstrap) as admin:
            for i in range(40):
                admin.create_topic(f"t{i}", 4)
        # settle: every broker opens the logs of the shards it leads once, after start
        settled = proxy.snapshot()["PUT"]
        wait_for(lambda: proxy.snapshot()["PUT"] >= settled + 60, 120, "the brokers to settle")
        before = proxy.snapshot()
        wait_for(lambda: proxy.snapshot()["PUT"] >= before["PUT"] + 5 * 12, 120, "60 renewals")
        after = proxy.snapshot()
        delta = {k: after.get(k, 0) - before.get(k, 0) for k in after}
        assert delta.get("LIST", 0) == 0, delta
        assert delta.get("GET", 0) <= 2.5 * delta["PUT"], delta
    finally:
        cluster.stop()


@pytest.mark.slow
def test_metadata_is_answered_while_the_store_is_unreachable(tmp_path, faulty_s3) -> None:
    """Kafka Metadata, DescribeCluster-style listing and Flight topic listing answer from
    memory: with every S3 request black-holed they still name every topic and partition."""
    kafka_admin = pytest.importorskip("confluent_kafka.admin")
    proxy, root, options = faulty_s3
    cluster = Cluster(tmp_path, root, options)
    try:
        cluster.start(1, lease_timeout_ms=60_000)
        cluster.wait_live(1)
        with BrokerClient(cluster.bootstrap) as admin:
            for i in range(30):
                admin.create_topic(f"t{i}", 3)
        proxy.set("blackhole")
        kafka = kafka_admin.AdminClient({"bootstrap.servers": cluster.kafka_bootstrap})
        found = kafka.list_topics(timeout=20).topics
        # the read-only view of the group logs is listed too, from memory alike
        assert len(found.pop("__consumer_offsets").partitions) == 50
        assert sorted(found) == sorted(f"t{i}" for i in range(30))
        assert {len(t.partitions) for t in found.values()} == {3}
        with BrokerClient(cluster.bootstrap, retry_timeout_ms=0) as client:
            assert len(client.call(actions.LIST_TOPICS)) == 30
            meta = client.metadata(["t7"])["t7"]
            assert [p.partition for p in meta.partitions] == [0, 1, 2]
    finally:
        proxy.heal()
        cluster.stop()


@pytest.mark.slow
def test_a_new_topic_spreads_its_leaders_over_every_live_broker(tmp_path) -> None:
    """Three brokers, a topic of 12 partitions with the defaults: four shards per broker
    (format 3), each broker leads four partitions (commit.shards defaulted to 1 before:
    one broker led all). Issue 36 item 3: when one dies its shards spread over both
    survivors (6 and 6, not 8 and 4 as whole shards of one per broker did), and a broker
    that joins takes a share of the topic."""
    cluster = Cluster(tmp_path, f"file://{tmp_path}/root")

    def wait_spread(ids: tuple[int, ...], counts: list[int]) -> None:
        for broker_id in ids:  # every broker's view converges to the same map
            location = cluster.brokers[broker_id].location
            with BrokerClient(location, discover=False) as client:

                def spread(client: BrokerClient = client) -> bool:
                    meta = client.metadata(["spread"])["spread"]
                    leaders = [p.leader_id for p in meta.partitions]
                    assert meta.config["commit.shards"] == 12
                    return sorted(leaders.count(b) for b in ids) == counts

                wait_for(spread, 60, f"broker {broker_id} to see the leaders spread over {ids}")

    try:
        for broker_id in (1, 2, 3):
            # a lease timeout a loaded machine cannot miss: no broker fenced by mistake
            cluster.start(broker_id, lease_timeout_ms=6_000)
        cluster.wait_live(3)
        with BrokerClient(cluster.bootstrap) as admin:
            admin.create_topic("spread", 12)
        wait_spread((1, 2, 3), [4, 4, 4])
        cluster.kill(3)
        wait_spread((1, 2), [6, 6])
        cluster.start(4, lease_timeout_ms=6_000)
        wait_spread((1, 2, 4), [4, 4, 4])
    finally:
        cluster.stop()
