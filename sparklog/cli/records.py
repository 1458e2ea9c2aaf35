"""``sparklog produce`` and ``sparklog consume``: the console producer and consumer."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from typing import IO, Annotated

import typer
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

from sparklog.cli.output import decode_bytes, iso_ms, print_json, stderr, stdout
from sparklog.cli.parse import parse_pairs, parse_time_ms
from sparklog.cli.state import state
from sparklog.client.consumer import Consumer
from sparklog.client.producer import Producer
from sparklog.client.types import ConsumerRecord, TopicPartition
from sparklog.errors import ConfigError

FORMATS = ("value", "key-value", "json")


def _lines(stream: IO[bytes]) -> Iterator[tuple[bytes, int]]:
    for raw in stream:
        yield raw.rstrip(b"\r\n"), len(raw)


def produce(
    ctx: typer.Context,
    topic: str = typer.Argument(..., help="Topic to write to"),
    file: str | None = typer.Option(None, "--file", "-f", help="Read lines from this file"),
    key_separator: str | None = typer.Option(
        None, "--key-separator", help="Split each line into key SEP value at the first SEP"
    ),
    header: Annotated[
        list[str] | None, typer.Option("--header", help="k=v header for every record")
    ] = None,
    partition: int | None = typer.Option(None, "--partition", help="Write to this partition"),
    linger_ms: int = typer.Option(20, "--linger-ms", help="Producer linger.ms"),
    compression: str | None = typer.Option(
        None, "--compression", help="none, lz4 or zstd (default: the broker's setting, or none)"
    ),
) -> None:
    """Write one record per input line (stdin, or --file with a progress bar)."""
    st = state(ctx)
    headers = [(k, v.encode()) for k, v in parse_pairs(header or [], "--header").items()]
    sep = key_separator.encode() if key_separator else None
    if sep is not None and not sep:
        raise ConfigError("--key-separator must not be empty")
    if file is not None and not os.path.isfile(file):
        raise ConfigError(f"--file {file!r} does not exist or is not a file")
    stream: IO[bytes] = open(file, "rb") if file else sys.stdin.buffer  # noqa: SIM115
    counts: dict[int, int] = {}
    futures = []
    progress = None
    try:
        with Producer(
            st.address, linger_ms=linger_ms, compression=compression, **st.client_config()
        ) as producer:
            show_progress = sys.stderr.isatty() or os.environ.get("SPARKLOG_PROGRESS") == "1"
            if file and show_progress:
                progress = Progress(
                    TextColumn("[bold]producing"),
                    BarColumn(),
                    DownloadColumn(),
                    TransferSpeedColumn(),
                    console=stderr,
                )
                progress.start()
            task = (
                progress.add_task("produce", total=os.path.getsize(file))
                if progress and file
                else None
            )
            for number, (line, size) in enumerate(_lines(stream), start=1):
                key = None
                value = line
                if sep is not None:
                    key, found, value = line.partition(sep)
                    if not found:
                        raise ConfigError(
                            f"line {number} has no key separator {key_separator!r}; accepted: "
                            "KEY<SEP>VALUE on every line"
                        )
                futures.append(
                    producer.send(
                        topic, value, key=key, headers=headers or None, partition=partition
                    )
                )
                if progress is not None and task is not None:
                    progress.advance(task, size)
            producer.flush()
            for future in futures:
                meta = future.get()
                counts[meta.partition] = counts.get(meta.partition, 0) + 1
    finally:
        if progress is not None:
            progress.stop()
        if file:
            stream.close()
    total = sum(counts.values())
    if st.json:
        print_json({"topic": topic, "records": total, "partitions": counts})
    else:
        stdout.print(f"produced {total} records to {topic} ({len(counts)} partitions)")


def _render(record: ConsumerRecord, fmt: str, separator: str) -> bytes:
    if fmt == "json":
        doc = {
            "topic": record.topic,
            "partition": record.partition,
            "offset": record.offset,
            "timestamp_ms": record.timestamp_ms,
            "timestamp": iso_ms(record.timestamp_ms),
            "key": decode_bytes(record.key),
            "value": decode_bytes(record.value)
            if isinstance(record.value, bytes | None)
            else record.value,
            "headers": [[k, decode_bytes(v)] for k, v in record.headers],
        }
        return json.dumps(doc, default=str).encode()
    value = (
        record.value
        if isinstance(record.value, bytes)
        else b""
        if record.value is None
        else json.dumps(record.value, default=str).encode()
    )
    if fmt == "key-value":
        return (record.key or b"") + separator.encode() + value
    return value


def consume(
    ctx: typer.Context,
    topic: str = typer.Argument(..., help="Topic to read"),
    from_beginning: bool = typer.Option(False, "--from-beginning", help="Start at the log start"),
    partition: int | None = typer.Option(None, "--partition", help="Read only this partition"),
    offset: str | None = typer.Option(
        None, "--offset", help="With --partition: an offset, earliest or latest"
    ),
    from_time: str | None = typer.Option(None, "--from-time", help="Start at this ISO 8601 time"),
    group: str | None = typer.Option(None, "--group", help="Join this consumer group"),
    max_messages: int | None = typer.Option(None, "--max-messages", help="Stop after N records"),
    timeout_ms: int | None = typer.Option(None, "--timeout-ms", help="Stop after T ms idle"),
    fmt: str = typer.Option("value", "--format", help="value, key-value or json"),
    separator: str = typer.Option("\t", "--separator", help="Key/value separator of key-value"),
) -> None:
    """Print records as they arrive; follows the topic until interrupted (or idle/limit)."""
    st = state(ctx)
    if fmt not in FORMATS:
        raise ConfigError(f"--format {fmt!r} is not accepted; accepted: {', '.join(FORMATS)}")
    if offset is not None and partition is None:
        raise ConfigError("--offset needs --partition")
    if group is not None and (partition is not None or from_time is not None):
        raise ConfigError("--group cannot be combined with --partition or --from-time")
    if max_messages is not None and max_messages < 1:
        raise ConfigError(f"--max-messages {max_messages} is not accepted; accepted: >= 1")
    start_ms = parse_time_ms(from_time) if from_time is not None else None
    reset = "earliest" if from_beginning else "latest"
    consumer = Consumer(st.address, group_id=group, auto_offset_reset=reset, **st.client_config())
    out = sys.stdout.buffer
    seen = 0
    try:
        count = len(consumer.partitions_for_topic(topic))  # unknown topic: a clear error now
        if group is not None:
            consumer.subscribe([topic])
        else:
            if partition is not None and not 0 <= partition < count:
                raise ConfigError(
                    f"--partition {partition} is not accepted for topic {topic!r}; accepted: "
                    f"0-{count - 1}"
                )
            tps = [TopicPartition(topic, p) for p in range(count) if partition in (None, p)]
            consumer.assign(tps)
            _position(consumer, tps, offset, start_ms, from_beginning)
        idle_since = time.monotonic()
        while max_messages is None or seen < max_messages:
            left = None if max_messages is None else max_messages - seen
            records = consumer.poll_records(timeout_ms=200, max_records=min(left or 500, 500))
            if not records:
                if timeout_ms is not None and (time.monotonic() - idle_since) * 1000 >= timeout_ms:
                    break
                continue
            idle_since = time.monotonic()
            for record in records:
                out.write(_render(record, fmt, separator) + b"\n")
            out.flush()
            seen += len(records)
    except KeyboardInterrupt:
        pass
    finally:
        consumer.close()
    if not st.json:
        stderr.print(f"consumed {seen} records", style="dim")


def _position(
    consumer: Consumer,
    tps: list[TopicPartition],
    offset: str | None,
    start_ms: int | None,
    from_beginning: bool,
) -> None:
    if offset is not None:
        text = offset.strip().lower()
        if text == "earliest":
            consumer.seek_to_beginning(*tps)
        elif text == "latest":
            consumer.seek_to_end(*tps)
        elif text.isdigit():
            for tp in tps:
                consumer.seek(tp, int(text))
        else:
            raise ConfigError(
                f"--offset {offset!r} is not accepted; accepted: N >= 0, earliest, latest"
            )
    elif start_ms is not None:
        found = consumer.offsets_for_times({tp: start_ms for tp in tps})
        for tp, at in found.items():
            if at is None:
                consumer.seek_to_end(tp)
            else:
                consumer.seek(tp, at.offset)
    elif from_beginning:
        consumer.seek_to_beginning(*tps)
    else:
        consumer.seek_to_end(*tps)
