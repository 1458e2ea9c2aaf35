"""A brokerless writer beside a leader: requests and revokes per round, hand-over on and off.

Run:  .venv/bin/python bench/handover_bench.py [--partitions 4] [--rounds 20]
                                                [--latency-ms 0,0]

moto's S3 server behind the tests' request-counting proxy (``tests/support/counting_s3.py``;
``--latency-ms LO,HI`` adds a uniform delay to every request, as S3's 20-50 ms), one
in-process broker with its Flight listener (journalling records, the default) on the
root.  Each round, the broker produces one record to every partition of a topic (a Kafka
producer's flush: its shards stay leased to the broker's journal), then an embedded
``Producer`` on the root sends one record to every partition and flushes (the Spark sink's
driver commits the same way).  Measured twice in one run, on two topics: with the
embedded writer's commits handed to the leader (``sparklog.client.handover``), and with
them committed directly, as before the hand-over (the baseline).  Prints requests per
round by kind (the broker's and the writer's together), the revoke versions written
into the broker's journal and the leader epochs the broker took, and the embedded
flush's median latency; ratios against the direct baseline.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sparklog import Producer
from sparklog.client import handover
from sparklog.storage import make_batch, open_root
from tests.chaos.inproc import inproc_broker
from tests.support.counting_s3 import CountingProxy
from tests.support.s3 import MotoS3


def writes(c: Counter[str]) -> int:
    return c["PUT"] + c["POST"] + c["LIST"] + c["DELETE"]


def reads(c: Counter[str]) -> int:
    return c["GET"] + c["HEAD"]


def run_rounds(
    url: str,
    options: dict[str, Any],
    broker: Any,
    topic: str,
    partitions: int,
    rounds: int,
    proxy: CountingProxy,
) -> dict[str, float]:
    """Rounds of a broker flush then an embedded flush over every partition."""
    broker.create_topic(topic, partitions)
    items = [(p, make_batch([b"k" * 100])) for p in range(partitions)]
    broker.produce(topic, items)  # warm up: the broker leases every shard
    state = broker.state
    handle = state.topic(topic)
    by_key = {}
    for p in range(partitions):
        shard = state.partition_state(handle, p).shard
        by_key[shard.key] = shard
    shards = list(by_key.values())
    epochs_before = sum(s.log.leader_epoch for s in shards)
    latencies_ms = []
    with Producer(url, storage_options=options, linger_ms=1) as producer:
        producer.send(topic, b"warm", partition=0).get(timeout=60)  # handles, metadata
        before = proxy.snapshot()
        for _ in range(rounds):
            broker.produce(topic, items)
            started = time.perf_counter()
            futures = [producer.send(topic, b"e" * 100, partition=p) for p in range(partitions)]
            producer.flush()
            for f in futures:
                f.get(timeout=60)
            latencies_ms.append((time.perf_counter() - started) * 1000)
        after = proxy.snapshot()
    after.subtract(before)
    epochs_taken = sum(s.log.leader_epoch for s in shards) - epochs_before
    return {
        "writes": writes(after) / rounds,
        "reads": reads(after) / rounds,
        "list": after["LIST"] / rounds,
        "epochs": epochs_taken / rounds,
        "p50_ms": statistics.median(latencies_ms),
    }


def revokes(url: str, options: dict[str, Any]) -> int:
    """Revoke versions in the root's broker journals."""
    store = open_root(url, options).store
    found = 0
    for info in store.list_objects("cluster/journal"):
        if info.key.endswith(".json"):
            body = json.loads(store.get(info.key))
            found += body.get("c", {}).get("kind") == "revoke"
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--latency-ms", default="0,0", help="LO,HI added to each request")
    args = parser.parse_args()
    low, high = (int(x) for x in args.latency_ms.split(","))

    moto = MotoS3.start()
    proxy = CountingProxy(moto.endpoint_url, latency_ms=(low, high) if high else None)
    options = proxy.storage_options()
    url = moto.fresh_root()
    figures: dict[str, dict[str, float]] = {}
    leaser = handover._location
    try:
        with inproc_broker(url, storage_options=options, linger_ms=5) as (server, _):
            broker = server.broker
            for mode in ("direct", "handed"):
                # direct: no lease is looked up, so every commit is direct (before hand-overs)
                handover._location = (lambda *a: None) if mode == "direct" else leaser
                revoked = revokes(url, options)
                figures[mode] = run_rounds(
                    url, options, broker, f"t-{mode}", args.partitions, args.rounds, proxy
                )
                figures[mode]["revokes"] = (revokes(url, options) - revoked) / args.rounds
                print(f"measured {mode}", file=sys.stderr)
    finally:
        handover._location = leaser
        proxy.close()
        moto.stop()
    base = figures["direct"]
    print(
        f"\n## A brokerless writer beside a leader: {args.partitions} partitions, "
        f"{args.rounds} rounds, added latency {low}-{high} ms per request"
    )
    print(
        "| commits | writes/round | reads/round | LIST/round | revokes/round | "
        "leader epochs/round | embedded flush p50 ms |"
    )
    print("|---|---|---|---|---|---|---|")
    for mode, f in figures.items():
        print(
            f"| {mode} | {f['writes']:.1f} ({f['writes'] / base['writes']:.2f}x) | "
            f"{f['reads']:.1f} ({f['reads'] / base['reads']:.2f}x) | {f['list']:.1f} | "
            f"{f['revokes']:.2f} | {f['epochs']:.2f} | "
            f"{f['p50_ms']:.1f} ({f['p50_ms'] / base['p50_ms']:.2f}x) |"
        )


if __name__ == "__main__":
    main()
