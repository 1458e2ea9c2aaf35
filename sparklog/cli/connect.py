"""``sparklog connect``: run connectors (delta-sink, postgres-source) and list their state.

Connectors read and write the storage root directly (the global ``--address`` must
name a root, not a broker). Each records its settings and milestones in the root
(:mod:`sparklog.connect.state`), which ``list`` and ``status`` show. Settings are
checked before anything starts: a wrong host, an unknown table or topic, a bad
value format is one ``error:`` line.
"""

from __future__ import annotations

import contextlib
from typing import Annotated, Any

import typer

from sparklog.cli.output import print_json, print_table, say
from sparklog.cli.state import state
from sparklog.errors import ConnectorConfigError, InvalidConfigurationError

connect_app = typer.Typer(
    no_args_is_help=True,
    rich_markup_mode=None,
    help="Connectors: topic to Delta table, PostgreSQL to topics.",
)


def _root(ctx: typer.Context) -> Any:
    from sparklog.client.address import parse_address
    from sparklog.storage import open_root

    st = state(ctx)
    url = parse_address(st.address).root if st.address else None
    if not url:
        raise InvalidConfigurationError(
            "connectors read and write the storage root: give it as --address (a path, "
            "file://, s3://), not a broker's host:port"
        )
    return open_root(url, st.storage_options)


def _pairs(items: list[str] | None, flag: str) -> dict[str, str]:
    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise InvalidConfigurationError(f"{flag} {item!r} not accepted; accepted: KEY=VALUE")
        out[key] = value
    return out


@connect_app.command("delta-sink")
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
    once: bool = typer.Option(False, "--once", help="Land what is there, then stop"),
) -> None:
    """Land a topic in a Delta table, exactly-once."""
    from sparklog.connect import state as connector_state
    from sparklog.spark.delta_sink import DeltaForeachBatch, delta_sink_session, start_delta_sink

    root = _root(ctx)
    root.describe_topic(topic)  # an unknown topic: one line naming it
    name = connector_state.validate_name(name or f"delta-{topic}")
    sink = DeltaForeachBatch(
        table,
        app_id=name,
        value_format=value_format,
        value_schema=value_schema,
        mode=mode,  # type: ignore[arg-type]
        partition_by=tuple(partition_by or ()),
        storage_options=_pairs(table_option, "--table-option"),
    )
    if checkpoint is None:
        if "://" in table and not table.startswith("file://"):
            raise ConnectorConfigError(
                f"--checkpoint is needed for the remote table {table!r} (a folder every restart "
                "of the query reaches)"
            )
        checkpoint = table.removeprefix("file://").rstrip("/") + "/_sparklog_checkpoint"
    connector_state.save(
        root, name, kind="delta-sink", topic=topic, table=table, checkpoint=checkpoint, mode=mode
    )
    spark = delta_sink_session(f"sparklog-{name}")
    st = state(ctx)
    options = {"root": root.url}
    options.update(_flatten("storage", st.storage_options))
    query = start_delta_sink(
        spark,
        sink,
        topic=topic,
        source_options=options,
        checkpoint=checkpoint,
        once=once,
        max_offsets_per_trigger=max_offsets,
    )
    try:
        query.awaitTermination()
    finally:
        if query.isActive:
            query.stop()
    version = sink.target.committed_version()
    say(f"{name}: {topic} -> {table}, last batch {version if version is not None else '-'}")


def _flatten(prefix: str, value: Any) -> dict[str, str]:
    if isinstance(value, dict):
        out: dict[str, str] = {}
        for k, v in value.items():
            out.update(_flatten(f"{prefix}.{k}", v))
        return out
    return {prefix: str(value)}


@connect_app.command("postgres-source")
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
    once: bool = typer.Option(False, "--once", help="Snapshot and changes so far, then stop"),
) -> None:
    """Capture PostgreSQL tables' changes into topics."""
    from sparklog.connect.postgres import PostgresSource, PostgresSourceConfig

    config = PostgresSourceConfig(
        dsn,
        list(table),
        prefix,
        name=name or "",
        slot=slot or "",
        publication=publication or "",
        partitions=partitions,
        decimal_handling=decimal_handling,
    )
    source = PostgresSource(_root(ctx), config)
    with contextlib.suppress(KeyboardInterrupt):
        source.run(until_caught_up=once)
    stats = source.stats
    say(
        f"{config.name}: {stats['snapshot_rows']} snapshot rows, {stats['changes']} change "
        f"records in {stats['transactions']} transactions ({stats['skipped']} already written)"
    )


@connect_app.command("list")
def connect_list(ctx: typer.Context) -> None:
    """Connectors that recorded state in this root."""
    from sparklog.connect import state as connector_state

    root = _root(ctx)
    docs = [connector_state.load(root, n) or {"name": n} for n in connector_state.names(root)]
    if state(ctx).json:
        print_json(docs)
        return
    rows = [
        (d.get("name"), d.get("kind"), ", ".join(d.get("topics") or [d.get("topic", "")]))
        for d in docs
    ]
    print_table(None, ["name", "kind", "topics"], rows)


@connect_app.command("status")
def connect_status(
    ctx: typer.Context,
    name: str = typer.Argument(..., metavar="NAME"),
    dsn: str | None = typer.Option(
        None, "--dsn", metavar="DSN", help="postgres-source: the connection (for the slot's lag)"
    ),
) -> None:
    """A connector's settings and progress."""
    from sparklog.connect import state as connector_state

    root = _root(ctx)
    doc = connector_state.load(root, name)
    if doc is None:
        known = connector_state.names(root)
        raise InvalidConfigurationError(
            f"no connector {name!r} in this root; known: {known or 'none'}"
        )
    status = dict(doc)
    if doc.get("kind") == "delta-sink":
        from sparklog.connect.delta import DeltaTarget

        status["last_batch"] = DeltaTarget(doc["table"], name).committed_version()
    elif doc.get("kind") == "postgres-source" and dsn:
        from sparklog.connect.postgres import slot_status

        status.update(slot_status(dsn, doc["slot"]))
    if state(ctx).json:
        print_json(status)
        return
    print_table(None, ["key", "value"], [(k, v) for k, v in sorted(status.items())])
