"""Produce fan-out: broker CPU per record of one request spread over N partitions.

Run:  .venv/bin/python bench/produce_fanout.py [--records R] [--partitions 1,64,1024,4096]
                                              [--requests K]

An in-process broker (``Broker``, no Flight server; the call its Flight and
Kafka listeners make) on a local root.  Each request carries ``--records``
records of 100-byte values spread evenly over N partitions of one topic (at
least one record per partition).  For every N it prints the process CPU time
per record (median of ``--requests`` requests, after one warm-up request that
takes leadership), and the ratio to N=1 measured in the same run.  Two input
shapes: ``stored`` (batches already in the topic's record schema, as the Flight
client sends them) and ``raw`` (tables of strings without timestamps, which
take normalisation's general path: cast, stamp, size check).  Issue #22's
target: the ratio at 1,024 partitions at most 3.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from sparklog.broker_lite.config import BrokerConfig  # noqa: E402
from sparklog.broker_lite.service import Broker  # noqa: E402
from sparklog.storage import make_batch  # noqa: E402

VALUE = b"v" * 100


def items_for(
    partitions: int, records: int, shape: str
) -> list[tuple[int, pa.RecordBatch | pa.Table]]:
    per = max(records // partitions, 1)
    now = int(time.time() * 1000)
    if shape == "stored":
        return [
            (p, make_batch([VALUE] * per, timestamps_ms=[now] * per)) for p in range(partitions)
        ]
    text = VALUE.decode()
    return [(p, pa.table({"value": [text] * per})) for p in range(partitions)]


def cpu_per_record_us(broker: Broker, topic: str, items: list, requests: int) -> float:
    count = sum(data.num_rows for _, data in items)
    broker.produce(topic, items)  # warm-up: leadership (epoch bump), handles
    samples = []
    for _ in range(requests):
        started = time.process_time()
        broker.produce(topic, items)
        samples.append((time.process_time() - started) / count * 1e6)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=4096)
    parser.add_argument("--partitions", default="1,64,1024,4096")
    parser.add_argument("--requests", type=int, default=5)
    parser.add_argument("--dir", default=None, help="where the local root goes (default: $TMPDIR)")
    args = parser.parse_args()
    counts = [int(x) for x in args.partitions.split(",")]
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        config = BrokerConfig(
            root=f"file://{tmp}/root",
            linger_ms=1,
            cleaner_interval_ms=0,
            lease_interval_ms=600_000,
            lease_timeout_ms=3_600_000,
        )
        broker = Broker(config)
        broker.start("127.0.0.1:1")
        try:
            for shape in ("stored", "raw"):
                print(f"{shape} input, {args.records} records per request (100-byte values):")
                print("  partitions  records/partition  CPU us/record  ratio to 1 partition")
                base = None
                for n in counts:
                    topic = f"{shape}{n}"
                    broker.create_topic(topic, n)
                    items = items_for(n, args.records, shape)
                    us = cpu_per_record_us(broker, topic, items, args.requests)
                    base = us if base is None else base
                    per = max(args.records // n, 1)
                    print(f"  {n:>10}  {per:>17}  {us:>13.1f}  {us / base:>20.2f}")
        finally:
            broker.close()


if __name__ == "__main__":
    main()
