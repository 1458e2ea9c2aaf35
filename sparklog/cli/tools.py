"""Kafka's perf tools: ``sparklog perf produce`` / ``perf consume``.

Like kafka-producer-perf-test: records of ``--record-size`` bytes, an optional
``--throughput`` cap (records/s), and the send-to-acknowledgement latency
percentiles.  Like kafka-consumer-perf-test: read ``--messages`` records and
report MB/s, records/s and the poll latency percentiles.
"""

from __future__ import annotations

import os
import time
from typing import Any

import typer

from sparklog.cli.output import print_json, stdout
from sparklog.cli.state import state
from sparklog.errors import ConfigError

PERCENTILES = (50, 95, 99, 99.9)


def percentile(sorted_values: list[float], pct: float) -> float:
    """The nearest-rank percentile of already sorted values (0 when empty)."""
    if not sorted_values:
        return 0.0
    rank = max(0, min(len(sorted_values) - 1, round(pct / 100 * len(sorted_values)) - 1))
    return sorted_values[rank]


def _latency_doc(latencies_ms: list[float]) -> dict[str, float]:
    ordered = sorted(latencies_ms)
    doc = {
        "avg_ms": round(sum(ordered) / len(ordered), 3) if ordered else 0.0,
        "max_ms": round(ordered[-1], 3) if ordered else 0.0,
    }
    for pct in PERCENTILES:
        doc[f"p{pct:g}_ms"] = round(percentile(ordered, pct), 3)
    return doc


def _on_ack(latencies_ms: list[float], sent: float) -> Any:
    """A send's callback: record its send-to-acknowledgement latency."""

    def done(_future: Any) -> None:
        latencies_ms.append((time.perf_counter() - sent) * 1000)

    return done


def perf_produce(
    ctx: typer.Context,
    topic: str = typer.Argument(..., metavar="TOPIC", help="Topic to write to"),
    num_records: int = typer.Option(
        10_000, "--num-records", "-n", metavar="N", help="Records to send"
    ),
    record_size: int = typer.Option(
        100, "--record-size", "-s", metavar="BYTES", help="Value size of each record"
    ),
    throughput: float = typer.Option(
        -1, "--throughput", metavar="RECORDS/S", help="Cap on records per second (-1: none)"
    ),
    linger_ms: int = typer.Option(20, "--linger-ms", metavar="MS", help="Producer linger.ms"),
    compression: str = typer.Option(
        "none", "--compression", metavar="CODEC", help="none, lz4 or zstd"
    ),
) -> None:
    """Producer throughput and latency (kafka-producer-perf-test)."""
    st = state(ctx)
    if num_records < 1 or record_size < 0:
        raise ConfigError(
            f"--num-records {num_records} / --record-size {record_size} not accepted; "
            "accepted: >= 1 / >= 0"
        )
    if throughput == 0 or throughput < -1:
        raise ConfigError(f"--throughput {throughput:g} not accepted; accepted: > 0, or -1")
    from sparklog.client.producer import Producer

    payload = os.urandom(record_size)
    latencies_ms: list[float] = []
    start = time.perf_counter()
    with Producer(
        st.address, linger_ms=linger_ms, compression=compression, **st.client_config()
    ) as producer:
        futures: list[tuple[float, Any]] = []
        for index in range(num_records):
            if throughput > 0:
                due = start + index / throughput
                wait = due - time.perf_counter()
                if wait > 0:
                    time.sleep(wait)  # the throughput cap, as the Kafka tool throttles
            sent = time.perf_counter()
            future = producer.send(topic, payload)
            future.add_done_callback(_on_ack(latencies_ms, sent))
            futures.append((sent, future))
        producer.flush()
        for _, future in futures:
            future.get()
    elapsed_s = max(time.perf_counter() - start, 1e-9)
    doc = {
        "topic": topic,
        "records": num_records,
        "record_size": record_size,
        "records_per_s": round(num_records / elapsed_s, 1),
        "mb_per_s": round(num_records * record_size / elapsed_s / 1e6, 3),
        "elapsed_s": round(elapsed_s, 3),
        **_latency_doc(latencies_ms),
    }
    _report(doc, st.json)


def perf_consume(
    ctx: typer.Context,
    topic: str = typer.Argument(..., metavar="TOPIC", help="Topic to read from its start"),
    messages: int = typer.Option(
        10_000, "--messages", "-n", metavar="N", help="Records to read (stops early at the end)"
    ),
    max_poll_records: int = typer.Option(
        500, "--max-poll-records", metavar="N", help="Records per poll"
    ),
) -> None:
    """Consumer throughput and poll latency (kafka-consumer-perf-test)."""
    st = state(ctx)
    if messages < 1:
        raise ConfigError(f"--messages {messages} not accepted; accepted: >= 1")
    from sparklog.cli.lines import text_of
    from sparklog.cli.records import flatten
    from sparklog.client.consumer import Consumer
    from sparklog.client.types import TopicPartition

    consumer = Consumer(st.address, None, **st.client_config())
    latencies_ms: list[float] = []
    seen = size = 0
    start = time.perf_counter()
    try:
        tps = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        ends = consumer.end_offsets(tps)
        while seen < messages and any(consumer.position(tp) < ends[tp] for tp in tps):
            polled_at = time.perf_counter()
            records = flatten(
                consumer.poll(timeout_ms=500, max_records=min(max_poll_records, messages - seen))
            )
            latencies_ms.append((time.perf_counter() - polled_at) * 1000)
            seen += len(records)
            size += sum(len(text_of(r.value) or b"") + len(r.key or b"") for r in records)
    finally:
        consumer.close()
    elapsed_s = max(time.perf_counter() - start, 1e-9)
    doc = {
        "topic": topic,
        "records": seen,
        "bytes": size,
        "records_per_s": round(seen / elapsed_s, 1),
        "mb_per_s": round(size / elapsed_s / 1e6, 3),
        "elapsed_s": round(elapsed_s, 3),
        "polls": len(latencies_ms),
        **_latency_doc(latencies_ms),
    }
    _report(doc, st.json)


def _report(doc: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print_json(doc)
        return
    pct = ", ".join(f"{p:g}th {doc[f'p{p:g}_ms']} ms" for p in PERCENTILES)
    stdout.print(
        f"{doc['records']} records, {doc['records_per_s']} records/s ({doc['mb_per_s']} MB/s), "
        f"{doc['avg_ms']} ms avg latency, {doc['max_ms']} ms max latency, {pct}",
        highlight=False,
    )


def register(app: typer.Typer, perf_app: typer.Typer) -> None:
    """Add the perf commands to ``perf_app``."""
    perf_app.command("produce")(perf_produce)
    perf_app.command("consume")(perf_consume)
