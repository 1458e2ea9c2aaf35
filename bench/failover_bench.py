"""Failover time on moto S3 with idle groups holding committed offsets (issue 36).

For each cluster size and group count: broker processes on a fresh moto S3 root
(``lease_timeout_ms`` as given, everything else the broker defaults), a topic of
64 partitions, ``G`` groups each holding a committed offset on every partition,
then SIGKILL of one broker. Measured from the kill: when a survivor's Metadata
stops naming the dead broker as a leader, and when every partition has accepted
a record. Target: both within two lease timeouts, whatever the group count.

    .venv/bin/python bench/failover_bench.py --brokers 3,5 --groups 0,100,1000
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sparklog import Admin, Producer
from sparklog.client.transports.flight_client import BrokerClient
from sparklog.storage import open_root
from sparklog.topic_partition import TopicPartition
from tests.support.brokers import Cluster
from tests.support.s3 import MotoS3

PARTITIONS = 64
TOPIC = "failover"


def _leaders(client: BrokerClient) -> set[int]:
    return {p.leader_id for p in client.metadata([TOPIC])[TOPIC].partitions}


def run(moto: MotoS3, brokers: int, groups: int, lease_timeout_ms: int) -> dict[str, float]:
    work = Path(tempfile.mkdtemp(prefix="sparklog-failover-"))
    cluster = Cluster(work, moto.fresh_root(), moto.storage_options)
    config = {"lease_timeout_ms": lease_timeout_ms, "lease_interval_ms": 1000,
              "metadata_refresh_ms": 1000, "fetch_refresh_ms": 200,
              "group_min_session_timeout_ms": 6000, "group_poll_ms": 100}  # fmt: skip
    try:
        for broker_id in range(brokers):
            cluster.start(broker_id, **config)
        cluster.wait_live(brokers)
        with Admin(cluster.address) as admin:
            admin.create_topic(TOPIC, PARTITIONS)
        producer = Producer(cluster.address)
        for p in range(PARTITIONS):
            producer.send(TOPIC, value=b"x", partition=p)
        producer.flush()
        root = open_root(cluster.root, moto.storage_options)
        offsets = {TopicPartition(TOPIC, p): 1 for p in range(PARTITIONS)}
        for g in range(groups):
            root.groups.commit(f"idle-{g}", offsets)
        victim = brokers - 1
        survivor = cluster.brokers[0]
        killed = time.monotonic()
        cluster.kill(victim)
        metadata_s = produce_s = float("nan")
        accepted: set[int] = set()
        deadline = killed + 20 * lease_timeout_ms / 1000
        with BrokerClient(survivor.location, retry_timeout_ms=1000) as client:
            while time.monotonic() < deadline and metadata_s != metadata_s:
                try:
                    if victim not in _leaders(client):
                        metadata_s = time.monotonic() - killed
                except Exception:
                    pass
                time.sleep(0.1)
        quick = Producer(cluster.address, retries=0, delivery_timeout_ms=2000)
        while time.monotonic() < deadline and len(accepted) < PARTITIONS:
            for p in sorted(set(range(PARTITIONS)) - accepted):
                try:
                    quick.send(TOPIC, value=b"y", partition=p).get(timeout=5)
                    accepted.add(p)
                except Exception:
                    pass
        if len(accepted) == PARTITIONS:
            produce_s = time.monotonic() - killed
        return {"metadata_s": metadata_s, "produce_s": produce_s}
    finally:
        cluster.stop_all()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--brokers", default="3,5")
    parser.add_argument("--groups", default="0,100,1000")
    parser.add_argument("--lease-timeout-ms", type=int, default=6000)
    args = parser.parse_args()
    moto = MotoS3.start()
    limit_s = 2 * args.lease_timeout_ms / 1000
    lease = args.lease_timeout_ms
    print(f"64 partitions on moto S3, lease_timeout_ms={lease}; target <= {limit_s:.0f} s")
    print(f"{'brokers':>7} {'groups':>6} {'metadata s':>10} {'produce s':>9} {'x lease':>7}")
    try:
        for brokers in (int(b) for b in args.brokers.split(",")):
            for groups in (int(g) for g in args.groups.split(",")):
                r = run(moto, brokers, groups, args.lease_timeout_ms)
                ratio = r["produce_s"] / (args.lease_timeout_ms / 1000)
                times = f"{r['metadata_s']:>10.1f} {r['produce_s']:>9.1f}"
                print(f"{brokers:>7} {groups:>6} {times} {ratio:>7.2f}")
    finally:
        moto.stop()


if __name__ == "__main__":
    main()
