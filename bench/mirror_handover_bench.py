"""A mirror link's copier beside a leader: requests per copy step, hand-over on and off.

Run:  .venv/bin/python bench/mirror_handover_bench.py [--partitions 4] [--steps 20]

The fail-back of docs/mirroring.md, where a mirror topic's shards are leased: the old
primary ("east", moto's S3) wrote its topic through its broker (an in-process broker with
its Flight listener, journalling records: the default), so its journal leases every
shard; the standby ("west", a local folder) mirrored it, was promoted and wrote on;
``mirror reverse`` made east's topic the reverse link's mirror topic.  Then each step
west writes one record to every partition and the reverse link's copier (no broker)
copies them into east.  The copier and the broker reach east through two request-counting
proxies (``tests/support/counting_s3.py``), so their requests are told apart (the
broker's include its background work: liveness, metadata probes, folds).  Measured twice,
on fresh roots: with the copier's commits handed to the leader
(``sparklog.client.handover.commit_mirrored``), and committed directly, as before (the
baseline: the first copy revokes every shard from the leader's journal).  Prints the
first copy's requests and the steady steps' mean, by kind, and the revoke versions.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.handover_bench import revokes
from sparklog.client import handover
from sparklog.mirror.copier import Mirror, promote, reverse
from sparklog.mirror.links import create_link, get_link
from sparklog.storage import open_root
from tests.chaos.inproc import inproc_broker
from tests.mirror.support import records
from tests.support.counting_s3 import CountingProxy
from tests.support.s3 import MotoS3

KINDS = ("PUT", "GET", "HEAD", "LIST")


def measure(moto: MotoS3, folder: Path, partitions: int, steps: int) -> dict[str, Any]:
    """One fail-back on fresh roots: requests of the first copy and of the steady steps."""
    copier_proxy, broker_proxy = CountingProxy(moto.endpoint_url), CountingProxy(moto.endpoint_url)
    url = moto.fresh_root()
    west = open_root(f"file://{folder}", {}, create=True)
    try:
        with inproc_broker(url, storage_options=broker_proxy.storage_options()) as (server, _):
            broker = server.broker
            broker.create_topic("orders", partitions, config={"commit.shards": partitions})
            for r in range(2):
                broker.produce("orders", [(p, records(p, r * 5, 5)) for p in range(partitions)])
            east = open_root(url, copier_proxy.storage_options())
            create_link(
                west, "dr", source=url, source_options=copier_proxy.storage_options(), topics=".*"
            )
            Mirror(west, get_link(west, "dr")).step()
            promote(west, "orders")
            reverse(west, "dr", source_options={})
            back = Mirror(east, get_link(east, "dr-back"))
            found: dict[str, Any] = {"revokes": -revokes(url, moto.storage_options)}
            for step in range(steps + 1):
                west.topic("orders").produce(
                    {p: records(p, 10 + step, 1) for p in range(partitions)}
                )
                copier, leader = copier_proxy.snapshot(), broker_proxy.snapshot()
                assert back.step().records == partitions
                copier = copier_proxy.snapshot() - copier
                leader = broker_proxy.snapshot() - leader
                key = "first" if step == 0 else "steady"
                found.setdefault(key, (Counter(), Counter()))
                found[key][0].update(copier)
                found[key][1].update(leader)
            found["revokes"] += revokes(url, moto.storage_options)
            return found
    finally:
        copier_proxy.close()
        broker_proxy.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    moto = MotoS3.start()
    leaser = handover._location
    figures = {}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for mode in ("direct", "handed"):
                # direct: no lease is looked up, so every copy commits itself (as before)
                handover._location = (lambda *a: None) if mode == "direct" else leaser
                figures[mode] = measure(moto, Path(tmp) / mode, args.partitions, args.steps)
                print(f"measured {mode}", file=sys.stderr)
    finally:
        handover._location = leaser
        moto.stop()
    print(
        f"\n## A mirror copier beside a leader: {args.partitions} partitions "
        f"({args.partitions} shards), {args.steps} steady steps"
    )
    print("| commits | copy | copier PUT/GET/HEAD/LIST | broker PUT/GET/HEAD/LIST | revokes |")
    print("|---|---|---|---|---|")
    for mode, found in figures.items():
        for key, count in (("first", 1), ("steady", args.steps)):
            copier, leader = found[key]
            print(
                f"| {mode} | {key} | "
                + " / ".join(f"{copier[k] / count:.1f}" for k in KINDS)
                + " | "
                + " / ".join(f"{leader[k] / count:.1f}" for k in KINDS)
                + f" | {found['revokes'] if key == 'first' else ''} |"
            )


if __name__ == "__main__":
    main()
