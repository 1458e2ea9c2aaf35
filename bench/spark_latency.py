"""Produce-to-Spark-output latency and typed-topic reads, for bench/spark_bench.py.

Latency: a topic-to-topic query (``readStream`` -> ``select key, value`` ->
``writeStream`` into another topic) with Spark's default trigger, fed at a
fixed rate by a producer either embedded (writing the root) or through a
broker process.  Each record's value holds its produce time; a poller reads
the output topic every few milliseconds and takes, per record, the time it
became readable minus its produce time.  Spark's progress events say where
each micro-batch's time goes.

Typed topics: the same records as a typed topic (value = a struct of five
fields, read as columns) and as JSON bytes parsed with ``from_json``, end to end
into Spark's ``noop`` sink.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from sparklog.storage import open_root
from sparklog.storage.records import record_schema

STAMP = 8  # bytes of produce time (ns, big-endian) at the start of every value


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def measure_latency(
    spark: Any, work: Path, *, via_broker: bool, rate: int, seconds: float
) -> dict[str, Any]:
    """p50/p99 produce-to-output latency (ms) at ``rate`` records/s, and per-batch durations."""
    from sparklog.client.producer import Producer

    url = f"file://{work}/latency-{uuid.uuid4().hex[:6]}"
    root = open_root(url)
    root.create_topic("lat-in", 1)
    root.create_topic("lat-out", 1)
    broker = None
    address = url
    if via_broker:
        address = f"127.0.0.1:{_free_port()}"
        broker = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "sparklog.cli",
                "broker",
                "start",
                "--root",
                url,
                "--listen",
                address,
                "--broker-id",
                "1",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    query = None
    try:
        producer = Producer(f"sparklog://{address}" if via_broker else address, linger_ms=0)
        producer.send("lat-in", value=b"warm-up").get(60)  # broker up, topic known
        query = (
            spark.readStream.format("sparklog")
            .option("root", url)
            .option("subscribe", "lat-in")
            .load()
            .select("key", "value")
            .writeStream.format("sparklog")
            .option("root", url)
            .option("topic", "lat-out")
            .option("checkpointLocation", str(work / f"ck-lat-{uuid.uuid4().hex}"))
            .start()
        )
        deadline = time.monotonic() + 120
        while query.lastProgress is None and time.monotonic() < deadline:
            time.sleep(0.05)
        seen: dict[int, float] = {}
        out_log = root.topic("lat-out").partition(0)
        stop = threading.Event()

        def poll() -> None:
            read_to = out_log.high_watermark
            while not stop.is_set():
                out_log.refresh()
                hwm = out_log.high_watermark
                if hwm > read_to:
                    now = time.time_ns()
                    for value in out_log.read(read_to, hwm).column("value").to_pylist():
                        seen[int.from_bytes(value[:STAMP], "big")] = now
                    read_to = hwm
                time.sleep(0.002)

        poller = threading.Thread(target=poll, daemon=True)
        poller.start()
        sent: list[int] = []
        interval = 1.0 / rate
        next_at = time.monotonic()
        end_at = next_at + seconds
        while next_at < end_at:
            stamp = time.time_ns()
            producer.send("lat-in", value=stamp.to_bytes(STAMP, "big") + b"x" * 92)
            sent.append(stamp)
            next_at += interval
            time.sleep(max(0.0, next_at - time.monotonic()))
        producer.flush(60)
        deadline = time.monotonic() + 120
        while len(seen) < len(sent) and time.monotonic() < deadline:
            time.sleep(0.05)
        stop.set()
        poller.join()
        progress = [p for p in query.recentProgress if p["numInputRows"]]
        producer.close()
    finally:
        if query is not None:
            query.stop()
        if broker is not None:
            broker.terminate()
            broker.wait(30)
    latencies_ms = np.array([(seen[s] - s) / 1e6 for s in sent if s in seen])
    durations: dict[str, list[float]] = {}
    for p in progress:
        for key, value in p["durationMs"].items():
            durations.setdefault(key, []).append(value)
    return {
        "records": len(sent),
        "delivered": len(latencies_ms),
        "p50_ms": float(np.percentile(latencies_ms, 50)) if len(latencies_ms) else float("nan"),
        "p99_ms": float(np.percentile(latencies_ms, 99)) if len(latencies_ms) else float("nan"),
        "batches": len(progress),
        "median_durations_ms": {k: float(np.median(v)) for k, v in sorted(durations.items())},
    }


TYPED = pa.struct(
    [
        ("id", pa.int64()),
        ("user", pa.string()),
        ("amount", pa.float64()),
        ("country", pa.string()),
        ("ts_ms", pa.int64()),
    ]
)
TYPED_DDL = "id BIGINT, user STRING, amount DOUBLE, country STRING, ts_ms BIGINT"


def generate_typed(url: str, records: int, partitions: int, chunk: int = 100_000) -> None:
    """Topics ``typed`` (struct values) and ``json`` (the same values as JSON bytes)."""
    root = open_root(url)
    root.create_topic("typed", partitions, config={"retention.ms": -1}, value_type=TYPED)
    root.create_topic("json", partitions, config={"retention.ms": -1})
    rng = np.random.default_rng(7)
    countries = np.array(["DE", "FR", "US", "JP", "BR"])
    written = 0
    chunk_no = 0
    while written < records:
        n = min(chunk, records - written)
        ids = np.arange(written, written + n, dtype=np.int64)
        users = [f"user-{i % 9973}" for i in ids]
        amounts = np.round(rng.random(n) * 1000, 2)
        country = countries[ids % len(countries)]
        ts = ids + 1_700_000_000_000
        struct = pa.StructArray.from_arrays(
            [pa.array(ids), pa.array(users), pa.array(amounts), pa.array(country), pa.array(ts)],
            fields=list(TYPED),
        )
        stamps = pa.array(ts).cast(pa.timestamp("ms", tz="UTC"))
        headers = pa.nulls(n, record_schema(None).field("headers").type)
        keys = pa.nulls(n, pa.binary())
        p = chunk_no % partitions
        typed_schema = record_schema(TYPED)
        root.topic("typed").append(
            p, pa.RecordBatch.from_arrays([keys, struct, stamps, headers], schema=typed_schema)
        )
        docs = [
            json.dumps(
                {"id": int(i), "user": u, "amount": float(a), "country": str(c), "ts_ms": int(t)}
            ).encode()
            for i, u, a, c, t in zip(ids, users, amounts, country, ts, strict=True)
        ]
        root.topic("json").append(
            p,
            pa.RecordBatch.from_arrays(
                [keys, pa.array(docs, pa.binary()), stamps, headers], schema=record_schema(None)
            ),
        )
        written += n
        chunk_no += 1


def per_batch_work_ms(work: Path, records: int = 40, batches: int = 30) -> dict[str, float]:
    """Median ms of sparklog's own calls in one micro-batch of ``records``, in-process.

    The calls Spark makes on the driver (latestOffset, partitions, the sink's
    commit) and on executors (a read task, a write task), without Spark: what
    sparklog adds to each micro-batch.
    """
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from sparklog.spark.options import parse_sink_options, parse_source_options
    from sparklog.spark.read import read_task
    from sparklog.spark.schema import arrow_schema, source_schema
    from sparklog.spark.sink import _TaskWriter, commit_segments
    from sparklog.spark.stream import SparklogStreamReader
    from sparklog.storage import make_batch

    url = f"file://{work}/pieces-{uuid.uuid4().hex[:6]}"
    root = open_root(url)
    root.create_topic("a", 1)
    root.create_topic("b", 1)
    sink = parse_sink_options({"root": url, "topic": "b"})
    source = parse_source_options({"root": url, "subscribe": "a"}, streaming=True)
    reader = SparklogStreamReader(source, source_schema(None, False))
    target = arrow_schema(source_schema(None, False))
    start = reader.initialOffset()
    laps: dict[str, list[float]] = {}
    for batch_id in range(batches):
        root.topic("a").produce({0: make_batch([b"x" * 100] * records)})
        marks = [time.perf_counter()]
        end = reader.latestOffset(start, ReadAllAvailable())
        marks.append(time.perf_counter())
        tasks = reader.partitions(start, end)
        marks.append(time.perf_counter())
        rows = [b for task in tasks for b in read_task(task, target)]
        marks.append(time.perf_counter())
        writer = _TaskWriter(sink, 0)
        for b in rows:
            writer.add(
                pa.RecordBatch.from_arrays([b.column("key"), b.column("value")], ["key", "value"])
            )
        message = writer.finish()
        marks.append(time.perf_counter())
        commit_segments(sink, [message], txn=("bench", batch_id))
        marks.append(time.perf_counter())
        start = end
        names = ("latestOffset", "partitions", "read task", "write task", "sink commit")
        for name, a, b in zip(names, marks, marks[1:], strict=False):
            laps.setdefault(name, []).append((b - a) * 1000)
    return {name: float(np.median(v)) for name, v in laps.items()}
