"""Kafka client contracts in embedded and broker mode: send timestamps, in-flight futures,
commits on rebalance and close, key spreading, commit metadata, describe, compression, restarts."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest

from sparklog import Admin, Consumer, OffsetAndMetadata, Producer, TopicPartition
from sparklog.client.partitioner import partition_for_key
from sparklog.client.transports.flight_client import BrokerClient
from sparklog.client.types import ConsumerRebalanceListener
from sparklog.errors import KafkaTimeoutError, SparklogError
from sparklog.protocol import actions
from tests.support.brokers import Cluster
from tests.support.waiting import wait_for


@pytest.fixture(params=["file", "s3", "broker"])
def mode(request, tmp_path) -> tuple[str, dict]:
    """(address, storage options) of a fresh root, or of a real broker."""
    if request.param == "broker":
        return request.getfixturevalue("broker").address, {}
    if request.param == "file":
        return f"file://{tmp_path}/root", {}
    s3 = request.getfixturevalue("moto_s3")
    return s3.fresh_root(), s3.storage_options


def _drain(consumer: Consumer, expected: int, timeout_s: float = 30) -> list:
    got: list = []
    deadline = time.monotonic() + timeout_s
    while len(got) < expected and time.monotonic() < deadline:
        got.extend(consumer.poll_records(timeout_ms=200))
    return got


def test_send_batch_without_timestamps_stores_the_send_time(mode):
    """Item 7: rows without a timestamp get the send time, so time lookups find them."""
    url, options = mode
    with Admin(url, storage_options=options) as admin:
        admin.create_topic("nots", partitions=1)
    before_ms = int(time.time() * 1000)
    with Producer(url, storage_options=options) as producer:
        producer.send_batch("nots", pa.table({"value": [b"a", b"b", b"c"]})).get(timeout=30)
        stamps = pa.array([None, 5_000], pa.int64())
        producer.send_batch("nots", pa.table({"value": [b"d", b"e"], "timestamp": stamps}))
        producer.flush()
    after_ms = int(time.time() * 1000)
    consumer = Consumer(url, storage_options=options, auto_offset_reset="earliest")
    consumer.assign([TopicPartition("nots", 0)])
    records = _drain(consumer, 5)
    assert [r.value for r in records] == [b"a", b"b", b"c", b"d", b"e"]
    assert all(before_ms <= r.timestamp <= after_ms for r in records[:4]), records
    assert records[4].timestamp == 5_000, "a given timestamp is kept"
    found = consumer.offsets_for_times({TopicPartition("nots", 0): before_ms})
    assert found[TopicPartition("nots", 0)].offset == 0
    consumer.close()


def test_future_exception_while_in_flight_raises_timeout(tmp_path):
    """Item 5: exception(timeout) raises the timeout to the caller; it is not the record's error."""
    url = f"file://{tmp_path}/root"
    with Admin(url) as admin:
        admin.create_topic("inflight", partitions=1)
    producer = Producer(url, linger_ms=60_000)
    future = producer.send("inflight", b"x")
    with pytest.raises(KafkaTimeoutError):
        future.exception(timeout=0.05)
    assert not future.done()
    producer.flush()
    assert future.exception(timeout=5) is None
    assert future.get(timeout=5).offset == 0
    producer.close()


def _fill(url: str, options: dict, topic: str, partitions: int, count: int) -> None:
    with Admin(url, storage_options=options) as admin:
        admin.create_topic(topic, partitions=partitions)
    with Producer(url, storage_options=options) as producer:
        for i in range(count):
            producer.send(topic, f"v{i}".encode(), key=f"k{i}".encode())


GROUP_CONFIG = {
    "auto_offset_reset": "earliest",
    "auto_commit_interval_ms": 600_000,  # only revocation and close commit in these tests
    "heartbeat_interval_ms": 100,
    "session_timeout_ms": 6_000,
    "rebalance_timeout_ms": 20_000,
}


def test_rebalance_commits_what_the_old_owner_delivered(mode):
    """Item 2: a member auto-commits before giving partitions up, so nobody re-reads them."""
    url, options = mode
    _fill(url, options, "shared", 4, 400)
    first = Consumer("shared", address=url, group_id="g", storage_options=options, **GROUP_CONFIG)
    got_first = _drain(first, 400)
    assert len(got_first) == 400
    second = Consumer(address=url, group_id="g", storage_options=options, **GROUP_CONFIG)
    second.subscribe(["shared"])
    got_second: list = []
    joining = threading.Thread(target=lambda: got_second.extend(second.poll_records(100)))
    joining.start()

    def first_rejoined() -> bool:
        got_first.extend(first.poll_records(timeout_ms=100))
        return not joining.is_alive()

    wait_for(first_rejoined, 60, "the second member to join")
    assert first.assignment() and second.assignment()
    assert first.assignment() | second.assignment() == {
        TopicPartition("shared", p) for p in range(4)
    }
    got_second.extend(second.poll_records(timeout_ms=1000))
    got_first.extend(first.poll_records(timeout_ms=1000))
    assert len(got_second) == 0, "the new owner re-read records the old owner delivered"
    assert len(got_first) == 400
    first.close()
    second.close()


class _Recorder(ConsumerRebalanceListener):
    def __init__(self) -> None:
        self.events: list[tuple[str, set]] = []

    def on_partitions_revoked(self, revoked: list) -> None:
        self.events.append(("revoked", set(revoked)))

    def on_partitions_assigned(self, assigned: list) -> None:
        self.events.append(("assigned", set(assigned)))


def test_close_commits_and_calls_the_revoke_listener(mode):
    """Item 2: close() commits what was delivered and tells the listener of the revocation."""
    url, options = mode
    _fill(url, options, "closing", 2, 50)
    listener = _Recorder()
    consumer = Consumer(address=url, group_id="gc", storage_options=options, **GROUP_CONFIG)
    consumer.subscribe(["closing"], listener=listener)
    got = _drain(consumer, 30)
    while len(got) < 30:
        got.extend(consumer.poll_records(timeout_ms=200))
    consumer.close()
    everything = {TopicPartition("closing", 0), TopicPartition("closing", 1)}
    assert listener.events == [("assigned", everything), ("revoked", everything)]
    delivered: dict = {}
    for record in got:
        delivered[record.topic_partition] = record.offset + 1
    again = Consumer(address=url, group_id="gc", storage_options=options, **GROUP_CONFIG)
    assert {tp: again.committed(tp) for tp in everything} == {
        tp: delivered.get(tp) for tp in everything
    }
    again.close()


def test_cli_produce_through_a_broker_spreads_keys_like_kafka(broker, tmp_path):
    """Item 1: keyed lines from ``sparklog produce`` land where Kafka's murmur2 puts them."""
    with Admin(broker.address) as admin:
        admin.create_topic("spread", partitions=4)
    lines = tmp_path / "in"
    lines.write_text("".join(f"k{i}:{i}\n" for i in range(1, 4001)))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "sparklog.cli",
            "--address",
            broker.address,
            "--output",
            "json",
            "produce",
            "spread",
            "--key-separator",
            ":",
            "--file",
            str(lines),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    expected = [0] * 4
    for i in range(1, 4001):
        expected[partition_for_key(f"k{i}".encode(), 4)] += 1
    written = {e["partition"]: e["records"] for e in json.loads(done.stdout)["partitions"]}
    assert written == dict(enumerate(expected))
    with Admin(broker.address) as admin:
        described = admin.describe_topic("spread")
    assert [p.high_watermark for p in described.partitions] == expected


def test_commit_metadata_round_trips(mode):
    """Item 4: OffsetAndMetadata's metadata comes back in both modes."""
    url, options = mode
    _fill(url, options, "meta", 1, 5)
    tp = TopicPartition("meta", 0)
    consumer = Consumer(address=url, group_id="gm", storage_options=options)
    consumer.assign([tp])
    consumer.commit({tp: OffsetAndMetadata(3, "checkpoint-7")})
    assert consumer.committed(tp, metadata=True) == OffsetAndMetadata(3, "checkpoint-7")
    assert consumer.committed(tp) == 3
    consumer.close(autocommit=False)
    with Admin(url, storage_options=options) as admin:
        offsets = admin.list_consumer_group_offsets("gm")
    assert offsets == {tp: OffsetAndMetadata(3, "checkpoint-7")}


def test_describe_topic_fills_leader_and_size_in_both_modes(mode):
    """Item 4: leader and size_bytes are filled whichever the mode."""
    url, options = mode
    _fill(url, options, "described", 2, 40)
    with Admin(url, storage_options=options) as admin:
        described = admin.describe_topic("described")
    assert all(p.leader for p in described.partitions)
    assert sum(p.size_bytes or 0 for p in described.partitions) > 40 * 3
    assert all(p.size_bytes is not None and p.size_bytes >= 0 for p in described.partitions)


def test_typed_topics_through_admin(mode):
    """Item 4: Admin creates typed topics; struct values go in and come out as dicts."""
    url, options = mode
    value_type = pa.struct([("user", pa.string()), ("clicks", pa.int64())])
    with Admin(url, storage_options=options) as admin:
        created = admin.create_topic("typed", 1, value_type=value_type)
        assert created.value_type == value_type
        assert admin.describe_topic("typed").value_type == value_type
    with Producer(url, storage_options=options) as producer:
        producer.send("typed", {"user": "ann", "clicks": 3}).get(timeout=30)
    consumer = Consumer(address=url, storage_options=options, auto_offset_reset="earliest")
    consumer.assign([TopicPartition("typed", 0)])
    assert [r.value for r in _drain(consumer, 1)] == [{"user": "ann", "clicks": 3}]
    consumer.close()


def _object_bytes(root_dir: Path, topic: str) -> int:
    return sum(f.stat().st_size for f in (root_dir / "topics" / topic).rglob("*.arrow"))


def test_producer_compression_none_is_honoured_by_a_compressing_broker(tmp_path):
    """Item 4: a producer's explicit "none" is not replaced by the broker's codec."""
    cluster = Cluster(tmp_path, f"file://{tmp_path}/root")
    cluster.start(1, compression="zstd")
    try:
        cluster.wait_live(1)
        with Admin(cluster.address) as admin:
            admin.create_topic("plain", 1)
            admin.create_topic("default", 1)
        payload = pa.table({"value": [b"a" * 1000] * 200})
        with Producer(cluster.address, compression="none") as producer:
            producer.send_batch("plain", payload).get(timeout=30)
        with Producer(cluster.address) as producer:
            producer.send_batch("default", payload).get(timeout=30)
    finally:
        cluster.stop()
    assert _object_bytes(tmp_path / "root", "plain") > 200 * 1000, "stored compressed"
    assert _object_bytes(tmp_path / "root", "default") < 200 * 1000 / 10, "broker codec unused"


def test_second_broker_with_a_taken_metrics_port_names_the_key(tmp_path):
    """Item 6: the clash message names the address and the key; the failed broker leads nothing."""
    cluster = Cluster(tmp_path, f"file://{tmp_path}/root")
    first = cluster.start(1)  # metrics on port 0
    metrics = f"127.0.0.1:{first.metrics_port}"
    try:
        cluster.wait_live(1)
        with pytest.raises(RuntimeError, match="exited"):
            cluster.start(2, metrics_listen=metrics)  # the same address: it must refuse
        second = cluster.brokers.pop(2)
        assert second.proc is not None and second.proc.wait(timeout=120) != 0
        output = second.log_text()
        assert "metrics_listen" in output and metrics in output, output
        assert "Traceback" not in output
        with BrokerClient(cluster.bootstrap) as client:
            assert [b["broker_id"] for b in client.call(actions.DESCRIBE_CLUSTER)["brokers"]] == [1]
    finally:
        cluster.stop()


def test_fresh_broker_leads_at_once_after_a_crash(tmp_path):
    """Item 6: a crashed broker's unexpired lease does not keep a fresh broker from leading."""
    cluster = Cluster(tmp_path, f"file://{tmp_path}/root")
    cluster.start(1, lease_timeout_ms=120_000, lease_interval_ms=200)
    try:
        cluster.wait_live(1)
        with Admin(cluster.address) as admin:
            admin.create_topic("led", 8)
        cluster.kill(1)
        fresh = cluster.start(2).location

        def leads_everything() -> bool:
            try:
                with BrokerClient(fresh, retry_timeout_ms=500, discover=False) as client:
                    parts = client.metadata(["led"])["led"].partitions
            except SparklogError:
                return False
            return [p.leader_id for p in parts] == [2] * 8

        # the dead broker's lease runs 120 s: leading within 60 s means it was seen as gone
        wait_for(leads_everything, 60, "the fresh broker to lead every partition")
        with Producer(fresh, retry_timeout_ms=10_000) as producer:
            assert producer.send("led", b"x", partition=3).get(timeout=30).offset == 0
    finally:
        cluster.stop()


@pytest.mark.slow
def test_two_cli_group_consumers_print_each_record_once(tmp_path):
    """Item 2 as reported: two ``sparklog consume --group`` processes started together."""
    root = f"file://{tmp_path}/root"
    _fill(root, {}, "t", 4, 4000)
    command = [
        sys.executable, "-m", "sparklog.cli", "--address", root, "consume", "t",
        "--group", "g1", "--from-beginning", "--timeout-ms", "8000", "--format", "json",
    ]  # fmt: skip
    # files, not pipes: a member blocked on a full pipe stops polling and is dropped
    outputs = [tmp_path / f"out-{i}.jsonl" for i in range(2)]
    procs = [
        subprocess.Popen(command, stdout=out.open("w"), stderr=subprocess.DEVNULL)
        for out in outputs
    ]
    for proc in procs:
        assert proc.wait(timeout=300) == 0
    printed = [json.loads(line) for out in outputs for line in out.read_text().splitlines()]
    offsets = [(r["partition"], r["offset"]) for r in printed]
    assert len(offsets) == 4000 and len(set(offsets)) == 4000


def test_a_bug_under_send_reaches_the_caller_with_its_cause_and_is_logged(tmp_path, caplog):
    """A programming error below the producer (here a backend whose produce has a bug: a
    stand-in, since sparklog's own backends have none we know of) is not an outage: the
    record's error keeps the original exception as its cause, and the traceback is logged."""
    from sparklog.client.transports import open_backend
    from sparklog.errors import UnknownServerError

    backend = open_backend(f"file://{tmp_path}/root", {}, create=True)
    backend.create_topic("t", 1, {})

    def broken_produce(*args, **kwargs):
        raise ZeroDivisionError("a bug")

    backend.produce = broken_produce  # type: ignore[method-assign]
    with (
        caplog.at_level("ERROR", logger="sparklog.client.producer"),
        Producer(backend=backend, retries=0) as producer,
    ):
        future = producer.send("t", b"v", partition=0)
        producer.flush()
        with pytest.raises(UnknownServerError) as info:
            future.get(timeout=10)
    assert isinstance(info.value.__cause__, ZeroDivisionError)
    assert not info.value.retriable
    logged = [r for r in caplog.records if r.exc_info and r.exc_info[0] is ZeroDivisionError]
    assert logged, "the bug's traceback is logged"
