"""A Producer's send() never raises because a metadata refresh cannot reach storage.

Kafka's contract: cached metadata keeps serving when a refresh fails; with none,
send() blocks at most ``max_block_ms`` and then fails the returned future, never
raising for a retriable cause.  The store is moto's S3 behind the fault proxy,
black-holed (every request hangs until its deadline).
"""

from __future__ import annotations

import pytest

from sparklog import Producer
from sparklog.errors import SparklogError
from sparklog.storage import open_root
from tests.chaos.conftest import ProxiedS3


def test_send_survives_an_unreachable_store(proxied_s3: ProxiedS3) -> None:
    options = proxied_s3.storage_options(request_timeout_ms=500)
    open_root(proxied_s3.root, options, create=True).create_topic("t", 3)
    producer = Producer(
        proxied_s3.root,
        storage_options=options,
        metadata_max_age_ms=0,  # every send refreshes: the refresh must not fail the send
        max_block_ms=1_000,
        delivery_timeout_ms=60_000,
    )
    try:
        assert producer.send("t", b"before", key=b"k").get(timeout=30).offset == 0
        proxied_s3.proxy.set("blackhole")
        buffered = producer.send("t", b"during", key=b"k")  # cached metadata: no raise
        assert buffered.partition == producer.send("t", b"x", key=b"k").partition
        unknown = producer.send("never-seen", b"v")  # no metadata at all: a failed future
        with pytest.raises(SparklogError) as err:
            unknown.get(timeout=30)
        assert err.value.retriable
        proxied_s3.proxy.heal()
        assert buffered.get(timeout=60).offset == 1
    finally:
        proxied_s3.proxy.heal()
        producer.close()
