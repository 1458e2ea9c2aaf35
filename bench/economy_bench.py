"""Object-store economy of storage format 2: requests per flush, idle reads, offset commits, bill.

Run:  .venv/bin/python bench/economy_bench.py [--partitions 1,16,64,256] [--flushes 10]
                                               [--idle-s 3] [--commits 10000]

Everything runs against moto's S3 server behind the tests' request-counting
HTTP proxy (``tests/support/counting_s3.py``; every request the storage layer makes passes through
it and is counted by kind), except the offset-commit latency, which is timed
on a local root (as the issue's 0.62 ms -> 13.9 ms figure was). Reports, for
each partition count:

* PUT and GET requests per producer flush, through an in-process broker (one
  produce request touching every partition) and through the embedded
  ``Topic.produce``; the ratio of writes per flush against 1 partition (target
  <= 1.5 at 256);
* read requests per second of an idle embedded ``Consumer`` assigned every
  partition (target: a few per shard);
* the latency and request count of the 10th and the 10,000th offset commit of
  one group (target: within 1.5x);
* the monthly request bill at S3 list prices (us-east-1, standard: $0.005 per
  1,000 PUT/POST/LIST, $0.0004 per 1,000 GET/HEAD) for the stated workload:
  one producer flushing every partition 4 times a second, one idle consumer,
  one offset commit per second.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import boto3
from moto.server import ThreadedMotoServer

from sparklog.broker_lite.config import BrokerConfig
from sparklog.broker_lite.service import Broker
from sparklog.client.consumer import Consumer
from sparklog.storage import make_batch, open_root
from tests.support.counting_s3 import CountingProxy

PUT_PRICE_PER_1000 = 0.005  # PUT, COPY, POST, LIST
GET_PRICE_PER_1000 = 0.0004  # GET, HEAD and the rest
SECONDS_PER_MONTH = 30 * 24 * 3600
FLUSHES_PER_S = 4
COMMITS_PER_S = 1


def writes(c: Counter[str]) -> int:
    return c["PUT"] + c["POST"] + c["LIST"] + c["DELETE"]


def reads(c: Counter[str]) -> int:
    return c["GET"] + c["HEAD"]


def delta(proxy: CountingProxy, call: Callable[[], object]) -> Counter[str]:
    before = proxy.snapshot()
    call()
    after = proxy.snapshot()
    after.subtract(before)
    return after


def measure_flushes(url: str, options: dict, partitions: int, flushes: int, proxy) -> dict:
    config = BrokerConfig(
        root=url,
        storage_options=options,
        linger_ms=5,
        cleaner_interval_ms=0,
        lease_interval_ms=600_000,
        lease_timeout_ms=3_600_000,
    )
    broker = Broker(config)
    broker.start("127.0.0.1:1")
    name = f"flush{partitions}"
    broker.create_topic(name, partitions)
    items = [(p, make_batch([b"v" * 100] * 10)) for p in range(partitions)]
    try:
        broker.produce(name, items)  # warm up: leadership (epoch bump), metadata
        per_broker = [delta(proxy, lambda: broker.produce(name, items)) for _ in range(flushes)]
    finally:
        broker.close()
    root = open_root(url, options)
    topic = root.topic(name)
    parts = {p: make_batch([b"v" * 100] * 10) for p in range(partitions)}
    topic.produce(parts)
    per_embedded = [delta(proxy, lambda: topic.produce(parts)) for _ in range(flushes)]
    return {
        "broker_writes": statistics.mean(writes(c) for c in per_broker),
        "broker_reads": statistics.mean(reads(c) for c in per_broker),
        "embedded_writes": statistics.mean(writes(c) for c in per_embedded),
        "embedded_reads": statistics.mean(reads(c) for c in per_embedded),
    }


def measure_idle_consumer(url: str, options: dict, partitions: int, idle_s: float, proxy) -> float:
    root = open_root(url, options)
    name = f"idle{partitions}"
    root.create_topic(name, partitions)
    consumer = Consumer(url, storage_options=options)
    try:
        consumer.assign([(name, p) for p in range(partitions)])
        consumer.poll(timeout_ms=100)  # opens the logs
        before = proxy.snapshot()
        started = time.monotonic()
        while time.monotonic() - started < idle_s:
            consumer.poll(timeout_ms=500)
        elapsed = time.monotonic() - started
        after = proxy.snapshot()
    finally:
        consumer.close()
    after.subtract(before)
    return (reads(after) + writes(after)) / elapsed


def measure_commits_local(commits: int) -> tuple[float, float]:
    """Median latency (ms) of commits 10-19 and of the last ten of ``commits``."""
    with tempfile.TemporaryDirectory() as tmp:
        groups = open_root(tmp).groups
        times = []
        for i in range(commits):
            started = time.perf_counter()
            groups.commit("g", {("t", i % 8): i})
            times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times[9:19]), statistics.median(times[-10:])


def measure_commits_s3(url: str, options: dict, commits: int, proxy) -> tuple[float, float]:
    """Requests per commit around the 10th and around the ``commits``-th commit."""
    groups = open_root(url, options).groups
    early: list[int] = []
    late: list[int] = []
    for i in range(commits):
        c = delta(proxy, lambda i=i: groups.commit("g", {("t", i % 8): i}))
        if 9 <= i < 41:
            early.append(writes(c) + reads(c))
        if i >= commits - 32:
            late.append(writes(c) + reads(c))
    return statistics.mean(early), statistics.mean(late)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--partitions", default="1,16,64,256")
    parser.add_argument("--flushes", type=int, default=10)
    parser.add_argument("--idle-s", type=float, default=3.0)
    parser.add_argument("--commits", type=int, default=10_000)
    parser.add_argument("--s3-commits", type=int, default=1_000)
    args = parser.parse_args()
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    counts = [int(x) for x in args.partitions.split(",")]

    moto = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    moto.start()
    host, port = moto.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    bucket = f"econ-{uuid.uuid4().hex[:8]}"
    boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        region_name="us-east-1",
    ).create_bucket(Bucket=bucket)
    proxy = CountingProxy(endpoint)
    options = {
        "key": "testing",
        "secret": "testing",
        "client_kwargs": {"endpoint_url": proxy.url, "region_name": "us-east-1"},
    }
    url = f"s3://{bucket}/root"
    try:
        rows = []
        for n in counts:
            flush = measure_flushes(url, options, n, args.flushes, proxy)
            idle = measure_idle_consumer(url, options, n, args.idle_s, proxy)
            rows.append((n, flush, idle))
            print(f"measured {n} partitions", file=sys.stderr)
        early_req, late_req = measure_commits_s3(url, options, args.s3_commits, proxy)
    finally:
        proxy.close()
        moto.stop()
    early_ms, late_ms = measure_commits_local(args.commits)

    base = rows[0][1]["broker_writes"]
    print("\n## Requests per producer flush (moto S3 behind a counting proxy; default 1 shard)")
    print(
        "| partitions | broker PUT | broker GET | embedded PUT | embedded GET | "
        "writes vs 1 partition | idle consumer reads/s |"
    )
    print("|---|---|---|---|---|---|---|")
    for n, f, idle in rows:
        print(
            f"| {n} | {f['broker_writes']:.1f} | {f['broker_reads']:.1f} | "
            f"{f['embedded_writes']:.1f} | {f['embedded_reads']:.1f} | "
            f"{f['broker_writes'] / base:.2f}x | {idle:.1f} |"
        )
    print("\n## Offset commits of one group")
    print(
        f"local root: 10th commit {early_ms:.3f} ms, {args.commits:,}th {late_ms:.3f} ms "
        f"({late_ms / early_ms:.2f}x)"
    )
    print(
        f"S3: {early_req:.2f} requests per commit around the 10th, {late_req:.2f} around the "
        f"{args.s3_commits:,}th ({late_req / early_req:.2f}x)"
    )
    print(
        f"\n## Monthly request bill at S3 list prices: {FLUSHES_PER_S} flushes/s of every "
        f"partition, one idle consumer, {COMMITS_PER_S} offset commit/s"
    )
    print("| partitions | PUT/s | GET/s | $/month |")
    print("|---|---|---|---|")
    for n, f, idle in rows:
        put_s = f["broker_writes"] * FLUSHES_PER_S + COMMITS_PER_S * 1
        get_s = f["broker_reads"] * FLUSHES_PER_S + idle + COMMITS_PER_S * max(early_req - 1, 0)
        bill = SECONDS_PER_MONTH * (
            put_s * PUT_PRICE_PER_1000 / 1000 + get_s * GET_PRICE_PER_1000 / 1000
        )
        print(f"| {n} | {put_s:.1f} | {get_s:.1f} | ${bill:,.0f} |")


if __name__ == "__main__":
    main()
