"""A store answering in seconds slows the cluster down but does not stop it (issue 26 item 3).

Leases are renewed by one write and watched by reads of the same slow store; a
broker must keep its leadership through a slow patch as long as no other broker
can have taken over, instead of flapping and acknowledging nothing.
"""

from __future__ import annotations

import pytest

from sparklog.client.transports.flight_client import BrokerClient
from sparklog.storage import make_batch
from tests.chaos.conftest import ProxiedS3
from tests.chaos.inproc import inproc_broker


@pytest.mark.slow
@pytest.mark.parametrize(
    "produces",
    # two slow produces (several 3-5 s requests each) outlast the 6 s lease timeout twice
    # over; the soak holds the slow patch twice as long
    [pytest.param(2, id="default"), pytest.param(4, marks=pytest.mark.soak, id="soak")],
)
def test_a_store_taking_seconds_per_request_keeps_producing(
    proxied_s3: ProxiedS3, produces: int
) -> None:
    options = proxied_s3.storage_options(request_timeout_ms=20_000)
    with (
        inproc_broker(proxied_s3.root, storage_options=options, broker_id=3) as (server, loc),
        BrokerClient(loc, retry_timeout_ms=120_000) as client,
    ):
        client.create_topic("t", 2)
        assert client.produce("t", 0, make_batch([b"before"])).base_offset == 0
        topic = server.broker.topic("t")
        epoch_before = server.broker.partition_state(topic, 0).epoch
        proxied_s3.proxy.set("delay", delay_ms=1_000)  # 3-5 s per request (a PUT is 4-5 chunks)
        for i in range(produces):
            result = client.produce("t", i % 2, make_batch([b"slow-%d" % i]))
            assert result.record_count == 1
        proxied_s3.proxy.heal()
        assert server.broker.partition_state(topic, 0).epoch == epoch_before  # no flapping
