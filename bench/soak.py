"""Soak: one broker under steady Kafka traffic for a long time; does its memory level off?

Run:  .venv/bin/python bench/soak.py [--minutes 30] [--rate 200] [--tail-cache-mb 8]

A broker process on a local root; a confluent-kafka producer sends ``--rate``
records a second (100-byte values, keyed over 8 partitions) and a consumer group
of two members reads and commits them, all through the Kafka listener.  Every
10 s the broker's RSS, open file descriptors and threads are sampled from /proc.
Prints the samples as JSON lines, then the verdict of issue 26 item 10: over the
last 10 minutes RSS grows less than 5 %, and fds and threads stay flat (the
largest minus the smallest in that window).  The baseline is the run's own
first sample after warm-up (2 minutes), so the ratios are measured in the same
run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from confluent_kafka import Consumer, Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from sparklog.broker_lite.config import BrokerConfig  # noqa: E402
from tests.support.brokers import Cluster  # noqa: E402

TOPIC = "soak"
PARTITIONS = 8
WARMUP_S = 120
WINDOW_S = 600


def sample(pid: int) -> dict[str, int]:
    status = Path(f"/proc/{pid}/status").read_text().splitlines()
    fields = {k: v.split()[0] for k, _, v in (line.partition(":") for line in status) if v.split()}
    return {
        "rss_kib": int(fields["VmRSS"]),
        "threads": int(fields["Threads"]),
        "fds": len(os.listdir(f"/proc/{pid}/fd")),
    }


def produce(bootstrap: str, rate: int, stop: threading.Event, counts: dict[str, int]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
    value = b"x" * 100
    n = 0
    started = time.monotonic()
    while not stop.is_set():
        due = int((time.monotonic() - started) * rate)
        while n < due:
            producer.produce(TOPIC, value, key=b"%d" % (n % 1000))
            n += 1
        producer.poll(0)
        stop.wait(0.01)
    producer.flush(60)
    counts["produced"] = n


def consume(bootstrap: str, name: str, stop: threading.Event, counts: dict[str, int]) -> None:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "soak-group",
            "auto.offset.reset": "earliest",
            "client.id": name,
        }
    )
    consumer.subscribe([TOPIC])
    while not stop.is_set():
        got = consumer.consume(500, 0.5)
        counts[name] = counts.get(name, 0) + sum(1 for m in got if m.error() is None)
    consumer.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30)
    parser.add_argument("--rate", type=int, default=200, help="records per second")
    parser.add_argument("--tail-cache-mb", type=int, default=0, help="0: the broker's default")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="sparklog-soak-"))
    cluster = Cluster(work, f"file://{work}/root")
    # the tests' short timeouts suit failover tests, not a soak: run the cleaner (it merges
    # the small segments each flush leaves, which the shard logs hold in memory until then)
    # and linger as a deployed broker does
    defaults = BrokerConfig()
    config: dict[str, int] = {
        "cleaner_interval_ms": defaults.cleaner_interval_ms,
        "linger_ms": defaults.linger_ms,
    }
    if args.tail_cache_mb:
        config["tail_cache_bytes"] = args.tail_cache_mb << 20
    broker = cluster.start(0, **config)
    stop = threading.Event()
    counts: dict[str, int] = {}
    samples: list[dict[str, float]] = []
    try:
        bootstrap = cluster.kafka_bootstrap
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(timeout=60)
        threads = [
            threading.Thread(
                target=produce, args=(bootstrap, args.rate, stop, counts), daemon=True
            ),
            threading.Thread(
                target=consume, args=(bootstrap, "member-1", stop, counts), daemon=True
            ),
            threading.Thread(
                target=consume, args=(bootstrap, "member-2", stop, counts), daemon=True
            ),
        ]
        for t in threads:
            t.start()
        started = time.monotonic()
        end = started + args.minutes * 60
        assert broker.proc is not None
        while time.monotonic() < end:
            row = {"t_s": round(time.monotonic() - started), **sample(broker.proc.pid)}
            row["consumed"] = counts.get("member-1", 0) + counts.get("member-2", 0)
            samples.append(row)
            print(json.dumps(row), flush=True)
            stop.wait(10)
        stop.set()
        for t in threads:
            t.join(120)
    finally:
        stop.set()
        cluster.stop_all()
    window = [s for s in samples if s["t_s"] >= samples[-1]["t_s"] - WINDOW_S]
    after_warmup = [s for s in samples if s["t_s"] >= WARMUP_S] or samples
    first, last = window[0], window[-1]
    growth = (last["rss_kib"] - first["rss_kib"]) / first["rss_kib"]
    verdict = {
        "minutes": args.minutes,
        "rate": args.rate,
        "produced": counts.get("produced", 0),
        "consumed": counts.get("member-1", 0) + counts.get("member-2", 0),
        "rss_kib_after_warmup": after_warmup[0]["rss_kib"],
        "rss_kib_max": max(s["rss_kib"] for s in samples),
        "rss_kib_end": last["rss_kib"],
        "rss_growth_last_10_min": round(growth, 4),
        "rss_vs_after_warmup": round(last["rss_kib"] / after_warmup[0]["rss_kib"], 3),
        "fds_range_last_10_min": max(s["fds"] for s in window) - min(s["fds"] for s in window),
        "threads_range_last_10_min": max(s["threads"] for s in window)
        - min(s["threads"] for s in window),
        "levels_off": growth < 0.05,
    }
    print(json.dumps(verdict), flush=True)


if __name__ == "__main__":
    main()
