"""Broker benchmark: produce and fetch through one real broker process on a local root.

Run:  .venv/bin/python bench/broker_bench.py [--records N] [--batch N]
                                             [--rate R] [--seconds S]

Prints, from one run (the broker is a separate process, as in production):
* produce throughput with 100-byte values (records/s, MB/s) of one producer
  thread sending ``--batch``-record batches with acks=all, as a ratio to the
  storage append path (``Topic.append`` in-process) measured in the same run;
  Kafka's classic single-producer figure is 821,557 records/s (78 MB/s);
* fetch throughput of one consumer reading everything back, as a ratio to
  ``PartitionLog.read`` in-process;
* produce-to-consume latency p50/p99 at a fixed rate (``--rate`` records/s in
  10-record requests from 4 producer threads; one long-polling consumer);
* objects and write requests to the root per second at that rate, with 1 and
  with 64 partitions (files counted in the root before and after).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.flight as flight

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from sparklog.client.transports.flight_client import BrokerClient  # noqa: E402
from sparklog.protocol import actions  # noqa: E402
from sparklog.storage import make_batch, open_root  # noqa: E402

VALUE_BYTES = 100


def records(n: int, stamp_ms: int = 1_700_000_000_000) -> pa.RecordBatch:
    distinct = [os.urandom(VALUE_BYTES) for _ in range(min(n, 1000))]
    values = (distinct * (n // len(distinct) + 1))[:n]
    return make_batch(values, timestamps_ms=[stamp_ms] * n)


def mb(n: int) -> float:
    return n * VALUE_BYTES / 1e6


class BrokerProc:
    """A broker subprocess configured through SPARKLOG_* variables."""

    def __init__(self, root: str, workdir: Path, **config: object) -> None:
        self.log_path = workdir / f"broker-{time.time_ns()}.log"
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        settings = {"listen": "127.0.0.1:0", "metrics_listen": "", "log_level": "WARNING"}
        settings.update({k: str(v) for k, v in config.items()})
        env.update({f"SPARKLOG_{k.upper()}": str(v) for k, v in settings.items()})
        env["SPARKLOG_LOG_LEVEL"] = "INFO"
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "sparklog.broker_lite", "--root", root],
                stderr=log,
                stdout=subprocess.DEVNULL,
                env=env,
            )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            for line in self.log_path.read_text().splitlines():
                try:
                    doc = json.loads(line)
                except ValueError:
                    continue
                if doc.get("msg") == "broker started":
                    self.location = str(doc["location"])
                    return
            if self.proc.poll() is not None:
                raise RuntimeError(self.log_path.read_text())
            time.sleep(0.05)
        raise RuntimeError("broker did not start")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=60)


class PlainFlight(flight.FlightServerBase):
    """The transport alone: DoPut discards, DoGet replays the batches it was given."""

    def __init__(self, batches: list[pa.RecordBatch]) -> None:
        super().__init__("grpc://127.0.0.1:0")
        self.batches = batches

    def do_put(self, context, descriptor, reader, writer):  # type: ignore[no-untyped-def]
        for _ in reader:
            pass
        writer.write(pa.py_buffer(b"{}"))

    def do_get(self, context, ticket):  # type: ignore[no-untyped-def]
        return flight.GeneratorStream(self.batches[0].schema, iter(self.batches))


def flight_ceiling(batch: pa.RecordBatch, n_batches: int) -> tuple[float, float]:
    """Records/s of plain Flight DoPut (one batch per call) and DoGet on this machine."""
    server = PlainFlight([batch] * n_batches)
    conn = flight.connect(f"grpc://127.0.0.1:{server.port}")
    try:
        started = time.perf_counter()
        for _ in range(n_batches):
            writer, reader = conn.do_put(flight.FlightDescriptor.for_command(b"x"), batch.schema)
            writer.write_batch(batch)
            writer.done_writing()
            reader.read()
            writer.close()
        put_rate = n_batches * batch.num_rows / (time.perf_counter() - started)
        started = time.perf_counter()
        got = conn.do_get(flight.Ticket(b"x")).read_all().num_rows
        get_rate = got / (time.perf_counter() - started)
    finally:
        conn.close()
        server.shutdown()
    return put_rate, get_rate


def root_files(root_dir: Path) -> dict[str, int]:
    counts = {"objects": 0, "commits": 0, "snapshots": 0}
    for path in root_dir.rglob("*"):
        name = path.name
        if name.endswith(".arrow"):
            counts["objects"] += 1
        elif name.endswith(".snapshot"):
            counts["snapshots"] += 1
        elif name.endswith(".json") and path.parent.name == "log" and name[0].isdigit():
            counts["commits"] += 1
    return counts


def bench_produce_fetch(workdir: Path, total: int, batch_size: int) -> None:
    batch = records(batch_size)
    n_batches = total // batch_size
    # baseline: the storage append path, in-process
    base_root = open_root(str(workdir / "baseline"))
    base_root.create_topic("b", 1)
    topic = base_root.topic("b")
    topic.append(0, batch)  # warm up
    started = time.perf_counter()
    for _ in range(n_batches):
        topic.append(0, batch)
    storage_s = time.perf_counter() - started
    storage_rate = n_batches * batch_size / storage_s
    started = time.perf_counter()
    log = topic.partition(0)
    log.refresh()
    n_read = log.read(batch_size).num_rows
    storage_read_rate = n_read / (time.perf_counter() - started)

    put_ceiling, get_ceiling = flight_ceiling(batch, n_batches)
    broker = BrokerProc(str(workdir / "root"), workdir, linger_ms=5)
    try:
        with BrokerClient(broker.location) as client:
            client.create_topic("p", 1)
            client.produce("p", 0, batch)  # warm up (connection, leadership epoch)
            started = time.perf_counter()
            for _ in range(n_batches):
                client.produce("p", 0, batch)
            broker_s = time.perf_counter() - started
            rate = n_batches * batch_size / broker_s
            print(
                f"records: {n_batches * batch_size:,} in batches of {batch_size:,}, 100-byte values"
            )
            print(
                f"produce broker {rate:12,.0f} rec/s {mb(int(rate)):8.1f} MB/s | storage append "
                f"{storage_rate:12,.0f} rec/s {mb(int(storage_rate)):8.1f} MB/s | ratio "
                f"{rate / storage_rate:.2f} | vs Kafka 821,557 rec/s: {rate / 821_557:.2f}x"
            )
            print(
                f"        plain Flight DoPut (transport alone, in-process) {put_ceiling:12,.0f} "
                f"rec/s | broker/Flight ratio {rate / put_ceiling:.2f}"
            )
            offset, got = batch_size, 0
            started = time.perf_counter()
            while True:
                res = client.fetch("p", 0, offset, max_bytes=16 << 20, max_wait_ms=0)
                if not res.batches:
                    break
                got += res.record_count
                offset = res.batches[-1].column("offset")[-1].as_py() + 1
            fetch_rate = got / (time.perf_counter() - started)
            print(
                f"fetch   broker {fetch_rate:12,.0f} rec/s {mb(int(fetch_rate)):8.1f} MB/s | "
                f"storage read   {storage_read_rate:12,.0f} rec/s "
                f"{mb(int(storage_read_rate)):8.1f} MB/s | ratio "
                f"{fetch_rate / storage_read_rate:.2f}"
            )
            print(
                f"        plain Flight DoGet (transport alone, in-process) {get_ceiling:12,.0f} "
                f"rec/s | broker/Flight ratio {fetch_rate / get_ceiling:.2f}"
            )
    finally:
        broker.stop()


def bench_fixed_rate(workdir: Path, partitions: int, rate: int, seconds: float) -> dict[str, float]:
    root_dir = workdir / f"rate-{partitions}"
    broker = BrokerProc(str(root_dir), workdir, linger_ms=5)
    latencies: list[float] = []
    try:
        with BrokerClient(broker.location) as client:
            client.create_topic("r", partitions)
            for p in range(partitions):  # leadership epochs before measuring
                client.produce("r", p, records(1))
            before = root_files(root_dir)
            stop = threading.Event()
            threads_n, per_request = 4, 10
            interval = threads_n * per_request / rate
            sent = [0]

            def produce(worker: int) -> None:
                nxt = time.perf_counter()
                i = worker
                while not stop.is_set():
                    now_ms = int(time.time() * 1000)
                    client.produce("r", i % partitions, records(per_request, now_ms))
                    sent[0] += per_request
                    i += threads_n
                    nxt += interval
                    delay = nxt - time.perf_counter()
                    if delay > 0:
                        time.sleep(delay)

            def consume() -> None:
                offset = client.call(actions.LIST_OFFSETS, topic="r", partition=0, spec="latest")
                while not stop.is_set():
                    res = client.fetch("r", 0, offset, max_wait_ms=500)
                    now_ms = time.time() * 1000
                    for b in res.batches:
                        ts = b.column("timestamp").cast(pa.int64()).to_pylist()
                        latencies.extend(now_ms - t for t in ts)
                        offset = b.column("offset")[-1].as_py() + 1

            workers = [threading.Thread(target=produce, args=(w,)) for w in range(threads_n)]
            consumer = threading.Thread(target=consume)
            consumer.start()
            started = time.perf_counter()
            for w in workers:
                w.start()
            time.sleep(seconds)
            stop.set()
            for w in workers:
                w.join()
            elapsed = time.perf_counter() - started
            consumer.join()
            after = root_files(root_dir)
    finally:
        broker.stop()
    out = {k: (after[k] - before[k]) / elapsed for k in after}
    out["records_per_s"] = sent[0] / elapsed
    if latencies:
        q = statistics.quantiles(latencies, n=100)
        out["p50_ms"], out["p99_ms"] = q[49], q[98]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--batch", type=int, default=50_000)
    parser.add_argument("--rate", type=int, default=2_000, help="records/s for latency")
    parser.add_argument("--seconds", type=float, default=10)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="broker-bench-"))
    try:
        bench_produce_fetch(workdir, args.records, args.batch)
        for partitions in (1, 64):
            r = bench_fixed_rate(workdir, partitions, args.rate, args.seconds)
            lat = (
                f" | latency p50 {r['p50_ms']:.1f} ms p99 {r['p99_ms']:.1f} ms"
                if "p50_ms" in r
                else ""
            )
            writes = r["objects"] + r["commits"] + r["snapshots"]
            print(
                f"fixed rate {r['records_per_s']:,.0f} rec/s, {partitions:2d} partition(s): "
                f"{r['objects']:.1f} objects/s, {r['commits']:.1f} commits/s, "
                f"{writes:.1f} create requests/s{lat}"
            )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
