"""Kafka's other tools: delete-records, dump-log, ``perf produce`` / ``perf consume``.

``delete-records`` (kafka-delete-records) moves a partition's log start offset
forward; ``dump-log`` (kafka-dump-log) lists a partition's committed segments
with the object and byte range each lives in and the offsets it covers (and,
with --print-data, the records).  Both work on a storage root address.

Like kafka-producer-perf-test: records of ``--record-size`` bytes, an optional
``--throughput`` cap (records/s), and the send-to-acknowledgement latency
percentiles.  Like kafka-consumer-perf-test: read ``--messages`` records and
report MB/s, records/s and the poll latency percentiles.
"""

from __future__ import annotations

import os
import time
from types import SimpleNamespace
from typing import Any

import typer

from sparklog.cli.output import print_json, stdout
from sparklog.cli.state import state
from sparklog.errors import InvalidConfigurationError

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
        raise InvalidConfigurationError(
            f"--num-records {num_records} / --record-size {record_size} not accepted; "
            "accepted: >= 1 / >= 0"
        )
    if throughput == 0 or throughput < -1:
        raise InvalidConfigurationError(
            f"--throughput {throughput:g} not accepted; accepted: > 0, or -1"
        )
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
        raise InvalidConfigurationError(f"--messages {messages} not accepted; accepted: >= 1")
    from sparklog.cli.lines import text_of
    from sparklog.cli.records import flatten
    from sparklog.client.consumer import Consumer
    from sparklog.client.types import TopicPartition

    consumer = Consumer(address=st.address, **st.client_config())
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


def _root(st: Any, what: str) -> Any:
    """The storage root of a root address (read-only open); refused for a broker address."""
    from sparklog.client.address import parse_address
    from sparklog.storage import open_root
    from sparklog.storage_options import merge_options, storage_options_from_env

    parsed = parse_address(st.address)
    if parsed.root is None:
        raise InvalidConfigurationError(
            f"{what} reads the storage root directly; accepted: a storage root address "
            "(the one the brokers serve), not host:port"
        )
    options = merge_options(storage_options_from_env(), st.storage_options)
    return open_root(parsed.root, options, create=False)


def _partitions(topic: Any, partition: int | None) -> list[int]:
    if partition is None:
        return list(range(topic.partitions))
    topic.partition(partition)  # unknown partition: a clear error
    return [partition]


def read_offset_json(path: str) -> dict[str, dict[int, int]]:
    """kafka-delete-records' ``--offset-json-file``: per topic, partition -> offset.

    The file is Kafka's ``{"partitions": [{"topic": T, "partition": P, "offset": O}, ...],
    "version": 1}``; InvalidConfigurationError names the file and the entry not accepted.
    """
    import json

    accepted = (
        'accepted: {"partitions": [{"topic": "T", "partition": 0, "offset": 10}], "version": 1}'
    )
    try:
        with open(path, encoding="utf-8") as handle:
            doc = json.load(handle)
    except OSError as exc:
        raise InvalidConfigurationError(
            f"--offset-json-file {path!r} cannot be read ({exc.strerror})"
        ) from None
    except ValueError as exc:
        raise InvalidConfigurationError(
            f"--offset-json-file {path!r} is not JSON ({exc}); {accepted}"
        ) from None
    entries = doc.get("partitions") if isinstance(doc, dict) else None
    if not isinstance(entries, list) or not entries:
        raise InvalidConfigurationError(
            f'--offset-json-file {path!r} has no "partitions" list; {accepted}'
        )
    out: dict[str, dict[int, int]] = {}
    for entry in entries:
        ok = (
            isinstance(entry, dict)
            and isinstance(entry.get("topic"), str)
            and isinstance(entry.get("partition"), int)
            and isinstance(entry.get("offset"), int)
        )
        if not ok:
            raise InvalidConfigurationError(
                f"--offset-json-file {path!r} entry {json.dumps(entry)} is not accepted; {accepted}"
            )
        out.setdefault(entry["topic"], {})[entry["partition"]] = entry["offset"]
    return out


def delete_records(
    ctx: typer.Context,
    topic: str | None = typer.Argument(None, metavar="TOPIC", help="Topic"),
    before: int | None = typer.Option(
        None, "--offset", metavar="N", help="Delete the records before offset N (-1: all)"
    ),
    partition: int | None = typer.Option(
        None, "--partition", "-p", metavar="N", help="Only this partition (default: every one)"
    ),
    offset_json_file: str | None = typer.Option(
        None,
        "--offset-json-file",
        metavar="FILE",
        help='Kafka\'s form instead of TOPIC --offset: {"partitions": [{"topic": T, '
        '"partition": P, "offset": O}], "version": 1}',
    ),
) -> None:
    """Delete the records before an offset. The log start moves up (kafka-delete-records).

    Name TOPIC and --offset (and --partition), or give kafka-delete-records'
    --offset-json-file. Whole segments below the new log start are removed; a
    segment that straddles it stays, its earlier records hidden from readers.
    """
    if offset_json_file is not None:
        if topic is not None or before is not None or partition is not None:
            raise InvalidConfigurationError(
                "--offset-json-file names its topics, partitions and offsets; accepted: it "
                "alone, or TOPIC --offset N [--partition N]"
            )
        plan = read_offset_json(offset_json_file)
    elif topic is None or before is None:
        raise InvalidConfigurationError(
            "name what to delete; accepted: TOPIC --offset N [--partition N], or "
            "--offset-json-file FILE"
        )
    else:
        plan = {topic: {-1 if partition is None else partition: before}}
    st = state(ctx)
    rows: list[dict[str, Any]] = []
    with st.admin() as admin:
        for name, offsets in plan.items():
            rows += _delete_topic_records(st, admin, name, offsets)
    if st.json:
        if offset_json_file is None:
            print_json({"topic": topic, "partitions": rows})
        else:
            print_json({"partitions": rows})
    else:
        for row in rows:
            stdout.print(
                f"{row['topic']} partition {row['partition']}: log start offset "
                f"{row['log_start_offset']}",
                highlight=False,
            )


def _delete_topic_records(
    st: Any, admin: Any, topic: str, offsets: dict[int, int]
) -> list[dict[str, Any]]:
    """Move the log start of ``topic``'s partitions up (``offsets``: partition -> offset;
    partition -1 means every one); the new log starts, as output rows."""
    described = admin.describe_topic(topic, sizes=False)
    known = {p.partition: p for p in described.partitions}
    wanted = {p: offsets[-1] for p in known} if -1 in offsets else offsets
    for p in sorted(wanted):
        if p not in known:
            raise InvalidConfigurationError(
                f"--partition {p} is not accepted for topic {topic!r}; accepted: 0-{len(known) - 1}"
            )
    chosen = [known[p] for p in sorted(wanted)]
    for part in chosen:
        before = wanted[part.partition]
        if before < -1 or before > part.high_watermark:
            raise InvalidConfigurationError(
                f"--offset {before} is not accepted for {topic} partition {part.partition}; "
                f"accepted: 0-{part.high_watermark} (the high watermark), or -1 for all"
            )
    if hasattr(admin, "delete_records"):  # Kafka's DeleteRecords, in both modes
        from sparklog.client.types import TopicPartition

        starts = admin.delete_records(
            {TopicPartition(topic, part.partition): wanted[part.partition] for part in chosen}
        )
        new_starts = {tp.partition: start for tp, start in starts.items()}
    else:
        new_starts = {}
        for part in chosen:
            new_starts.update(_delete_records_on_root(st, topic, [part], wanted[part.partition]))
    return [
        {"topic": topic, "partition": p, "log_start_offset": start}
        for p, start in sorted(new_starts.items())
    ]


def _delete_records_on_root(st: Any, topic: str, chosen: list[Any], before: int) -> dict[int, int]:
    """Move the log start of each partition up to ``before`` (-1: the high watermark)."""
    handle = _root(st, "delete-records").topic(topic)
    out = {}
    for part in chosen:
        log = handle.partition(part.partition)
        target = log.refresh().high_watermark if before == -1 else before

        def build(state: Any, target: int = target) -> Any:
            if target <= state.log_start_offset:
                return None
            gone = [s.base_offset for s in state.segments.all() if s.end_offset <= target]
            return gone, [], target

        log.replace_segments(build, "delete-records")
        out[part.partition] = log.refresh().log_start_offset
    return out


def dump_log(
    ctx: typer.Context,
    topic: str = typer.Argument(..., metavar="TOPIC", help="Topic"),
    partition: int | None = typer.Option(
        None, "--partition", "-p", metavar="N", help="Only this partition (default: every one)"
    ),
    object_key: str | None = typer.Option(
        None, "--object", metavar="KEY", help="Only segments stored in this object"
    ),
    print_data: bool = typer.Option(
        False,
        "--print-data",
        "--print-data-log",
        help="Also print each record with its offset (--print-data-log: kafka-dump-log's name)",
    ),
) -> None:
    """List a partition's segments. Objects, byte ranges and offsets (kafka-dump-log)."""
    from sparklog.cli.lines import record_doc
    from sparklog.cli.output import print_table

    st = state(ctx)
    handle = _root(st, "dump-log").topic(topic)
    segments = []
    for p in _partitions(handle, partition):
        log = handle.partition(p)
        log_state = log.refresh()
        for seg in log.segments():
            if object_key is not None and not seg.object_key.endswith(object_key):
                continue
            doc: dict[str, Any] = {
                "topic": topic,
                "partition": p,
                "base_offset": seg.base_offset,
                "last_offset": seg.end_offset - 1,
                "records": seg.record_count,
                "object": seg.object_key,
                "byte_start": seg.byte_start,
                "byte_end": seg.byte_end,
                "min_timestamp_ms": seg.min_timestamp_ms,
                "max_timestamp_ms": seg.max_timestamp_ms,
            }
            if print_data:
                start = max(seg.base_offset, log_state.log_start_offset)
                table = log.read(start, seg.end_offset) if start < seg.end_offset else None
                rows = table.to_pylist() if table is not None else []
                doc["data"] = [
                    record_doc(
                        SimpleNamespace(
                            topic=topic,
                            partition=p,
                            offset=r["offset"],
                            timestamp_ms=r["timestamp"]
                            if isinstance(r["timestamp"], int)
                            else int(r["timestamp"].timestamp() * 1000),
                            key=r.get("key"),
                            value=r.get("value"),
                            headers=[(h["key"], h["value"]) for h in r.get("headers") or []],
                        )
                    )
                    for r in rows
                ]
            segments.append(doc)
    if st.json:
        print_json({"topic": topic, "segments": segments})
        return
    print_table(
        f"{topic} segments",
        ["partition", "base offset", "last offset", "records", "object", "bytes"],
        [
            (
                d["partition"],
                d["base_offset"],
                d["last_offset"],
                d["records"],
                d["object"],
                f"{d['byte_start']}-{d['byte_end']}",
            )
            for d in segments
        ],
    )
    for d in segments:
        for r in d.get("data", []):
            stdout.print(
                f"| offset: {r['offset']} partition: {r['partition']} CreateTime: "
                f"{r['timestamp_ms']} key: {r['key']} payload: {r['value']}",
                highlight=False,
            )


def register(app: typer.Typer, perf_app: typer.Typer) -> None:
    """Add delete-records and dump-log to ``app``, produce/consume to ``perf_app``."""
    app.command("delete-records")(delete_records)
    app.command("dump-log")(dump_log)
    perf_app.command("produce")(perf_produce)
    perf_app.command("consume")(perf_consume)
