"""Clients are not told "failed" for committed records (issue 15, item 3)."""

from __future__ import annotations

import pytest

from sparklog.client.transports.flight_client import BrokerClient, ProduceResult
from sparklog.errors import CommitStateUnknownError
from sparklog.protocol import actions
from sparklog.storage import ProducerBatch, make_batch, open_root
from tests.chaos.conftest import ProxiedS3
from tests.chaos.inproc import inproc_broker


def _values(root_url: str, topic: str, options: dict | None = None) -> list[bytes]:
    log = open_root(root_url, options or {}).topic(topic).partition(0)
    return [
        v for b in log.iter_batches(0, log.high_watermark) for v in b.column("value").to_pylist()
    ]


def _send(
    client: BrokerClient, producer: tuple[int, int], sequence: int, values: list[bytes]
) -> ProduceResult:
    """An idempotent produce of ``values`` to t-0 from ``sequence`` on."""
    pid, epoch = producer
    return client.produce(
        "t", 0, make_batch(values), producer_id=pid, producer_epoch=epoch, base_sequence=sequence
    )


def test_stale_writer_refreshes_before_out_of_order(tmp_path) -> None:
    """Another writer advanced the producer's sequences: the leader re-reads, then accepts."""
    url = f"file://{tmp_path}/root"
    with inproc_broker(url) as (_, loc), BrokerClient(loc) as client:
        client.create_topic("t", 1)
        pid, epoch = client.call(actions.INIT_PRODUCER_ID)
        assert _send(client, (pid, epoch), 0, [b"a", b"b"]).base_offset == 0
        # e.g. a previous leader of the partition committed the next batch meanwhile
        open_root(url).topic("t").append(
            0, make_batch([b"c", b"d"]), producer=ProducerBatch(pid, epoch, 2, 2)
        )
        third = _send(client, (pid, epoch), 4, [b"e"])
        assert third.base_offset == 4 and not third.duplicate
    assert _values(url, "t") == [b"a", b"b", b"c", b"d", b"e"]


def test_lost_commit_answer_is_retried_not_failed(proxied_s3: ProxiedS3) -> None:
    """The commit PUT is applied but its answer lost: the same batch is retried and found
    (format 2's shard-log commit; the journal's: the next test)."""
    options = proxied_s3.storage_options(request_timeout_ms=3_000)
    options["config_kwargs"] = {"retries": {"max_attempts": 1}}  # no hidden retry below us
    with (
        inproc_broker(proxied_s3.root, storage_options=options, journal_records=False) as (_, loc),
        BrokerClient(loc, retry_timeout_ms=30_000) as client,
    ):
        client.create_topic("t", 1)
        producer = client.call(actions.INIT_PRODUCER_ID)
        _send(client, producer, 0, [b"a"])
        proxied_s3.proxy.mute_next(b"PUT", b"/log/")
        got = _send(client, producer, 1, [b"b", b"c"])
        assert proxied_s3.proxy.muted_requests == 1
        assert got.base_offset == 1
    assert _values(proxied_s3.root, "t", proxied_s3.moto.storage_options) == [b"a", b"b", b"c"]


def test_lost_journal_commit_answer_is_retried_not_failed(proxied_s3: ProxiedS3) -> None:
    """Format 3: the journal commit PUT is applied but its answer lost: the writer
    creates the version again, finds its own commit there, and acknowledges."""
    options = proxied_s3.storage_options(request_timeout_ms=3_000)
    options["config_kwargs"] = {"retries": {"max_attempts": 1}}  # no hidden retry below us
    with (
        inproc_broker(proxied_s3.root, storage_options=options, journal_records=True) as (_, loc),
        BrokerClient(loc, retry_timeout_ms=0) as client,  # the broker alone must settle it
    ):
        client.create_topic("t", 1)
        producer = client.call(actions.INIT_PRODUCER_ID)
        _send(client, producer, 0, [b"a"])  # leases the shard
        proxied_s3.proxy.mute_next(b"PUT", b"/journal/")
        got = _send(client, producer, 1, [b"b", b"c"])
        assert proxied_s3.proxy.muted_requests == 1
        assert got.base_offset == 1 and not got.duplicate
    assert _values(proxied_s3.root, "t", proxied_s3.moto.storage_options) == [b"a", b"b", b"c"]


def test_gave_up_while_outcome_open_says_unknown(proxied_s3: ProxiedS3) -> None:
    """Out of time after an attempt that may have committed: "outcome unknown", not failed."""
    options = proxied_s3.storage_options(request_timeout_ms=3_000)
    options["config_kwargs"] = {"retries": {"max_attempts": 1}}
    with (
        inproc_broker(proxied_s3.root, storage_options=options) as (_, loc),
        BrokerClient(loc, retry_timeout_ms=8_000) as client,
    ):
        client.create_topic("t", 1)
        pid, epoch = client.call(actions.INIT_PRODUCER_ID)
        proxied_s3.proxy.mute_next(b"PUT", b"/log/", count=1)
        proxied_s3.proxy.set("blackhole")
        with pytest.raises(CommitStateUnknownError, match="outcome unknown"):
            _send(client, (pid, epoch), 0, [b"a"])
        proxied_s3.proxy.heal()
