"""``sparklog produce`` and ``sparklog consume``: the console producer and consumer.

Client modules are imported inside the commands so that ``--help`` and the
metadata commands do not pay for them.
"""

from __future__ import annotations

import os
import re
import sys
import time
from collections.abc import Iterable, Iterator
from typing import IO, TYPE_CHECKING, Annotated, Any

import typer

from sparklog.cli.lines import (
    LineFormat,
    kafka_formatter,
    kcat_format,
    line_format_from,
    record_doc,
)
from sparklog.cli.output import (
    CommandInterrupted,
    PartlyDoneError,
    plural,
    print_json,
    quiet_exit,
    say,
    stderr,
    warn,
)
from sparklog.cli.parse import parse_pairs, parse_time_ms
from sparklog.cli.state import state
from sparklog.errors import InvalidConfigurationError, SparklogError

if TYPE_CHECKING:
    from sparklog.client.consumer import Consumer
    from sparklog.client.types import TopicPartition

FORMATS = ("value", "key-value", "json")


def _lines(stream: IO[bytes]) -> Iterator[tuple[bytes, int]]:
    for raw in stream:
        yield raw.rstrip(b"\r\n"), len(raw)


def produce(
    ctx: typer.Context,
    topic: str = typer.Argument(..., metavar="TOPIC", help="Topic to write to"),
    file: str | None = typer.Option(
        None, "--file", "-f", metavar="PATH", help="Read lines from this file (checked first)"
    ),
    key_separator: str | None = typer.Option(
        None,
        "--key-separator",
        "-K",
        metavar="SEP",
        help="Split each line into key SEP value at the first SEP",
    ),
    parse_headers: bool = typer.Option(
        False,
        "--parse-headers",
        help="Lines start with headers: h1:v1,h2:v2<TAB>[key<SEP>]value (KIP-798)",
    ),
    null_marker: str | None = typer.Option(
        None, "--null-marker", metavar="TEXT", help="A key/value equal to TEXT is null (KIP-810)"
    ),
    empty_is_null: bool = typer.Option(
        False,
        "--null-empty",
        "-Z",
        help="Empty key or value is null: an empty value is a tombstone",
    ),
    header: Annotated[
        list[str] | None,
        typer.Option("--header", "-H", metavar="K=V", help="A header for every record"),
    ] = None,
    properties: Annotated[
        list[str] | None,
        typer.Option(
            "--property",
            metavar="K=V",
            help="Kafka console-producer property: parse.key, key.separator, parse.headers, "
            "headers.delimiter, headers.separator, headers.key.separator, null.marker",
        ),
    ] = None,
    partition: int | None = typer.Option(
        None, "--partition", "-p", metavar="N", help="Write to this partition"
    ),
    linger_ms: int = typer.Option(20, "--linger-ms", metavar="MS", help="Producer linger.ms"),
    compression: str | None = typer.Option(
        None,
        "--compression",
        metavar="CODEC",
        help="none, lz4 or zstd (default: the broker's setting, or none)",
    ),
) -> None:
    """Write one record per input line. From stdin, or --file (with a progress bar).

    With --file every line is checked before anything is written (a malformed
    line writes nothing).  From stdin a malformed line stops the command, and the
    error says how many records before it were written.  Not all-or-nothing: if
    a write fails, or on Ctrl-C (exit 130), the error says how many records were
    written to each partition and the first line not written.
    """
    st = state(ctx)
    headers = list(parse_pairs(header or [], "--header").items())
    fixed_headers: list[tuple[str, bytes | None]] = [(k, v.encode()) for k, v in headers]
    line_format = line_format_from(
        parse_pairs(properties or [], "--property"),
        key_separator=key_separator,
        parse_headers=parse_headers,
        null_marker=null_marker,
        empty_is_null=empty_is_null,
    )
    if file is not None and not os.path.isfile(file):
        raise InvalidConfigurationError(f"--file {file!r} does not exist or is not a file")
    if file is not None:
        with open(file, "rb") as checked:  # validate first: a bad line writes nothing
            for number, (line, _) in enumerate(_lines(checked), start=1):
                line_format.parse(line, number)
    from sparklog.client.producer import Producer

    stream: IO[bytes] = open(file, "rb") if file else sys.stdin.buffer  # noqa: SIM115
    counts: dict[int, int] = {}
    progress = None
    try:
        with Producer(
            st.address, linger_ms=linger_ms, compression=compression, **st.client_config()
        ) as producer:
            show_progress = sys.stderr.isatty() or os.environ.get("SPARKLOG_PROGRESS") == "1"
            if file and show_progress:
                progress = _progress(os.path.getsize(file))
            futures: list[Any] = []
            try:
                for number, (line, size) in enumerate(_lines(stream), start=1):
                    parsed_headers, key, value = line_format.parse(line, number)
                    futures.append(
                        producer.send(
                            topic,
                            value,
                            key=key,
                            headers=(fixed_headers + parsed_headers) or None,
                            partition=partition,
                        )
                    )
                    if progress is not None:
                        progress.advance(progress.task_ids[0], size)
                producer.flush()  # inside: a Ctrl-C while reading may surface only here
            except InvalidConfigurationError as exc:
                producer.flush()
                written, _ = _tally(futures, counts)
                raise InvalidConfigurationError(
                    f"{exc}; the {written} records before it were written "
                    f"({_partition_summary(counts)}), nothing after it"
                ) from None
            except SparklogError as exc:  # the producer refused a record (e.g. too large)
                producer.flush()
                written, failure = _tally(futures, counts)
                raise PartlyDoneError(
                    f"line {len(futures) + 1}: {exc}{_create_hint(exc, topic)}; "
                    f"{_written_report(written, len(futures), counts, failure)}; "
                    "nothing after it was sent"
                ) from exc
            except KeyboardInterrupt:
                # what was handed to the producer is written; the user must learn how much
                producer.flush()
                written, failure = _tally(futures, counts)
                raise CommandInterrupted(
                    f"interrupted: {_written_report(written, len(futures), counts, failure)}; "
                    f"lines after {len(futures)} were not sent"
                ) from None
            written, failure = _tally(futures, counts)
            if failure is not None:
                error = failure[1]
                raise PartlyDoneError(
                    f"{type(error).__name__}: {error}{_create_hint(error, topic)}; "
                    f"{_written_report(written, len(futures), counts, failure)}"
                ) from error
    finally:
        if progress is not None:
            progress.stop()
        if file:
            stream.close()
    total = sum(counts.values())
    if st.json:
        print_json(
            {
                "topic": topic,
                "records": total,
                "partitions": [{"partition": p, "records": n} for p, n in sorted(counts.items())],
            }
        )
    else:
        say(f"produced {plural(total, 'record')} to {topic} ({plural(len(counts), 'partition')})")


def _create_hint(error: BaseException, topic: str) -> str:
    """For a topic that does not exist, the command that creates it (producing never does)."""
    from sparklog.errors import UnknownTopicOrPartitionError

    if isinstance(error, UnknownTopicOrPartitionError) and "partition" not in str(error):
        return f" (create it first: sparklog topics create {topic} --partitions N)"
    return ""


def _progress(total_bytes: int) -> Any:
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TransferSpeedColumn,
    )

    progress = Progress(
        TextColumn("[bold]producing"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        console=stderr.console,
    )
    progress.start()
    progress.add_task("produce", total=total_bytes)
    return progress


def _tally(
    futures: list[Any], counts: dict[int, int]
) -> tuple[int, tuple[int, BaseException] | None]:
    """Records written (counted per partition into ``counts``), and the first failure:
    (its line number, its error), or None."""
    written = 0
    failure: tuple[int, BaseException] | None = None
    for line_number, future in enumerate(futures, start=1):
        error = future.exception()
        if error is not None:
            failure = failure or (line_number, error)
            continue
        meta = future.get()
        counts[meta.partition] = counts.get(meta.partition, 0) + 1
        written += 1
    return written, failure


def _written_report(
    written: int,
    sent: int,
    counts: dict[int, int],
    failure: tuple[int, BaseException] | None,
) -> str:
    """'N of M records were written (per partition)[, the first not written: line L]'."""
    text = f"{written} of {sent} records were written ({_partition_summary(counts)})"
    if failure is not None:
        text += f"; the first not written is line {failure[0]}"
    return text


def _partition_summary(counts: dict[int, int]) -> str:
    if not counts:
        return "none"
    return ", ".join(f"partition {p}: {n}" for p, n in sorted(counts.items()))


def _renderer(
    fmt: str, separator: str, format_string: str | None, properties: dict[str, str], as_json: bool
) -> Any:
    """record -> bytes (with its line end) for the chosen output."""
    import json

    if format_string is not None:
        if properties:
            raise InvalidConfigurationError(
                "--format-string cannot be combined with --property print.*"
            )
        return kcat_format(format_string)
    if properties:
        return kafka_formatter(properties)
    if as_json or fmt == "json":
        return lambda record: json.dumps(record_doc(record), default=str).encode() + b"\n"
    if fmt == "key-value":
        return kafka_formatter({"print.key": "true", "key.separator": separator})
    return kafka_formatter({})


def flatten(polled: Any) -> list[Any]:
    """Records of a poll: a list, or kafka-python's {TopicPartition: [records]}."""
    if isinstance(polled, dict):
        return [record for records in polled.values() for record in records]
    return list(polled)


def consume(
    ctx: typer.Context,
    topics: Annotated[
        list[str] | None,
        typer.Argument(metavar="TOPIC", help="Topics to read (several allowed)"),
    ] = None,
    include: str | None = typer.Option(
        None, "--include", metavar="REGEX", help="Read every topic whose name matches REGEX"
    ),
    from_beginning: bool = typer.Option(False, "--from-beginning", help="Start at the log start"),
    partition: int | None = typer.Option(
        None, "--partition", "-p", metavar="N", help="Read only this partition"
    ),
    offset: str | None = typer.Option(
        None, "--offset", metavar="OFFSET", help="With --partition: an offset, earliest or latest"
    ),
    from_time: str | None = typer.Option(
        None, "--from-time", metavar="TIME", help="Start at this ISO 8601 time"
    ),
    group: str | None = typer.Option(
        None, "--group", "-g", metavar="GROUP", help="Join this consumer group"
    ),
    max_messages: int | None = typer.Option(
        None, "--max-messages", "-c", metavar="N", help="Stop after N records"
    ),
    timeout_ms: int | None = typer.Option(
        None, "--timeout-ms", metavar="MS", help="Stop after MS ms without records"
    ),
    exit_at_end: bool = typer.Option(
        False,
        "--exit-at-end",
        "-e",
        help="Stop when every partition is read to the end it had at start (kcat -e); "
        "read_committed: or to its last stable offset (an open transaction holds it)",
    ),
    fmt: str = typer.Option("value", "--format", metavar="FORMAT", help="value, key-value or json"),
    format_string: str | None = typer.Option(
        None,
        "--format-string",
        "-f",
        metavar="FMT",
        help="kcat format: %t topic %p partition %o offset %k key %s value %T timestamp "
        "%h headers %K/%S key/value length",
    ),
    properties: Annotated[
        list[str] | None,
        typer.Option(
            "--property",
            metavar="K=V",
            help="Kafka formatter property: print.timestamp/partition/offset/headers/key/"
            "value=true|false, key.separator, line.separator, null.literal",
        ),
    ] = None,
    separator: str = typer.Option(
        "\t",
        "--separator",
        metavar="SEP",
        help="Key/value separator of key-value",
        show_default="tab",
    ),
    isolation_level: str = typer.Option(
        "read_uncommitted",
        "--isolation-level",
        metavar="LEVEL",
        help="read_committed: only committed transactions' records (Kafka's isolation.level)",
    ),
) -> None:
    """Print records as they arrive. Follows the topics until interrupted (or -e, idle, limit).

    --output json (or --format json) prints one JSON object per record.
    """
    st = state(ctx)
    names = list(topics or [])
    if not names and include is None:
        raise InvalidConfigurationError("name a topic (or several), or --include REGEX")
    if names and include is not None:
        raise InvalidConfigurationError("give topic names or --include REGEX, not both")
    if fmt not in FORMATS:
        raise InvalidConfigurationError(
            f"--format {fmt!r} is not accepted; accepted: {', '.join(FORMATS)}"
        )
    if offset is not None and partition is None:
        raise InvalidConfigurationError("--offset needs --partition")
    if partition is not None and len(names) != 1:
        raise InvalidConfigurationError("--partition needs exactly one topic")
    if group is not None and (partition is not None or from_time is not None):
        raise InvalidConfigurationError(
            "--group cannot be combined with --partition or --from-time"
        )
    if max_messages is not None and max_messages < 1:
        raise InvalidConfigurationError(
            f"--max-messages {max_messages} is not accepted; accepted: >= 1"
        )
    pattern = None
    if include is not None:
        try:
            pattern = re.compile(include)
        except re.error as exc:
            raise InvalidConfigurationError(
                f"--include {include!r} is not a regex: {exc}"
            ) from None
    render = _renderer(
        fmt, separator, format_string, parse_pairs(properties or [], "--property"), st.json
    )
    start_ms = parse_time_ms(from_time) if from_time is not None else None
    from sparklog.client.consumer import Consumer
    from sparklog.client.types import TopicPartition

    reset = "earliest" if from_beginning else "latest"
    level = isolation_level.replace("-", "_").lower()
    if level not in ("read_uncommitted", "read_committed"):
        raise InvalidConfigurationError(
            f"--isolation-level {isolation_level!r} is not accepted; accepted: "
            "read_uncommitted, read_committed"
        )
    consumer = Consumer(
        address=st.address,
        group_id=group,
        auto_offset_reset=reset,
        isolation_level=level,
        **st.client_config(),
    )
    out = sys.stdout.buffer
    seen = 0
    reader_left = False
    ends: dict[TopicPartition, int] = {}
    try:
        if pattern is not None:
            names = sorted(t for t in consumer.list_topics() if pattern.fullmatch(t))
            if not names:
                raise InvalidConfigurationError(f"no topic matches --include {include!r}")
        counts = {name: len(consumer.partitions_for_topic(name)) for name in names}
        if group is not None:
            consumer.subscribe(names)
        else:
            if partition is not None and not 0 <= partition < counts[names[0]]:
                raise InvalidConfigurationError(
                    f"--partition {partition} is not accepted for topic {names[0]!r}; accepted: "
                    f"0-{counts[names[0]] - 1}"
                )
            tps = [
                TopicPartition(name, p)
                for name, count in counts.items()
                for p in range(count)
                if partition in (None, p)
            ]
            consumer.assign(tps)
            _position(consumer, tps, offset, start_ms, from_beginning)
        idle_since = time.monotonic()
        while max_messages is None or seen < max_messages:
            if exit_at_end and _at_end(consumer, ends, level == "read_committed"):
                break
            left = None if max_messages is None else max_messages - seen
            records = consumer.poll_records(timeout_ms=200, max_records=min(left or 500, 500))
            if not records:
                if timeout_ms is not None and (time.monotonic() - idle_since) * 1000 >= timeout_ms:
                    break
                if reader_gone(out):  # `| head` exited while we wait for new records
                    reader_left = True
                    break
                continue
            idle_since = time.monotonic()
            try:
                out.write(b"".join(render(record) for record in records))
                out.flush()
            except BrokenPipeError:  # the reader (head, less) left: stop quietly
                reader_left = True
                break
            seen += len(records)
    except KeyboardInterrupt:
        pass
    finally:
        consumer.close()
    if reader_left:
        quiet_exit()
    if not st.json:
        stderr.print(f"consumed {plural(seen, 'record')}", style="dim")


def reader_gone(stream: Any) -> bool:
    """True when ``stream`` is a pipe whose reader closed it (``| head`` exited).

    A follower that is idle writes nothing, so it would learn of the closed pipe
    only from the next record; polling the pipe's write end reports the error
    at once (POLLERR), so it stops when its reader does, with nothing buffered.
    """
    import select
    import stat

    if not hasattr(select, "poll"):
        return False
    try:
        fd = stream.fileno()
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            return False
        poller = select.poll()
        poller.register(fd, 0)  # errors and hang-ups are always reported
        return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))
    except (OSError, ValueError):
        return False


def _at_end(consumer: Consumer, ends: dict[TopicPartition, int], read_committed: bool) -> bool:
    """True once every assigned partition's position reached its end offset at start, or,
    read_committed, the last stable offset its last fetch reported (kcat -e's end then): a
    transaction left open holds that below the end, and no read_committed reader passes it.
    """
    assigned = consumer.assignment()
    if not assigned:
        return False
    new = [tp for tp in assigned if tp not in ends]
    if new:
        ends.update(consumer.end_offsets(new))

    def done(tp: TopicPartition) -> bool:
        position = consumer.position(tp)
        if position >= ends[tp]:
            return True
        stable = consumer.highwater(tp) if read_committed else None
        return stable is not None and position >= stable

    return all(done(tp) for tp in assigned)


def _position(
    consumer: Consumer,
    tps: Iterable[TopicPartition],
    offset: str | None,
    start_ms: int | None,
    from_beginning: bool,
) -> None:
    tps = list(tps)
    if offset is not None:
        text = offset.strip().lower()
        if text == "earliest":
            consumer.seek_to_beginning(*tps)
        elif text == "latest":
            consumer.seek_to_end(*tps)
        elif text.isdigit():
            wanted = int(text)
            starts, ends = consumer.beginning_offsets(tps), consumer.end_offsets(tps)
            for tp in tps:
                at = min(max(wanted, starts[tp]), ends[tp])
                if at != wanted:
                    # Kafka's console consumer resets too; say so in one line, with the way out
                    warn(
                        f"--offset {wanted} is out of range for {tp.topic}-{tp.partition} "
                        f"(log start {starts[tp]}, end {ends[tp]}); reading from {at}; "
                        "--offset earliest reads from the log start"
                    )
                consumer.seek(tp, at)
        else:
            raise InvalidConfigurationError(
                f"--offset {offset!r} is not accepted; accepted: N >= 0, earliest, latest"
            )
    elif start_ms is not None:
        found = consumer.offsets_for_times({tp: start_ms for tp in tps})
        for tp, at_time in found.items():
            if at_time is None:
                consumer.seek_to_end(tp)
            else:
                consumer.seek(tp, at_time.offset)
    elif from_beginning:
        consumer.seek_to_beginning(*tps)
    else:
        consumer.seek_to_end(*tps)


__all__ = ["LineFormat", "consume", "flatten", "produce"]
