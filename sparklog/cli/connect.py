"""``sparklog connect``: run connectors (delta-sink, postgres-source), list, stop them.

Connectors read and write the storage root directly (the global ``--address`` must
name a root, not a broker). Each records its definition (its settings, passwords
redacted), progress and status in the root (:mod:`sparklog.connect.state`), which
``list`` and ``status`` show and ``run NAME`` starts again; ``stop NAME`` records a
stop request there, which the running connector sees within a second. Settings are
checked before anything starts: a wrong host, an unknown table or topic, a bad
value format is one ``error:`` line.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Annotated, Any

import typer

from sparklog.cli.output import print_json, print_table, say
from sparklog.cli.state import state
from sparklog.errors import (
    ConnectorConfigError,
    ConnectorError,
    InvalidConfigurationError,
    SparklogError,
)

connect_app = typer.Typer(
    no_args_is_help=True,
    rich_markup_mode=None,
    help="Connectors: topic to Delta table, PostgreSQL to topics.",
)

DELTA_SINK, POSTGRES_SOURCE = "delta-sink", "postgres-source"
_METRICS_HELP = "Serve Prometheus /metrics (progress, lag)"
#: a storage option whose name has one of these is a secret: never stored in the root
_SECRET_WORDS = ("SECRET", "PASSWORD", "TOKEN", "ACCESS_KEY", "SESSION")


def _root(ctx: typer.Context, *, create: bool | None = None) -> Any:
    from sparklog.client.address import parse_address
    from sparklog.storage import open_root

    st = state(ctx)
    url = parse_address(st.address).root if st.address else None
    if not url:
        raise InvalidConfigurationError(
            "connectors read and write the storage root: give it as --address (a path, "
            "file://, s3://), not a broker's host:port"
        )
    return open_root(url, st.storage_options, create=create)


def _pairs(items: list[str] | None, flag: str) -> dict[str, str]:
    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise InvalidConfigurationError(f"{flag} {item!r} not accepted; accepted: KEY=VALUE")
        out[key] = value
    return out


def _metrics(listen: str) -> Any:
    if not listen:
        return None
    from sparklog.connect.metrics import ConnectorMetrics

    metrics = ConnectorMetrics()
    port = metrics.serve(listen)
    logging.getLogger("sparklog.connect").info("metrics on port %d", port)
    return metrics


def _supervised(root: Any, name: str, work: Callable[[threading.Event], str]) -> None:
    """Run ``work(stop)`` as the connector ``name``: status recorded, stop requests watched.

    ``work`` has validated its settings before calling here; it returns its summary line.
    """
    from sparklog.connect import state as connector_state

    stop = threading.Event()
    connector_state.mark_running(root, name)
    connector_state.watch_stop(root, name, stop)
    try:
        with contextlib.suppress(KeyboardInterrupt):
            summary = work(stop)
    except BaseException as exc:
        connector_state.mark_stopped(root, name, "failed", error=str(exc).splitlines()[0][:500])
        raise
    finally:
        stop.set()  # ends the watcher
    connector_state.mark_stopped(root, name)
    say(summary)


@connect_app.command(DELTA_SINK)
def delta_sink(
    ctx: typer.Context,
    topic: str = typer.Option(..., "--topic", metavar="TOPIC", help="Topic to land"),
    table: str = typer.Option(..., "--table", metavar="URI", help="Delta table (path, s3://)"),
    value_format: str = typer.Option(
        "auto",
        "--value-format",
        metavar="FMT",
        help="auto, typed, json or debezium (with --value-schema), raw",
    ),
    value_schema: str | None = typer.Option(
        None, "--value-schema", metavar="DDL", help="JSON values' schema: 'id INT, name STRING'"
    ),
    mode: str = typer.Option("append", "--mode", metavar="MODE", help="append, or upsert by key"),
    partition_by: Annotated[
        list[str] | None,
        typer.Option("--partition-by", metavar="COL", help="Partition column (repeatable)"),
    ] = None,
    checkpoint: str | None = typer.Option(
        None,
        "--checkpoint",
        metavar="DIR",
        help="Spark checkpoint (default: TABLE/_sparklog_checkpoint for a local table)",
    ),
    name: str | None = typer.Option(
        None, "--name", metavar="NAME", help="Connector name / txnAppId"
    ),
    table_option: Annotated[
        list[str] | None,
        typer.Option("--table-option", metavar="K=V", help="delta-rs storage option (repeatable)"),
    ] = None,
    max_offsets: int | None = typer.Option(
        None, "--max-offsets-per-trigger", metavar="N", min=1, help="Records per micro-batch"
    ),
    writer: str = typer.Option(
        "auto", "--writer", metavar="WRITER", help="auto, delta-rs, delta-spark (needs its jars)"
    ),
    once: bool = typer.Option(False, "--once", help="Land what is there, then stop"),
    metrics_listen: str = typer.Option(
        "", "--metrics-listen", metavar="HOST:PORT", help=_METRICS_HELP
    ),
    spark_log: str | None = typer.Option(
        None,
        "--spark-log",
        metavar="FILE",
        help="Spark's own log (default: sparklog-connect-NAME-spark.log in the temp folder)",
    ),
) -> None:
    """Land a topic in a Delta table, exactly-once."""
    settings = {
        "topic": topic,
        "table": table,
        "value_format": value_format,
        "value_schema": value_schema,
        "mode": mode,
        "partition_by": list(partition_by or ()),
        "checkpoint": checkpoint,
        "table_option": list(table_option or ()),
        "max_offsets_per_trigger": max_offsets,
        "writer": writer,
        "spark_log": spark_log,
    }
    _run_delta_sink(ctx, name or f"delta-{topic}", settings, once, metrics_listen)


def _run_delta_sink(
    ctx: typer.Context, name: str, settings: dict[str, Any], once: bool, metrics_listen: str
) -> None:
    from sparklog.connect import state as connector_state
    from sparklog.connect.sink_progress import SinkProgress
    from sparklog.spark.delta_sink import DeltaForeachBatch, delta_sink_session, start_delta_sink
    from sparklog.spark.local_session import (
        failure_line,
        log_failure,
        log_size,
        timed_out,
        worker_timeout_line,
    )

    root = _root(ctx)
    topic, table = settings["topic"], settings["table"]
    root.describe_topic(topic)  # an unknown topic: one line naming it
    name = connector_state.validate_name(name)
    table_options = _pairs(settings.get("table_option"), "--table-option")
    sink = DeltaForeachBatch(
        table,
        app_id=name,
        value_format=settings.get("value_format") or "auto",
        value_schema=settings.get("value_schema"),
        mode=settings.get("mode") or "append",
        partition_by=tuple(settings.get("partition_by") or ()),
        storage_options=table_options,
        writer=settings.get("writer") or "auto",
    )
    checkpoint = settings.get("checkpoint")
    if checkpoint is None:
        if "://" in table and not table.startswith("file://"):
            raise ConnectorConfigError(
                f"--checkpoint is needed for the remote table {table!r} (a folder every restart "
                "of the query reaches)"
            )
        checkpoint = table.removeprefix("file://").rstrip("/") + "/_sparklog_checkpoint"
    stored = {
        **settings,
        "checkpoint": checkpoint,
        "table_option": [
            f"{k}={v}"
            for k, v in table_options.items()
            if not any(word in k.upper() for word in _SECRET_WORDS)
        ],
    }
    previous = (connector_state.load(root, name) or {}).get("progress") or {}
    metrics = _metrics(metrics_listen)
    progress = SinkProgress(root, name, topic, metrics, previous.get("applied_offsets"))
    sink.on_progress = progress
    connector_state.save(
        root,
        name,
        kind=DELTA_SINK,
        topic=topic,
        table=table,
        checkpoint=checkpoint,
        mode=sink.mode,
        config=stored,
    )
    st = state(ctx)
    options = {"root": root.url}
    options.update(_flatten("storage", st.storage_options))
    spark_log = settings.get("spark_log") or spark_log_path(name)
    connector_state.save(root, name, spark_log=spark_log)
    sys.stderr.write(f"{name}: Spark's log: {spark_log}\n")  # where its own lines go
    log_start = log_size(spark_log)  # this run's lines come after

    def work(stop: threading.Event) -> str:
        try:
            return _land(stop)
        except SparklogError:
            raise  # the sink's own errors are one line already
        except Exception as exc:
            if timed_out(exc, spark_log, log_start):
                raise ConnectorError(f"{name}: {worker_timeout_line(spark_log)}") from exc
            # Spark's failure (a Py4J error, a failed streaming query) carries the Java
            # stack and the query plan: one line here, all of it in Spark's log
            log_failure(spark_log, exc)
            raise ConnectorError(
                f"{name}: Spark failed: {failure_line(exc)} (all of it in Spark's log: {spark_log})"
            ) from exc

    def _land(stop: threading.Event) -> str:
        spark = delta_sink_session(f"sparklog-{name}", spark_log)
        connector_state.save(root, name, writer=sink.resolved_writer(spark))
        query = start_delta_sink(
            spark,
            sink,
            topic=topic,
            source_options=options,
            checkpoint=checkpoint,
            once=once,
            max_offsets_per_trigger=settings.get("max_offsets_per_trigger"),
        )
        try:
            while not query.awaitTermination(1):
                if stop.is_set():
                    query.stop()
        finally:
            if query.isActive:
                query.stop()
            progress.save()
        version = sink.target.committed_version()
        return f"{name}: {topic} -> {table}, last batch {version if version is not None else '-'}"

    _supervised(root, name, work)


def spark_log_path(name: str) -> str:
    """Where a connector's local Spark logs when ``--spark-log`` is not given."""
    return os.path.join(tempfile.gettempdir(), f"sparklog-connect-{name}-spark.log")


def _flatten(prefix: str, value: Any) -> dict[str, str]:
    if isinstance(value, dict):
        out: dict[str, str] = {}
        for k, v in value.items():
            out.update(_flatten(f"{prefix}.{k}", v))
        return out
    return {prefix: str(value)}


@connect_app.command(POSTGRES_SOURCE)
def postgres_source(
    ctx: typer.Context,
    table: Annotated[list[str], typer.Option("--table", metavar="SCHEMA.TABLE", help="Repeatable")],
    dsn: str = typer.Option(..., "--dsn", metavar="DSN", help="libpq connection string or URL"),
    prefix: str = typer.Option(
        ..., "--prefix", metavar="PREFIX", help="Topics PREFIX.schema.table"
    ),
    name: str | None = typer.Option(None, "--name", metavar="NAME", help="Default: the prefix"),
    slot: str | None = typer.Option(None, "--slot", metavar="SLOT", help="Replication slot"),
    publication: str | None = typer.Option(None, "--publication", metavar="PUB"),
    partitions: int = typer.Option(1, "--partitions", metavar="N", help="Of new topics"),
    decimal_handling: str = typer.Option(
        "precise", "--decimal-handling", metavar="MODE", help="precise, double, string"
    ),
    time_precision: str = typer.Option(
        "adaptive",
        "--time-precision",
        metavar="MODE",
        help="Debezium's time.precision.mode: adaptive, adaptive_time_microseconds, connect",
    ),
    interval_handling: str = typer.Option(
        "numeric",
        "--interval-handling",
        metavar="MODE",
        help="Debezium's interval.handling.mode: numeric (microseconds), string (ISO 8601)",
    ),
    once: bool = typer.Option(False, "--once", help="Snapshot and changes so far, then stop"),
    metrics_listen: str = typer.Option(
        "", "--metrics-listen", metavar="HOST:PORT", help=_METRICS_HELP
    ),
) -> None:
    """Capture PostgreSQL tables' changes into topics."""
    settings = {
        "dsn": dsn,
        "table": list(table),
        "prefix": prefix,
        "slot": slot or "",
        "publication": publication or "",
        "partitions": partitions,
        "decimal_handling": decimal_handling,
        "time_precision": time_precision,
        "interval_handling": interval_handling,
    }
    _run_postgres_source(ctx, name or prefix, settings, once, metrics_listen)


def _run_postgres_source(
    ctx: typer.Context, name: str, settings: dict[str, Any], once: bool, metrics_listen: str
) -> None:
    from sparklog.connect.postgres import PostgresSource, PostgresSourceConfig

    config = PostgresSourceConfig(
        settings["dsn"],
        list(settings["table"]),
        settings["prefix"],
        name=name,
        slot=settings.get("slot") or "",
        publication=settings.get("publication") or "",
        partitions=int(settings.get("partitions") or 1),
        decimal_handling=settings.get("decimal_handling") or "precise",
        time_precision=settings.get("time_precision") or "adaptive",
        interval_handling=settings.get("interval_handling") or "numeric",
    )
    root = _root(ctx)
    source = PostgresSource(root, config, metrics=_metrics(metrics_listen))
    source.check()  # every setting against the server before the status says running

    def work(stop: threading.Event) -> str:
        source.run(until_caught_up=once, stop=stop)
        stats = source.stats
        return (
            f"{config.name}: {stats['snapshot_rows']} snapshot rows, {stats['changes']} change "
            f"records in {stats['transactions']} transactions ({stats['skipped']} already "
            "written)"
        )

    _supervised(root, config.name, work)


def progress_trails(recorded: int | None, committed: int | None) -> str | None:
    """What ``connect status`` says when the saved progress is older than the table.

    A Delta sink saves its progress at most every 5 s and when it stops; killed in
    between (SIGKILL, a lost machine), the table holds batches its progress never
    recorded. The table is right (exactly-once by its transaction ids); the progress
    and ``records_behind``, read from it, overstate what is left to land.
    """
    if committed is None or (recorded is not None and recorded >= committed):
        return None
    saved = f"batch {recorded}" if recorded is not None else "no batch"
    return (
        f"progress records {saved} but the table has batch {committed} (the connector "
        "stopped before saving it; progress is saved every 5 s): applied_offsets and "
        "records_behind are as of the recorded batch, so records_behind overstates "
        "what is left; they catch up when it runs again"
    )


def _definition(root: Any, name: str) -> dict[str, Any]:
    from sparklog.connect import state as connector_state

    doc = connector_state.load(root, name)
    if doc is None:
        known = connector_state.names(root)
        raise InvalidConfigurationError(
            f"no connector {name!r} in this root; known: {known or 'none'}"
        )
    return dict(doc)


@connect_app.command("run")
def connect_run(
    ctx: typer.Context,
    name: str = typer.Argument(..., metavar="NAME"),
    dsn: str | None = typer.Option(
        None, "--dsn", metavar="DSN", help="postgres-source: the connection (with its password)"
    ),
    once: bool = typer.Option(False, "--once", help="Catch up, then stop"),
    metrics_listen: str = typer.Option(
        "", "--metrics-listen", metavar="HOST:PORT", help=_METRICS_HELP
    ),
) -> None:
    """Run a connector from its definition in the root."""
    doc = _definition(_root(ctx, create=False), name)
    settings = doc.get("config")
    kind = doc.get("kind")
    if not isinstance(settings, dict) or kind not in (DELTA_SINK, POSTGRES_SOURCE):
        raise InvalidConfigurationError(
            f"connector {name!r} has no stored definition (kind {kind!r}); start it once with "
            f"'sparklog connect {DELTA_SINK}' or '{POSTGRES_SOURCE}'"
        )
    if kind == DELTA_SINK:
        if dsn is not None:
            raise InvalidConfigurationError(
                f"--dsn is for a {POSTGRES_SOURCE}; {name!r} is a {kind}"
            )
        _run_delta_sink(ctx, name, settings, once, metrics_listen)
        return
    from sparklog.connect.state import without_redacted_password

    settings = {**settings, "dsn": dsn or without_redacted_password(settings["dsn"])}
    _run_postgres_source(ctx, name, settings, once, metrics_listen)


@connect_app.command("stop")
def connect_stop(
    ctx: typer.Context,
    name: str = typer.Argument(..., metavar="NAME"),
    timeout_s: float = typer.Option(
        60, "--timeout", metavar="SECONDS", min=0, help="How long to wait for it to stop"
    ),
) -> None:
    """Ask a running connector to stop, and wait."""
    from sparklog.connect import state as connector_state

    root = _root(ctx, create=False)
    doc = _definition(root, name)
    if doc.get("status") != "running" or _dead_here(doc):
        say(f"{name} is not running (status {doc.get('status') or 'unknown'})")
        return
    connector_state.request_stop(root, name)
    deadline = time.monotonic() + timeout_s
    while True:
        doc = connector_state.load(root, name) or {}
        if doc.get("status") != "running" or _dead_here(doc):
            say(f"{name} stopped (status {doc.get('status')})")
            return
        if time.monotonic() >= deadline:
            raise ConnectorError(
                f"{name} did not stop within {timeout_s:g} s (pid {doc.get('pid')} on "
                f"{doc.get('host')}); the stop request stays recorded"
            )
        time.sleep(0.2)


def _dead_here(doc: dict[str, Any]) -> bool:
    """True if the connector's recorded process ran on this host and is gone (was killed)."""
    import socket

    if doc.get("host") != socket.gethostname() or not doc.get("pid"):
        return False
    try:
        os.kill(int(doc["pid"]), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


@connect_app.command("list")
def connect_list(ctx: typer.Context) -> None:
    """Connectors that recorded state in this root."""
    from sparklog.connect import state as connector_state

    root = _root(ctx, create=False)
    docs = [connector_state.load(root, n) or {"name": n} for n in connector_state.names(root)]
    if state(ctx).json:
        print_json(docs)
        return
    rows = [
        (
            d.get("name"),
            d.get("kind"),
            d.get("status") or "-",
            ", ".join(d.get("topics") or [d.get("topic", "")]),
        )
        for d in docs
    ]
    print_table(None, ["name", "kind", "status", "topics"], rows)


@connect_app.command("status")
def connect_status(
    ctx: typer.Context,
    name: str = typer.Argument(..., metavar="NAME"),
    dsn: str | None = typer.Option(
        None, "--dsn", metavar="DSN", help="postgres-source: the connection (for the slot's lag)"
    ),
) -> None:
    """A connector's settings, progress and lag."""
    root = _root(ctx, create=False)
    status = _definition(root, name)
    if status.get("status") == "running" and _dead_here(status):
        status["status"] = "dead"  # killed: it could not record that it stopped
    progress = status.get("progress") or {}
    if status.get("kind") == DELTA_SINK:
        from sparklog.connect.delta import DeltaTarget
        from sparklog.connect.sink_progress import records_behind, topic_ends

        status["last_batch"] = DeltaTarget(status["table"], name).committed_version()
        ends = topic_ends(root, status["topic"])
        status["records_behind"] = records_behind(ends, progress.get("applied_offsets") or {})
        trails = progress_trails(progress.get("last_batch"), status["last_batch"])
        if trails:
            status["progress_trails"] = trails
    elif status.get("kind") == POSTGRES_SOURCE and dsn:
        from sparklog.connect.postgres import slot_status

        status.update(slot_status(dsn, status["slot"]))
    if state(ctx).json:
        print_json(status)
        return
    print_table(None, ["key", "value"], [(k, v) for k, v in sorted(status.items())])
