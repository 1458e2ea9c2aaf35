"""Client throughput: per-record ``send`` vs columnar ``send_batch``, ``poll`` vs ``poll_batches``.

Runs in embedded mode (a local storage root) and broker mode (one real broker
process on loopback), with 100-byte values, and prints records/s with two
ratios: against a baseline measured in the same run (the storage engine's own
append / read of the same records, no client) and against Kafka's classic
figures (821,557 records/s produce, 940,521 records/s consume; Jay Kreps,
"Benchmarking Apache Kafka", 2014, three 2014 machines, one producer thread).

    PYTHONPATH=. python bench/client_bench.py --records 200000 --partitions 4
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from sparklog import Admin, Consumer, Producer, TopicPartition  # noqa: E402
from sparklog.client.transports.flight_client import BrokerClient  # noqa: E402
from sparklog.protocol import actions  # noqa: E402
from sparklog.storage import make_batch, open_root  # noqa: E402

KAFKA_PRODUCE_RPS = 821_557
KAFKA_CONSUME_RPS = 940_521
VALUE = b"v" * 100


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _timed(run: Callable[[], int]) -> float:
    started = time.perf_counter()
    count = run()
    return count / (time.perf_counter() - started)


def bench_mode(address: str, records: int, partitions: int, chunk: int) -> dict[str, float]:
    """records/s of each client path at ``address``."""
    with Admin(address) as admin:
        for name in ("send", "batch", "keyed"):
            admin.create_topic(f"bench-{name}", partitions)
    out: dict[str, float] = {}

    def send() -> int:
        with Producer(address, linger_ms=5) as producer:
            for _ in range(records):
                producer.send("bench-send", VALUE)
            producer.flush()
        return records

    table = pa.table({"value": pa.array([VALUE] * chunk, pa.binary())})
    keys = pa.array([f"key-{i:012d}".encode() for i in range(chunk)], pa.binary())
    keyed = table.append_column("key", keys)

    def send_batch(topic: str, data: pa.Table) -> Callable[[], int]:
        def run() -> int:
            with Producer(address, linger_ms=5) as producer:
                futures = [producer.send_batch(topic, data) for _ in range(records // chunk)]
                producer.flush()
                return sum(f.get().record_count for f in futures)

        return run

    out["send"] = _timed(send)
    out["send_batch"] = _timed(send_batch("bench-batch", table))
    out["send_batch keyed"] = _timed(send_batch("bench-keyed", keyed))

    def consume(batches: bool) -> Callable[[], int]:
        def run() -> int:
            consumer = Consumer(address, auto_offset_reset="earliest", fetch_max_bytes=16 << 20)
            consumer.assign([TopicPartition("bench-batch", p) for p in range(partitions)])
            got = 0
            while got < records:
                if batches:
                    got += sum(b.num_rows for b in consumer.poll_batches(1000, 1_000_000))
                else:
                    got += len(consumer.poll_records(1000, 10_000))
            consumer.close()
            return got

        return run

    out["poll"] = _timed(consume(False))
    out["poll_batches"] = _timed(consume(True))
    return out


def bench_storage(root_url: str, records: int, partitions: int, chunk: int) -> dict[str, float]:
    """The baseline: the storage engine's own append and read of the same records."""
    root = open_root(root_url)
    root.create_topic("baseline", partitions)
    topic = root.topic("baseline")
    batch = make_batch([VALUE] * chunk)

    def append() -> int:
        for i in range(records // chunk):
            topic.append(i % partitions, batch)
        return (records // chunk) * chunk

    def read() -> int:
        return sum(
            b.num_rows for p in range(partitions) for b in topic.partition(p).iter_batches(0)
        )

    return {"append": _timed(append), "read": _timed(read)}


def start_broker(root: str, log_path: Path) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "SPARKLOG_METRICS_LISTEN": f"127.0.0.1:{_free_port()}",
        "SPARKLOG_LOG_LEVEL": "WARNING",
    }
    log = open(log_path, "wb")  # noqa: SIM115
    proc = subprocess.Popen(
        [sys.executable, "-m", "sparklog.cli", "broker", "start", "--root", root,
         "--listen", f"127.0.0.1:{port}", "--broker-id", "1"],
        env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with BrokerClient(f"127.0.0.1:{port}", retry_timeout_ms=500) as client:
                client.call(actions.LIST_TOPICS)
            return proc, f"sparklog://127.0.0.1:{port}"
        except Exception:
            if proc.poll() is not None:
                raise SystemExit(f"broker exited; see {log_path}") from None
            time.sleep(0.2)
    raise SystemExit("broker did not start within 60 s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--chunk", type=int, default=10_000, help="rows per send_batch call")
    parser.add_argument("--modes", default="embedded,broker")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="sparklog-bench-"))
    baseline = bench_storage(f"file://{work}/baseline", args.records, args.partitions, args.chunk)
    results: dict[str, dict[str, float]] = {}
    for mode in args.modes.split(","):
        if mode == "embedded":
            results[mode] = bench_mode(
                f"file://{work}/embedded", args.records, args.partitions, args.chunk
            )
        elif mode == "broker":
            proc, address = start_broker(f"file://{work}/broker", work / "broker.log")
            try:
                results[mode] = bench_mode(address, args.records, args.partitions, args.chunk)
            finally:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=60)
        else:
            raise SystemExit(f"unknown mode {mode!r}; accepted: embedded, broker")
    if args.json:
        print(json.dumps({"baseline": baseline, "results": results, "args": vars(args)}))
        return
    print(f"records={args.records} partitions={args.partitions} value=100 B chunk={args.chunk}")
    print(f"baseline (storage engine, no client): append {baseline['append']:,.0f} rec/s, "
          f"read {baseline['read']:,.0f} rec/s")  # fmt: skip
    print(f"{'mode':9} {'path':17} {'records/s':>12} {'vs baseline':>12} {'vs Kafka 2014':>14}")
    for mode, figures in results.items():
        for path, rps in figures.items():
            produce = path.startswith("send")
            base = baseline["append" if produce else "read"]
            kafka = KAFKA_PRODUCE_RPS if produce else KAFKA_CONSUME_RPS
            print(f"{mode:9} {path:17} {rps:12,.0f} {rps / base:11.2f}x {rps / kafka:13.2f}x")


if __name__ == "__main__":
    main()
