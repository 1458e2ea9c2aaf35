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

``--kafka`` measures instead what issue #22 measured: a broker process (with
its Kafka listener) on a local root, sent one Kafka Produce request (v9,
acks=-1, one uncompressed v2 record batch per partition) at a time over one
connection; the broker process's CPU time (``/proc/<pid>/stat``) per record
over at least ``--requests`` requests and 1 s of its CPU, after one warm-up.
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


def kafka_mode(counts: list[int], records: int, requests: int, tmp: str) -> None:
    """Per-record CPU of the broker process for Kafka Produce requests over N partitions."""
    import io
    import os
    import socket
    import struct
    from datetime import timedelta

    from kafka_bench import start_broker
    from kio.schema.produce.v9.request import (
        PartitionProduceData,
        ProduceRequest,
        TopicProduceData,
    )
    from kio.serial import entity_writer

    from sparklog.broker_lite.kafka.records import encode_batch
    from sparklog.storage import open_root

    root = f"file://{tmp}/root"
    proc, _, bootstrap = start_broker(root, Path(tmp) / "broker.log")
    host, port = bootstrap.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=120)
    ticks = os.sysconf("SC_CLK_TCK")

    def cpu_s() -> float:
        fields = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / ticks  # utime + stime

    def call(request: ProduceRequest, correlation: int) -> None:
        header_cls = request.__header_schema__
        buf = io.BytesIO()
        entity_writer(header_cls)(
            buf,
            header_cls(
                request_api_key=request.__api_key__,
                request_api_version=request.__version__,
                correlation_id=correlation,
                client_id="fanout",
            ),
        )
        entity_writer(type(request))(buf, request)
        payload = buf.getvalue()
        sock.sendall(struct.pack(">i", len(payload)) + payload)
        size = struct.unpack(">i", _read(sock, 4))[0]
        _read(sock, size)

    try:
        print(f"Kafka Produce requests of {records} records (100-byte values), broker process CPU:")
        print("  partitions  records/partition  CPU us/record  ratio to 1 partition")
        base = None
        correlation = 0
        for n in counts:
            topic = f"kafka{n}"
            open_root(root).create_topic(topic, n)
            per = max(records // n, 1)
            batch = make_batch([VALUE] * per, timestamps_ms=[1_000] * per)
            with_offsets = pa.RecordBatch.from_arrays(
                [pa.array(range(per), pa.int64()), *batch.columns],
                names=["offset", *batch.schema.names],
            )
            encoded = encode_batch(with_offsets)
            request = ProduceRequest(
                transactional_id=None,
                acks=-1,
                timeout=timedelta(seconds=60),
                topic_data=(
                    TopicProduceData(
                        name=topic,
                        partition_data=tuple(
                            PartitionProduceData(index=p, records=encoded) for p in range(n)
                        ),
                    ),
                ),
            )
            correlation += 1
            call(request, correlation)  # warm-up: topic load, leadership
            started = cpu_s()
            sent = 0
            # at least --requests, and at least 1 s of broker CPU (the clock ticks in 10 ms)
            while sent < requests or cpu_s() - started < 1.0:
                correlation += 1
                call(request, correlation)
                sent += 1
            us = (cpu_s() - started) / (sent * per * n) * 1e6
            base = us if base is None else base
            print(f"  {n:>10}  {per:>17}  {us:>13.1f}  {us / base:>20.2f}")
    finally:
        sock.close()
        proc.terminate()
        proc.wait(timeout=60)


def _read(sock: object, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))  # type: ignore[attr-defined]
        if not chunk:
            raise SystemExit("the broker closed the connection")
        data += chunk
    return data


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=4096)
    parser.add_argument("--partitions", default="1,64,1024,4096")
    parser.add_argument("--requests", type=int, default=5)
    parser.add_argument("--dir", default=None, help="where the local root goes (default: $TMPDIR)")
    parser.add_argument("--kafka", action="store_true", help="Kafka Produce requests to a broker")
    args = parser.parse_args()
    counts = [int(x) for x in args.partitions.split(",")]
    if args.kafka:
        with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
            kafka_mode(counts, args.records, args.requests, tmp)
        return
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
