"""Object-store writes against active topics: one broker, one record rate, 1 to 100 topics.

Run:  .venv/bin/python bench/topics_bench.py [--topics 1,10,100] [--records-per-s 2000]
                                             [--seconds 5] [--linger-ms 5]

An in-process broker on moto's S3 behind the tests' request-counting proxy
(``tests/support/counting_s3.py``) receives the same record rate (produce calls
of 20 records from 4 sender threads, paced) spread round-robin over N topics of
one partition.  For each N it reports PUTs per 1,000 records, objects and shard
commits per second, the broker's threads, p50/p99 acknowledgement latency, and
the ratio of PUTs per 1,000 records against one topic (measured in the same
run; issue 37's target for the finished journal: <= 1.3x at 100 topics).
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import threading
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sparklog.broker_lite.config import BrokerConfig
from sparklog.broker_lite.service import Broker
from sparklog.storage import make_batch
from tests.support.counting_s3 import CountingProxy
from tests.support.s3 import MotoS3

RECORDS_PER_CALL = 20
SENDERS = 4


def run(url: str, options: dict, proxy: CountingProxy, topics: int, args) -> dict:
    config = BrokerConfig(
        root=url,
        storage_options=options,
        linger_ms=args.linger_ms,
        cleaner_interval_ms=0,
        lease_interval_ms=600_000,
        lease_timeout_ms=3_600_000,
    )
    broker = Broker(config)
    broker.start("127.0.0.1:1")
    names = [f"n{topics}-t{i}" for i in range(topics)]
    batch = make_batch([b"v" * 100] * RECORDS_PER_CALL)
    for name in names:
        broker.create_topic(name, 1)
        broker.produce(name, [(0, batch)])  # warm up: leadership (epoch bump), metadata
    calls = int(args.records_per_s * args.seconds / RECORDS_PER_CALL)
    interval_s = SENDERS * RECORDS_PER_CALL / args.records_per_s
    latencies: list[float] = []
    lock = threading.Lock()

    def sender(k: int) -> None:
        start = time.perf_counter()
        for i in range(k, calls, SENDERS):
            due = start + (i // SENDERS) * interval_s
            pause = due - time.perf_counter()
            if pause > 0:
                time.sleep(pause)  # pacing the load, not synchronisation
            began = time.perf_counter()
            broker.produce(names[i % topics], [(0, batch)])
            with lock:
                latencies.append(time.perf_counter() - began)

    before = proxy.snapshot()
    objects_before = broker.metrics.root_objects._value.get()
    started = time.perf_counter()
    threads = [threading.Thread(target=sender, args=(k,)) for k in range(SENDERS)]
    for t in threads:
        t.start()
    peak_threads = threading.active_count()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - started
    after = proxy.snapshot()
    objects = broker.metrics.root_objects._value.get() - objects_before
    broker.close()
    after.subtract(before)
    counts: Counter[str] = after
    records = calls * RECORDS_PER_CALL
    latencies.sort()
    return {
        "puts_per_1000": 1000 * counts["PUT"] / records,
        "objects_s": objects / elapsed,
        "commits_s": (counts["PUT"] - objects) / elapsed,
        "threads": peak_threads - SENDERS - 1,
        "p50_ms": 1000 * statistics.median(latencies),
        "p99_ms": 1000 * latencies[int(0.99 * (len(latencies) - 1))],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--topics", default="1,10,100")
    parser.add_argument("--records-per-s", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--linger-ms", type=int, default=5)
    args = parser.parse_args()
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    moto = MotoS3.start()
    proxy = CountingProxy(moto.endpoint_url)
    options = proxy.storage_options()
    rows = []
    try:
        for n in [int(x) for x in args.topics.split(",")]:
            rows.append((n, run(moto.fresh_root(), options, proxy, n, args)))
            print(f"measured {n} topics", file=sys.stderr)
    finally:
        proxy.close()
        moto.stop()
    base = rows[0][1]["puts_per_1000"]
    print(
        f"\n## One broker, {args.records_per_s:,} records/s over N topics "
        f"(linger_ms={args.linger_ms}; moto S3 behind a counting proxy)"
    )
    print(
        "| active topics | PUT per 1,000 records | vs 1 topic | objects/s | shard commits/s "
        "| broker threads | ack p50 ms | ack p99 ms |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for n, r in rows:
        print(
            f"| {n} | {r['puts_per_1000']:.1f} | {r['puts_per_1000'] / base:.2f}x | "
            f"{r['objects_s']:.1f} | {r['commits_s']:.1f} | {r['threads']} | "
            f"{r['p50_ms']:.1f} | {r['p99_ms']:.1f} |"
        )


if __name__ == "__main__":
    main()
