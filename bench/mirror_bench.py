"""Mirroring throughput and request bill: object copy (root to root) against record copy (Kafka).

Run:  .venv/bin/python bench/mirror_bench.py [--records N] [--partitions P] [--flushes F]

One moto S3 server (a process of its own) behind the tests' request-counting proxy
holds a source root (bucket ``src``) written with ``--flushes`` flushes of every partition (100-byte
values, keys, headers).  The same data is then mirrored three ways, in one run:

* **object copy, server-side**: destination bucket on the same endpoint with the
  same options: S3 CopyObject, no bytes through the mirror process;
* **object copy, read + write**: destination bucket reached with other options
  (as another region would be): one GET and one PUT per object;
* **record copy (Kafka protocol)**: a sparklog broker serving the source root,
  its Kafka listener read by the Kafka-protocol mirror (confluent-kafka),
  records written with their offsets.

For each: records per second until caught up, S3 requests by kind per GB of
segment bytes mirrored, and their price at S3 list prices.  The broker's own
background requests (leases, metadata probes) are measured idle beforehand and
subtracted from the record path's count.
"""

from __future__ import annotations

import argparse
import logging
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import boto3

from sparklog.mirror.copier import Mirror
from sparklog.mirror.kafka_source import KafkaMirror
from sparklog.mirror.links import create_link, get_link
from sparklog.storage import LogRoot, make_batch, open_root
from tests.support.brokers import Cluster
from tests.support.counting_s3 import CountingProxy

PUT_PRICE_PER_1000 = 0.005  # PUT, COPY, POST, LIST
GET_PRICE_PER_1000 = 0.0004  # GET, HEAD
GB = 1 << 30


def bill(c: Counter[str]) -> float:
    writes = c["PUT"] + c["POST"] + c["LIST"] + c["DELETE"]
    reads = c["GET"] + c["HEAD"]
    return writes / 1000 * PUT_PRICE_PER_1000 + reads / 1000 * GET_PRICE_PER_1000


def fill(root: LogRoot, partitions: int, flushes: int, per_flush: int) -> tuple[int, int]:
    root.create_topic("orders", partitions=partitions)
    topic = root.topic("orders")
    value = b"v" * 100
    for f in range(flushes):
        parts = {
            p: make_batch(
                [value] * per_flush,
                keys=[f"k{f}-{i}".encode() for i in range(per_flush)],
                timestamps_ms=[1_700_000_000_000 + f] * per_flush,
                headers=[[("h", b"1")]] * per_flush,
            )
            for p in range(partitions)
        }
        topic.produce(parts)
    size = sum(s.size_bytes for p in range(partitions) for s in topic.partition(p).segments())
    return flushes * partitions * per_flush, size


def until_caught_up(mirror: Any) -> int:
    copied = 0
    idle = 0
    while idle < 2:
        records = mirror.step().records
        copied += records
        idle = idle + 1 if records == 0 else 0
    return copied


def measure(
    proxy: CountingProxy, mirror: Any, idle_rate: Counter[str] | None = None
) -> tuple[int, float, Counter[str]]:
    before = proxy.snapshot()
    started = time.perf_counter()
    copied = until_caught_up(mirror)
    spent = time.perf_counter() - started
    after = proxy.snapshot()
    after.subtract(before)
    if idle_rate is not None:
        for kind, per_s in idle_rate.items():
            after[kind] = max(0, after[kind] - round(per_s * spent))
    return copied, spent, after


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--flushes", type=int, default=40)
    parser.add_argument("--records", type=int, default=2_000, help="records per partition flush")
    args = parser.parse_args()
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    # moto in a process of its own: its work (every request's bytes) does not compete for
    # this process's GIL with the mirror being measured
    moto = subprocess.Popen(
        [str(Path(sys.executable).parent / "moto_server"), "-H", "127.0.0.1", "-p", "0"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    endpoint = ""
    assert moto.stderr is not None
    for line in moto.stderr:
        if "Running on http://" in line:
            endpoint = line.split("Running on ", 1)[1].strip()
            break
    threading.Thread(target=lambda: [None for _ in moto.stderr], daemon=True).start()
    s3 = boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        region_name="us-east-1",
    )
    run = uuid.uuid4().hex[:6]
    buckets = {name: f"{name}-{run}" for name in ("src", "server", "bytes", "records")}
    for bucket in buckets.values():
        s3.create_bucket(Bucket=bucket)
    proxy = CountingProxy(endpoint)
    options = proxy.storage_options()
    other = {**options, "request_timeout_ms": 29_000}  # another client: no server-side copy
    rows = []
    try:
        source = open_root(f"s3://{buckets['src']}/root", options, create=True)
        total, size = fill(source, args.partitions, args.flushes, args.records)
        print(f"source: {total:,} records, {size / 1e6:.1f} MB of segments", file=sys.stderr)
        for how, opts in (
            ("object copy, server-side", options),
            ("object copy, read + write", other),
        ):
            key = "server" if opts is options else "bytes"
            dest = open_root(f"s3://{buckets[key]}/root", opts, create=True)
            create_link(dest, "bench", source=source.url, source_options=options, topics=".*")
            copied, spent, counts = measure(proxy, Mirror(dest, get_link(dest, "bench")))
            rows.append((how, copied, spent, counts))
            print(f"measured {how}", file=sys.stderr)
        with tempfile.TemporaryDirectory() as work:
            cluster = Cluster(Path(work), source.url, options)
            cluster.start(1)
            try:
                cluster.wait_live(1)
                idle_before = proxy.snapshot()
                time.sleep(3)  # the broker's background requests, to subtract
                idle = proxy.snapshot()
                idle.subtract(idle_before)
                idle_rate = Counter({k: v / 3 for k, v in idle.items()})
                dest = open_root(f"s3://{buckets['records']}/root", other, create=True)
                create_link(
                    dest, "bench", source=f"kafka://{cluster.kafka_bootstrap}", topics="orders"
                )
                mirror = KafkaMirror(dest, get_link(dest, "bench"))
                try:
                    copied, spent, counts = measure(proxy, mirror, idle_rate)
                finally:
                    mirror.close()
                rows.append(("record copy (Kafka protocol)", copied, spent, counts))
            finally:
                cluster.stop()
    finally:
        proxy.close()
        moto.terminate()
        moto.wait(timeout=30)

    print(
        f"\n## Mirroring {total:,} records ({size / 1e6:.1f} MB of segments, "
        f"{args.partitions} partitions, {args.flushes} objects) on moto S3"
    )
    print(
        "| path | records/s | vs record copy | GET+HEAD per GB | PUT+COPY+LIST per GB | $ per GB |"
    )
    print("|---|---|---|---|---|---|")
    record_rate = rows[-1][1] / rows[-1][2]
    for how, copied, spent, counts in rows:
        assert copied == total, (how, copied, total)
        per_gb = GB / size
        reads = (counts["GET"] + counts["HEAD"]) * per_gb
        writes = (counts["PUT"] + counts["POST"] + counts["LIST"]) * per_gb
        rate = copied / spent
        print(
            f"| {how} | {rate:,.0f} | {rate / record_rate:.1f}x | {reads:,.0f} | {writes:,.0f} "
            f"| ${bill(counts) * per_gb:.4f} |"
        )


if __name__ == "__main__":
    main()
