"""Chaos scenarios on real broker processes; each returns its figures and asserts the guarantees.

Every scenario runs :class:`~tests.chaos.workload.Workload` (an idempotent
``acks=all`` producer) through the brokers while it injects its fault, then
checks the root: 0 acknowledged records lost, 0 stored twice, no offset gaps,
no record reported "failed" that is in the log; produce resumes within
``recover_s`` of each fault's end; every broker's resident memory stays under
``RSS_MAX_BYTES``.  The tests in this folder run short versions;
``bench/chaos.py`` runs long ones and prints the figures.
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

import pyarrow.flight as flight

from sparklog.client.transports.flight_client import BrokerClient
from sparklog.clock import now_ms
from sparklog.protocol import actions
from sparklog.storage import make_batch, open_root
from sparklog.storage.cluster_metadata import topic_record
from tests.chaos.workload import Verdict, Workload, check, rss_bytes
from tests.support.brokers import BrokerProcess, Cluster
from tests.support.tcp_proxy import FaultProxy
from tests.support.waiting import wait_for

#: the most resident memory a broker may use in any scenario
RSS_MAX_BYTES = 1536 << 20
TOPIC = "chaos"
PARTITIONS = 3
#: acknowledged records that show produce is working again (two full rounds)
PROGRESS_RECORDS = 40

#: S3 roots: leases long enough for a loaded moto, deadlines well inside them
S3_BROKER_CONFIG = {"lease_interval_ms": 300, "lease_timeout_ms": 3_000}
FILE_BROKER_CONFIG: dict[str, Any] = {}


@dataclass
class Figures:
    scenario: str
    root: str
    faults: int = 0
    recover_s: list[float] = field(default_factory=list)
    rss_max_bytes: int = 0
    verdict: Verdict | None = None
    notes: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        rec = sorted(self.recover_s)
        return {
            "scenario": self.scenario,
            "root": self.root,
            "faults": self.faults,
            "recover_max_s": round(rec[-1], 2) if rec else None,
            "recover_median_s": round(rec[len(rec) // 2], 2) if rec else None,
            "rss_max_mib": round(self.rss_max_bytes / 2**20),
            **(asdict(self.verdict) if self.verdict else {}),
            **self.notes,
        }


@dataclass
class Setup:
    """Where the brokers keep their data: a local directory or S3 (moto) behind a proxy."""

    workdir: pathlib.Path
    root: str
    broker_options: dict[str, Any]  # what brokers use (through the proxy on S3)
    check_options: dict[str, Any]  # what the checker uses (straight to the store)
    proxy: FaultProxy | None = None
    broker_config: dict[str, Any] = field(default_factory=lambda: dict(FILE_BROKER_CONFIG))

    @property
    def kind(self) -> str:
        return "s3" if self.proxy is not None else "file"


def file_setup(workdir: pathlib.Path) -> Setup:
    return Setup(workdir, f"file://{workdir}/root", {}, {})


def s3_setup(workdir: pathlib.Path, moto: Any, request_timeout_ms: int = 2_000) -> Setup:
    from urllib.parse import urlparse

    url = urlparse(moto.endpoint_url)
    proxy = FaultProxy.start((url.hostname or "127.0.0.1", int(url.port or 80)))
    options = {
        "key": "testing",
        "secret": "testing",
        "request_timeout_ms": request_timeout_ms,
        "client_kwargs": {"endpoint_url": proxy.endpoint_url, "region_name": "us-east-1"},
        "config_kwargs": {"retries": {"max_attempts": 2, "mode": "standard"}},
    }
    return Setup(
        workdir, moto.fresh_root(), options, moto.storage_options, proxy, dict(S3_BROKER_CONFIG)
    )


@contextmanager
def brokers(setup: Setup, count: int, **config: Any) -> Iterator[Cluster]:
    cluster = Cluster(setup.workdir, setup.root, setup.broker_options)
    try:
        for broker_id in range(1, count + 1):
            cluster.start(broker_id, **{**setup.broker_config, **config})
        yield cluster
    finally:
        cluster.stop_all()
        for b in cluster.brokers.values():
            b.kill()


def _sample_rss(cluster: Cluster, figures: Figures) -> None:
    for b in cluster.brokers.values():
        if b.alive and b.proc is not None:
            try:
                figures.rss_max_bytes = max(figures.rss_max_bytes, rss_bytes(b.proc.pid))
            except OSError:
                continue


def _leader_of(cluster: Cluster, partition: int) -> int:
    with BrokerClient(cluster.bootstrap, retry_timeout_ms=60_000) as client:
        for _ in range(100):
            meta = client.metadata([TOPIC])[TOPIC].partitions[partition]
            if meta.leader_id in cluster.brokers and cluster.brokers[meta.leader_id].alive:
                return int(meta.leader_id)
            client._meta.clear()
    raise AssertionError(f"no live leader for {TOPIC}-{partition}")


def _progress(work: Workload, since_s: float, recover_s: float, what: str) -> float:
    """Wait until PROGRESS_RECORDS more records are acknowledged; seconds since ``since_s``."""
    target = work.acked_count + PROGRESS_RECORDS
    wait_for(lambda: work.acked_count >= target or work.error, recover_s, what)
    if work.error is not None:
        raise AssertionError(f"the workload crashed: {work.error!r}")
    return time.monotonic() - since_s


def _start_workload(cluster: Cluster, figures: Figures, recover_s: float) -> Workload:
    with BrokerClient(cluster.bootstrap, retry_timeout_ms=60_000) as client:
        if TOPIC not in client.call(actions.LIST_TOPICS):
            client.create_topic(TOPIC, PARTITIONS)
    work = Workload(cluster.bootstrap, TOPIC, PARTITIONS).start()
    _progress(work, time.monotonic(), recover_s, "the workload's first records")
    return work


def _finish(work: Workload, setup: Setup, figures: Figures) -> Figures:
    work.stop()
    figures.verdict = check(work, setup.root, setup.check_options)
    figures.verdict.assert_safe()
    assert figures.rss_max_bytes < RSS_MAX_BYTES, figures.summary()
    return figures


# -- scenarios ------------------------------------------------------------------------------


def leader_kills(setup: Setup, kills: int, recover_s: float = 30) -> Figures:
    """SIGKILL the leader of a partition ``kills`` times among three brokers; restart it."""
    figures = Figures("leader SIGKILL", setup.kind)
    with brokers(setup, 3) as cluster:
        work = _start_workload(cluster, figures, recover_s)
        for k in range(kills):
            victim = _leader_of(cluster, k % PARTITIONS)
            killed_at = time.monotonic()
            cluster.brokers[victim].kill()
            figures.recover_s.append(
                _progress(work, killed_at, recover_s, f"produce after kill {k + 1}")
            )
            figures.faults += 1
            _sample_rss(cluster, figures)
            cluster.restart(victim)
        return _finish(work, setup, figures)


def leader_pauses(setup: Setup, pauses: int, recover_s: float = 30) -> Figures:
    """SIGSTOP a leader until the others have dropped it (its lease lapsed), then SIGCONT it.

    While it is paused, requests already sent to it wait (as on a paused Kafka
    broker, up to the client's request timeout); once it wakes with a lapsed
    lease it must not write as leader, and produce continues within ``recover_s``.
    """
    figures = Figures("leader SIGSTOP past the lease", setup.kind)
    with brokers(setup, 3) as cluster:
        work = _start_workload(cluster, figures, recover_s)
        for k in range(pauses):
            victim = cluster.brokers[_leader_of(cluster, k % PARTITIONS)]
            others = [b for b in cluster.brokers.values() if b is not victim]
            assert victim.proc is not None
            stopped_at = time.monotonic()
            victim.proc.send_signal(signal.SIGSTOP)
            try:
                wait_for(
                    lambda v=victim.broker_id, o=others: all(  # type: ignore[misc]
                        v not in _live_seen_by(b) for b in o
                    ),
                    recover_s,
                    "the others drop the paused broker",
                )
                figures.notes.setdefault("dropped_after_s", []).append(
                    round(time.monotonic() - stopped_at, 2)
                )
            finally:
                victim.proc.send_signal(signal.SIGCONT)
            woke_at = time.monotonic()
            figures.recover_s.append(
                _progress(work, woke_at, recover_s, f"produce after pause {k + 1}")
            )
            figures.faults += 1
            _sample_rss(cluster, figures)
        return _finish(work, setup, figures)


def _live_seen_by(broker: BrokerProcess) -> set[int]:
    with BrokerClient(broker.location, discover=False, retry_timeout_ms=5_000) as client:
        return {x["broker_id"] for x in client.call(actions.DESCRIBE_CLUSTER)["brokers"]}


def clock_skew(
    setup: Setup, skew_ms: int = -6_000, rounds: int = 5, recover_s: float = 30
) -> Figures:
    """One broker's wall clock runs ``skew_ms`` off: membership and leadership stay stable."""
    figures = Figures(f"clock skew {skew_ms} ms", setup.kind)
    with brokers(setup, 2) as cluster:
        cluster.start(3, clock_skew_ms=skew_ms, **setup.broker_config)
        wait_for(lambda: _views_agree(cluster), recover_s, "every broker sees three live brokers")
        lease = json.loads(open_root(setup.root, setup.check_options).store.get(_LEASE_3))
        assert abs(lease["renewed_ms"] - (now_ms() + skew_ms)) < abs(skew_ms) / 2, lease
        work = _start_workload(cluster, figures, recover_s)
        for _ in range(rounds):
            _progress(work, time.monotonic(), recover_s, "produce under clock skew")
            assert _views_agree(cluster), "a broker lost sight of another under clock skew"
            _sample_rss(cluster, figures)
        figures.faults = 1
        figures.notes["leadership_changes"] = _leadership_changes(cluster)
        return _finish(work, setup, figures)


_LEASE_3 = "cluster/brokers/3.json"  # the skewed broker's lease, stamped by its clock


def _views_agree(cluster: Cluster) -> bool:
    return all(_live_seen_by(b) == set(cluster.brokers) for b in cluster.brokers.values())


def _leadership_changes(cluster: Cluster) -> int:
    import urllib.request

    total = 0
    for b in cluster.brokers.values():
        if not b.metrics_port:
            continue
        text = urllib.request.urlopen(f"http://127.0.0.1:{b.metrics_port}/metrics", timeout=10)
        for line in text.read().decode().splitlines():
            if line.startswith("sparklog_leadership_changes_total"):
                total += int(float(line.split()[-1]))
    return total


def storage_faults(
    setup: Setup, mode: str, outages: int, fault_s: float = 4.0, recover_s: float = 45
) -> Figures:
    """The S3 endpoint black-holes (or resets, or drops) connections for ``fault_s``, then heals."""
    assert setup.proxy is not None, "storage faults need the S3 setup"
    figures = Figures(f"storage {mode} {fault_s:g} s", setup.kind)
    with brokers(setup, 2) as cluster:
        work = _start_workload(cluster, figures, recover_s)
        for k in range(outages):
            setup.proxy.set(mode)
            threading.Event().wait(fault_s)  # the fault's duration (not a synchronisation)
            healed_at = time.monotonic()
            setup.proxy.heal()
            figures.recover_s.append(
                _progress(work, healed_at, recover_s, f"produce after storage {mode} {k + 1}")
            )
            figures.faults += 1
            _sample_rss(cluster, figures)
        return _finish(work, setup, figures)


def hostile_requests(setup: Setup, idle_connections: int = 300, recover_s: float = 30) -> Figures:
    """Idle half-open connections, garbage bytes, a DoPut of many tiny batches, huge bodies."""
    figures = Figures("hostile requests", setup.kind)
    with brokers(setup, 1) as cluster:
        broker = cluster.brokers[1]
        work = _start_workload(cluster, figures, recover_s)
        idle: list[socket.socket] = []
        try:
            for _ in range(idle_connections):  # connect and never speak (nor close)
                idle.append(socket.create_connection(("127.0.0.1", broker.port), timeout=5))
            for _ in range(50):  # bytes that are not HTTP/2
                with socket.create_connection(("127.0.0.1", broker.port), timeout=5) as s:
                    s.sendall(os.urandom(4096))
            started = time.monotonic()
            refused = _hostile_flight_calls(broker)
            figures.notes["hostile_calls_refused"] = refused
            figures.recover_s.append(
                _progress(work, started, recover_s, "produce while hostile clients are connected")
            )
            figures.faults = idle_connections + 50 + refused
            _sample_rss(cluster, figures)
        finally:
            for s in idle:
                s.close()
        log_bytes = broker.log_path.stat().st_size if broker.log_path else 0
        figures.notes["broker_log_kib"] = log_bytes // 1024
        assert log_bytes < 4 << 20, f"the broker wrote {log_bytes} bytes of logs"
        return _finish(work, setup, figures)


def _hostile_flight_calls(broker: BrokerProcess) -> int:
    conn = flight.connect(f"grpc://{broker.location}")
    refused = 0
    try:
        tiny = make_batch([b"x"])
        command = json.dumps({"topic": TOPIC, "partition": 0}).encode()
        writer, reader = conn.do_put(flight.FlightDescriptor.for_command(command), tiny.schema)
        try:
            for _ in range(20_000):  # over max_request_batches: refused while streaming
                writer.write_batch(tiny)
            writer.done_writing()
            reader.read()
        except flight.FlightError:
            refused += 1
        finally:
            try:
                writer.close()
            except flight.FlightError:
                refused += 0
        for _ in range(500):  # refused requests: logged at a bounded rate
            try:
                list(conn.do_action(flight.Action("no_such_action", b"{}")))
            except flight.FlightError:
                refused += 1
        body = json.dumps({"name": 7, "partitions": "p" * 5_000_000}).encode()
        try:
            list(conn.do_action(flight.Action("create_topic", body)))
        except flight.FlightError as exc:
            refused += 1
            assert len(str(exc)) < 10_000, "the error echoed the whole request"
    finally:
        conn.close()
    return refused


def damaged_topic(setup: Setup, recover_s: float = 30) -> Figures:
    """A topic's metadata document is damaged: the brokers start and serve the other topics."""
    figures = Figures("damaged topic metadata", setup.kind)
    root = open_root(setup.root, setup.check_options)
    broken = {"name": "damaged", "id": "x", "partitions": "one", "config": {}, "created_ms": 0}
    root.metadata.append(lambda image: [topic_record(broken)])
    with brokers(setup, 2) as cluster:
        work = _start_workload(cluster, figures, recover_s)
        _progress(work, time.monotonic(), recover_s, "produce beside a damaged topic")
        figures.faults = 1
        _sample_rss(cluster, figures)
        return _finish(work, setup, figures)
