"""Object-store writes against active topics: one broker, one record rate, 1 to 100 topics.

Run:  .venv/bin/python bench/topics_bench.py [--topics 1,10,100] [--records-per-s 2000]
                                             [--seconds 5] [--linger-ms 5]
                                             [--modes format2,journal]
                                             [--store-latency-ms 20-30]

An in-process broker on moto's S3 behind the tests' request-counting proxy
(``tests/support/counting_s3.py``) receives the same record rate (produce calls
of 20 records from 4 sender threads, paced) spread round-robin over N topics of
one partition.  For each N it reports PUTs per 1,000 records, objects and
commits per second (shard commits; journal commits with ``journal_records``),
the broker's threads, p50/p99 acknowledgement latency, and the ratio of PUTs per
1,000 records against one topic (measured in the same run; issue 37's target:
<= 1.3x at 100 topics).  In the ``journal`` mode the shards' steps are folded
once at the end of the window and those fold writes are counted as the
``fold_interval_ms`` (default 60 s) would spread them: each active shard is
folded once per interval, so the window is charged ``folds x seconds /
fold interval``.
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


def run(url: str, options: dict, proxy: CountingProxy, topics: int, args, mode: str) -> dict:
    config = BrokerConfig(
        root=url,
        storage_options=options,
        linger_ms=args.linger_ms,
        cleaner_interval_ms=0,
        lease_interval_ms=600_000,
        lease_timeout_ms=3_600_000,
        journal_records=mode == "journal",
        journal_offset_commits=False,
        fold_interval_ms=3_600_000,  # folded below, charged at --fold-interval-ms
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
    folds = broker.produce_path.fold_shards(0)
    broker.close()
    after.subtract(before)
    counts: Counter[str] = after
    records = calls * RECORDS_PER_CALL
    latencies.sort()
    fold_puts = folds * elapsed / (args.fold_interval_ms / 1000)
    return {
        "puts_per_1000": 1000 * (counts["PUT"] + fold_puts) / records,
        "fold_puts_s": fold_puts / elapsed,
        "objects_s": objects / elapsed,
        "commits_s": (counts["PUT"] - objects) / elapsed,
        "threads": peak_threads - SENDERS - 1,
        "p50_ms": 1000 * statistics.median(latencies),
        "p99_ms": 1000 * latencies[int(0.99 * (len(latencies) - 1))],
        "records_s": records / elapsed,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--topics", default="1,10,100")
    parser.add_argument("--records-per-s", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--linger-ms", type=int, default=5)
    parser.add_argument("--fold-interval-ms", type=int, default=60_000)
    parser.add_argument("--modes", default="format2,journal")
    parser.add_argument(
        "--store-latency-ms",
        default="",
        help="LOW-HIGH: hold every store request that long first, as S3 does (e.g. 20-30)",
    )
    args = parser.parse_args()
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    moto = MotoS3.start()
    latency = None
    if args.store_latency_ms:
        low, _, high = args.store_latency_ms.partition("-")
        latency = (float(low), float(high or low))
    proxy = CountingProxy(moto.endpoint_url, latency)
    options = proxy.storage_options()
    rows: dict[str, list[tuple[int, dict]]] = {}
    try:
        for mode in args.modes.split(","):
            for n in [int(x) for x in args.topics.split(",")]:
                result = run(moto.fresh_root(), options, proxy, n, args, mode)
                rows.setdefault(mode, []).append((n, result))
                print(f"measured {n} topics ({mode})", file=sys.stderr)
    finally:
        proxy.close()
        moto.stop()
    for mode, measured in rows.items():
        base = measured[0][1]["puts_per_1000"]
        print(
            f"\n## One broker, {args.records_per_s:,} records/s over N topics, {mode} "
            f"(linger_ms={args.linger_ms}; moto S3 behind a counting proxy"
            + (f", {args.store_latency_ms} ms per request" if latency else "")
            + ")"
        )
        print(
            "| active topics | PUT per 1,000 records | vs 1 topic | objects/s | commits/s "
            "| folds/s (charged) | broker threads | ack p50 ms | ack p99 ms | records/s reached |"
        )
        print("|---|---|---|---|---|---|---|---|---|---|")
        for n, r in measured:
            print(
                f"| {n} | {r['puts_per_1000']:.1f} | {r['puts_per_1000'] / base:.2f}x | "
                f"{r['objects_s']:.1f} | {r['commits_s']:.1f} | {r['fold_puts_s']:.2f} | "
                f"{r['threads']} | {r['p50_ms']:.1f} | {r['p99_ms']:.1f} | {r['records_s']:,.0f} |"
            )


if __name__ == "__main__":
    main()
