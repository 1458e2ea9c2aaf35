"""Real broker processes on loopback ports: produce/fetch, batching, bad requests, shutdown."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import urllib.request

import pyarrow as pa
import pyarrow.flight as flight
import pytest

from sparklog.client.transports.flight_client import BrokerClient
from sparklog.errors import (
    InvalidRecordError,
    InvalidRequestError,
    OffsetOutOfRangeError,
    SparklogError,
    TopicExistsError,
    UnknownTopicError,
)
from sparklog.protocol import actions
from sparklog.storage import make_batch, open_root
from tests.support.brokers import REPO
from tests.support.waiting import wait_for


def values_of(batches: list[pa.RecordBatch]) -> list:
    return [v for b in batches for v in b.column("value").to_pylist()]


def read_all(client: BrokerClient, topic: str, partition: int) -> pa.Table:
    batches, offset = [], 0
    hwm = client.call(actions.LIST_OFFSETS, topic=topic, partition=partition, spec="latest")
    while offset < hwm:
        got = client.fetch(topic, partition, offset, max_wait_ms=0)
        batches.extend(got.batches)
        offset = got.batches[-1].column("offset")[-1].as_py() + 1
    return pa.Table.from_batches(batches) if batches else pa.table({})


def test_produce_fetch_round_trip(any_root, cluster_on):
    cluster = cluster_on(any_root)
    broker = cluster.start(0)
    with BrokerClient(cluster.bootstrap) as client:
        client.create_topic("events", 3)
        with pytest.raises(TopicExistsError):
            client.create_topic("events", 3)
        sent = {p: [] for p in range(3)}
        for i in range(12):
            p = i % 3
            values = [f"{i}-{j}".encode() for j in range(5)]
            batch = make_batch(
                values,
                keys=[b"k%d" % j for j in range(5)],
                timestamps_ms=[1_700_000_000_000 + i] * 5,
                headers=[[("h", b"x")]] * 5,
            )
            result = client.produce("events", p, batch)
            assert result.base_offset == len(sent[p]) and result.record_count == 5
            sent[p].extend(values)
        for p in range(3):
            table = read_all(client, "events", p)
            assert table.column("value").to_pylist() == sent[p]
            assert table.column("offset").to_pylist() == list(range(len(sent[p])))
            assert table.column("headers")[0].as_py() == [{"key": "h", "value": b"x"}]
        middle = client.fetch("events", 1, 7, max_wait_ms=0)
        assert values_of(middle.batches)[0] == sent[1][7]
        assert (middle.high_watermark, middle.log_start_offset) == (20, 0)
        meta = client.metadata(["events"])["events"]
        assert [p.high_watermark for p in meta.partitions] == [20, 20, 20]
        assert {p.leader_location for p in meta.partitions} == {broker.location}
        assert (
            client.call(actions.LIST_OFFSETS, topic="events", partition=0, spec=1_700_000_000_003)
            == 5
        )
        with pytest.raises(OffsetOutOfRangeError) as info:
            client.fetch("events", 0, 21)
        assert (info.value.log_start_offset, info.value.high_watermark) == (0, 20)

        # a long poll at the head returns the records produced while it waits
        got: dict = {}
        waiter = threading.Thread(
            target=lambda: got.update(r=client.fetch("events", 2, 20, max_wait_ms=20_000))
        )
        waiter.start()
        client.produce("events", 2, make_batch([b"late"]))
        waiter.join(timeout=30)
        assert values_of(got["r"].batches) == [b"late"]

        # Flight-native metadata: one endpoint per partition at its leader
        conn = flight.connect(f"grpc://{broker.location}")
        info = conn.get_flight_info(flight.FlightDescriptor.for_path("events"))
        assert len(info.endpoints) == 3
        assert info.endpoints[0].locations[0].uri.decode() == f"grpc://{broker.location}"
        table = conn.do_get(info.endpoints[1].ticket).read_all()
        assert table.column("value").to_pylist() == sent[1]
        assert [i.descriptor.path[0].decode() for i in conn.list_flights()] == ["events"]
        conn.close()
        # acks=0: answered before the commit, committed all the same
        assert client.produce("events", 0, make_batch([b"fire"]), acks=0).base_offset == -1
        wait_for(
            lambda: (
                client.call(actions.LIST_OFFSETS, topic="events", partition=0, spec="latest") >= 21
            ),
            timeout_s=30,
            what="the acks=0 record committed",
        )

        metrics = urllib.request.urlopen(f"http://127.0.0.1:{broker.metrics_port}/metrics").read()
        text = metrics.decode()
        assert 'sparklog_produce_records_total{topic="events"} 61.0' in text  # acks=0 not counted
        assert "sparklog_commit_seconds_bucket" in text


class _SignallingClient(BrokerClient):
    """A BrokerClient that says when a call has taken its connection."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(bootstrap)
        self.connected = threading.Event()

    def _conn(self, location: str) -> flight.FlightClient:
        conn = super()._conn(location)
        self.connected.set()
        return conn


def test_close_under_a_call_in_flight_lets_the_call_finish(file_root, cluster_on):
    """Closing a client while another thread is in a call on its connection.

    Closing the FlightClient under the call crashed the process (a segfault in
    CI) or failed the call; the call must finish and later calls must refuse.
    """
    cluster = cluster_on(file_root)
    cluster.start(0)
    with BrokerClient(cluster.bootstrap) as other:
        other.create_topic("events", 1)
        client = _SignallingClient(cluster.bootstrap)
        client.metadata(["events"])  # leaders known: the fetch's only call is the fetch
        client.connected.clear()
        got: dict = {}

        def long_poll() -> None:
            try:
                got["result"] = client.fetch("events", 0, 0, max_wait_ms=20_000)
            except Exception as exc:  # the assertion below names it
                got["error"] = exc

        waiter = threading.Thread(target=long_poll)
        waiter.start()
        assert client.connected.wait(30)
        client.close()
        other.produce("events", 0, make_batch([b"after close"]))
        waiter.join(timeout=60)
        assert "error" not in got, got
        assert values_of(got["result"].batches) == [b"after close"]
        with pytest.raises(SparklogError, match="broker client is closed"):
            client.fetch("events", 0, 0, max_wait_ms=0)


def test_many_small_producers_share_objects(file_root, cluster_on):
    cluster = cluster_on(file_root)
    cluster.start(0, linger_ms=50)
    with BrokerClient(cluster.bootstrap) as client:
        client.create_topic("busy", 8)
        requests = 0
        lock = threading.Lock()

        def produce(worker: int) -> None:
            nonlocal requests
            for i in range(10):
                client.produce("busy", (worker + i) % 8, make_batch([b"x" * 100]))
                with lock:
                    requests += 1

        threads = [threading.Thread(target=produce, args=(w,)) for w in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        meta = client.metadata(["busy"])["busy"]
        assert sum(p.high_watermark for p in meta.partitions) == requests == 160
    root = open_root(file_root[0])
    objects = [
        o
        for o in root.store.list_objects(f"topics/busy/{meta.topic_id}/objects")
        if o.key.endswith(".arrow")
    ]
    # 16 concurrent producers: requests gathered within linger_ms share one object
    assert len(objects) < requests / 2


def test_typed_topic_and_bad_requests_keep_the_broker_serving(file_root, cluster_on):
    cluster = cluster_on(file_root)
    broker = cluster.start(0)
    value_type = pa.struct([("id", pa.int64()), ("name", pa.string())])
    with BrokerClient(cluster.bootstrap, retry_timeout_ms=2000) as client:
        client.create_topic("typed", 1, value_type=value_type)
        client.create_topic("small", 1, config={"max.message.bytes": 100})
        ok = make_batch([{"id": 1, "name": "a"}], value_type=value_type)
        assert client.produce("typed", 0, ok).base_offset == 0
        assert client.metadata(["typed"])["typed"].value_type == value_type

        def still_serving() -> None:
            assert broker.alive
            before = client.call(actions.LIST_OFFSETS, topic="typed", partition=0, spec="latest")
            client.produce("typed", 0, ok)
            assert (
                client.call(actions.LIST_OFFSETS, topic="typed", partition=0, spec="latest")
                == before + 1
            )

        with pytest.raises(UnknownTopicError):
            client.produce("nope", 0, make_batch([b"x"]))
        still_serving()
        with pytest.raises(UnknownTopicError, match="no partition 5"):
            client.produce("typed", 5, ok)
        still_serving()
        with pytest.raises(InvalidRecordError, match="max.message.bytes"):
            client.produce("small", 0, make_batch([b"x" * 1000]))
        still_serving()
        wrong = make_batch([b"not a struct"])
        with pytest.raises(InvalidRecordError, match="typed topic accepts struct"):
            client.produce("typed", 0, wrong)
        still_serving()
        bad_columns = pa.record_batch([pa.array([b"v"]), pa.array([1])], names=["value", "colour"])
        with pytest.raises(InvalidRecordError, match="unknown record column"):
            client.produce("typed", 0, bad_columns)
        still_serving()
        with pytest.raises(InvalidRequestError, match="acks"):
            client.produce("typed", 0, ok, acks="most")
        still_serving()

    conn = flight.connect(f"grpc://{broker.location}")
    raw_cases = [
        lambda: list(conn.do_action(flight.Action("join_group", b"\xff\x00garbage"))),
        lambda: list(conn.do_action(flight.Action("no_such_action", b"{}"))),
        lambda: list(conn.do_action(flight.Action("create_topic", b'{"name": 5}'))),
        lambda: conn.do_get(flight.Ticket(b"{not json")).read_all(),
        lambda: conn.do_get(flight.Ticket(b'{"topic": "typed", "partition": "x"}')).read_all(),
    ]
    for case in raw_cases:
        with pytest.raises(flight.FlightError, match="INVALID_REQUEST"):
            case()
    # a DoPut whose command is garbage, and one that carries no partition
    for command in (b"\x00\x01", b'{"topic": "typed"}'):
        writer, reader = conn.do_put(flight.FlightDescriptor.for_command(command), ok.schema)
        with pytest.raises(flight.FlightError, match="INVALID_REQUEST"):
            writer.write_batch(ok)
            writer.done_writing()
            reader.read()
            writer.close()
    # garbage bytes straight onto the port
    for payload in (os.urandom(4096), b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", b"\x00" * 100):
        with socket.create_connection(("127.0.0.1", broker.port), timeout=5) as sock:
            sock.sendall(payload)
            with contextlib.suppress(OSError):
                sock.recv(1024)
    conn.close()
    with BrokerClient(cluster.bootstrap) as client:
        before = client.call(actions.LIST_OFFSETS, topic="typed", partition=0, spec="latest")
        client.produce("typed", 0, ok)
        assert (
            client.call(actions.LIST_OFFSETS, topic="typed", partition=0, spec="latest")
            == before + 1
        )
    assert broker.alive


def test_sigterm_flushes_and_releases_lease(file_root, cluster_on):
    cluster = cluster_on(file_root)
    broker = cluster.start(0, linger_ms=1000)
    with BrokerClient(cluster.bootstrap) as client:
        client.create_topic("t", 1)
        acked = []
        producer = threading.Thread(
            target=lambda: acked.append(client.produce("t", 0, make_batch([b"a", b"b"])))
        )
        producer.start()
        url = f"http://127.0.0.1:{broker.metrics_port}/metrics"
        wait_for(
            lambda: "sparklog_produce_waiting 1.0" in urllib.request.urlopen(url).read().decode(),
            timeout_s=30,
            what="the produce to reach the broker",
        )
        # the produce is waiting in the linger when SIGTERM arrives: it is flushed and acked
        assert broker.terminate() == 0
        producer.join(timeout=30)
    assert acked and acked[0].base_offset == 0
    root = open_root(file_root[0])
    assert root.topic("t").partition(0).read(0).column("value").to_pylist() == [b"a", b"b"]
    assert not root.store.exists("cluster/brokers/0.json")
    stopped = [line for line in broker.log_lines() if line.get("msg") == "broker stopped"]
    assert stopped and all(json.dumps(line) for line in stopped)


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        ([], {"SPARKLOG_LINGER_MS": "soon"}, "config key 'linger_ms'='soon'"),
        (["--listen", "127.0.0.1:99999"], {}, "'listen'"),
        (["--config", "/nonexistent/broker.toml"], {}, "does not exist"),
    ],
)
def test_bad_startup_config_exits_with_one_line(tmp_path, args, env, message):
    proc = subprocess.run(
        [sys.executable, "-m", "sparklog.broker_lite", "--root", str(tmp_path / "r"), *args],
        env={**os.environ, "PYTHONPATH": str(REPO), **env},
        capture_output=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert proc.returncode == 2
    lines = proc.stderr.decode().strip().splitlines()
    assert (len(lines) == 1 and message in lines[0] and "accepted" in lines[0]) or "exist" in lines[
        0
    ]


def test_listen_port_in_use_is_a_clear_error(file_root, cluster_on, tmp_path):
    cluster = cluster_on(file_root)
    broker = cluster.start(0)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "sparklog.broker_lite",
            "--root",
            file_root[0],
            "--listen",
            broker.location,
        ],
        env={**os.environ, "PYTHONPATH": str(REPO), "SPARKLOG_METRICS_LISTEN": ""},
        capture_output=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert proc.returncode == 2
    assert "cannot listen there" in proc.stderr.decode()


def test_sigusr1_dumps_every_threads_stack_and_the_broker_keeps_serving(broker) -> None:
    """docs/operations.md: ``kill -USR1`` on a stuck broker shows where each thread is."""
    import signal

    process = next(iter(broker.brokers.values()))
    assert process.proc is not None
    os.kill(process.proc.pid, signal.SIGUSR1)
    wait_for(lambda: "most recent call first" in process.log_text(), timeout_s=30,
             what="a stack dump in the broker's log")  # fmt: skip
    assert process.alive
    with BrokerClient(broker.bootstrap) as client:
        client.create_topic("after-dump", 1)
        assert "after-dump" in client.call(actions.LIST_TOPICS)
