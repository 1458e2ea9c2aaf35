"""The ``sparklog`` command line: topics, produce, consume, groups, offsets, broker, demo.

Every command takes the global ``--address`` (a storage root or
``sparklog://host:port``; default ``$SPARKLOG_ADDRESS``), ``--storage-option
key=value`` (or ``SPARKLOG_STORAGE_<KEY>``) and ``--output table|json``.  A user
mistake prints one line on stderr and exits non-zero, never a traceback.
"""

from __future__ import annotations

import os
import sys
from typing import Annotated, Any, NoReturn

import typer

from sparklog.cli.output import print_json, print_table, stderr, stdout
from sparklog.cli.parse import parse_offset_spec, parse_pairs, parse_time_ms
from sparklog.cli.records import consume, produce
from sparklog.cli.state import CliState, state
from sparklog.client.types import TopicDescription
from sparklog.errors import ConfigError, SparklogError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="sparklog: Kafka's model on object storage, for Spark.",
)
topics_app = typer.Typer(no_args_is_help=True, help="Create, list, describe, alter, delete topics.")
groups_app = typer.Typer(no_args_is_help=True, help="List, describe, reset and delete groups.")
broker_app = typer.Typer(no_args_is_help=True, help="Run a broker.")
app.add_typer(topics_app, name="topics")
app.add_typer(groups_app, name="groups")
app.add_typer(broker_app, name="broker")
app.command("produce")(produce)
app.command("consume")(consume)


@app.callback()
def main_options(
    ctx: typer.Context,
    address: str | None = typer.Option(
        None,
        "--address",
        "-a",
        envvar="SPARKLOG_ADDRESS",
        help="Storage root (path, file://, s3://, memory://) or sparklog://host:port[,host:port]",
    ),
    storage_option: Annotated[
        list[str] | None,
        typer.Option("--storage-option", "-S", help="fsspec storage option key=value"),
    ] = None,
    output: str = typer.Option("table", "--output", "-o", help="table or json"),
) -> None:
    """sparklog: Kafka's model on object storage, for Spark."""
    if ctx.invoked_subcommand in ("demo", "broker"):
        ctx.obj = None  # these take their own root; no address needed
        if output not in ("table", "json"):
            raise ConfigError(f"--output {output!r} is not accepted; accepted: table, json")
        return
    ctx.obj = CliState(address, list(storage_option or []), output)


# -- topics ------------------------------------------------------------------------
def _topic_doc(desc: TopicDescription) -> dict[str, Any]:
    return {
        "name": desc.name,
        "topic_id": desc.topic_id,
        "partitions": [
            {
                "partition": p.partition,
                "leader": p.leader,
                "log_start_offset": p.log_start_offset,
                "high_watermark": p.high_watermark,
                "size_bytes": p.size_bytes,
            }
            for p in desc.partitions
        ],
        "config": desc.config,
    }


def _print_topic(desc: TopicDescription, as_json: bool) -> None:
    if as_json:
        print_json(_topic_doc(desc))
        return
    stdout.print(f"[bold]{desc.name}[/]  id {desc.topic_id}  partitions {len(desc.partitions)}")
    print_table(
        None,
        ["partition", "leader", "log start", "high watermark", "size bytes"],
        [
            (
                p.partition,
                p.leader or "(embedded)",
                p.log_start_offset,
                p.high_watermark,
                p.size_bytes,
            )
            for p in desc.partitions
        ],
    )
    print_table(None, ["config", "value"], sorted(desc.config.items()))


@topics_app.command("create")
def topics_create(
    ctx: typer.Context,
    name: str = typer.Argument(..., help="Topic name"),
    partitions: int = typer.Option(1, "--partitions", "-p", help="Number of partitions"),
    config: Annotated[
        list[str] | None, typer.Option("--config", "-c", help="key=value topic config")
    ] = None,
) -> None:
    """Create a topic."""
    st = state(ctx)
    with st.admin() as admin:
        desc = admin.create_topic(name, partitions, parse_pairs(config or [], "--config"))
    if st.json:
        print_json(_topic_doc(desc))
    else:
        stdout.print(f"created topic {name} with {partitions} partitions")


def _print_names(names: list[str], as_json: bool) -> None:
    """A list of names: a JSON array, or one name per line."""
    if as_json:
        print_json(names)
        return
    for name in names:
        stdout.print(name, highlight=False)


@topics_app.command("list")
def topics_list(ctx: typer.Context) -> None:
    """List topics."""
    st = state(ctx)
    with st.admin() as admin:
        _print_names(admin.list_topics(), st.json)


@topics_app.command("describe")
def topics_describe(ctx: typer.Context, name: str = typer.Argument(...)) -> None:
    """Partitions (leader, log start, high watermark, size) and config of a topic."""
    st = state(ctx)
    with st.admin() as admin:
        _print_topic(admin.describe_topic(name), st.json)


@topics_app.command("alter")
def topics_alter(
    ctx: typer.Context,
    name: str = typer.Argument(...),
    config: Annotated[
        list[str] | None, typer.Option("--config", "-c", help="key=value to set")
    ] = None,
) -> None:
    """Change topic config."""
    st = state(ctx)
    updates = parse_pairs(config or [], "--config")
    with st.admin() as admin:
        desc = admin.alter_topic_config(name, updates)
    if st.json:
        print_json(_topic_doc(desc))
    else:
        stdout.print(f"altered {name}: " + ", ".join(f"{k}={desc.config[k]}" for k in updates))


@topics_app.command("add-partitions")
def topics_add_partitions(
    ctx: typer.Context,
    name: str = typer.Argument(...),
    partitions: int = typer.Option(..., "--partitions", "-p", help="New total partition count"),
) -> None:
    """Grow a topic to a total number of partitions."""
    st = state(ctx)
    with st.admin() as admin:
        desc = admin.add_partitions(name, partitions)
    if st.json:
        print_json(_topic_doc(desc))
    else:
        stdout.print(f"{name} now has {len(desc.partitions)} partitions")


@topics_app.command("delete")
def topics_delete(ctx: typer.Context, name: str = typer.Argument(...)) -> None:
    """Delete a topic and its data."""
    st = state(ctx)
    with st.admin() as admin:
        admin.delete_topic(name)
    if st.json:
        print_json({"deleted": name})
    else:
        stdout.print(f"deleted topic {name}")


# -- groups -----------------------------------------------------------------------------
@groups_app.command("list")
def groups_list(ctx: typer.Context) -> None:
    """List consumer groups."""
    st = state(ctx)
    with st.admin() as admin:
        _print_names(admin.list_groups(), st.json)


@groups_app.command("describe")
def groups_describe(ctx: typer.Context, group: str = typer.Argument(...)) -> None:
    """Per partition: committed offset, high watermark, lag, member."""
    st = state(ctx)
    with st.admin() as admin:
        desc = admin.describe_group(group)
    rows = [
        {
            "topic": p.topic,
            "partition": p.partition,
            "committed": p.committed,
            "high_watermark": p.high_watermark,
            "lag": p.lag,
            "member": p.member,
        }
        for p in desc.lag
    ]
    if st.json:
        print_json(
            {
                "group": desc.group,
                "state": desc.state,
                "generation": desc.generation,
                "strategy": desc.strategy,
                "members": [
                    {"member_id": m.member_id, "topics": m.topics, "assignment": m.assignment}
                    for m in desc.members
                ],
                "partitions": rows,
                "total_lag": desc.total_lag,
            }
        )
        return
    stdout.print(
        f"[bold]{desc.group}[/]  state {desc.state}  generation {desc.generation}  "
        f"members {len(desc.members)}  total lag {desc.total_lag}"
    )
    print_table(
        None,
        ["topic", "partition", "committed", "high watermark", "lag", "member"],
        [tuple(r.values()) for r in rows],
    )


@groups_app.command("reset-offsets")
def groups_reset_offsets(
    ctx: typer.Context,
    group: str = typer.Argument(...),
    topic: str = typer.Option(..., "--topic", "-t", help="Topic whose offsets to reset"),
    to_earliest: bool = typer.Option(False, "--to-earliest"),
    to_latest: bool = typer.Option(False, "--to-latest"),
    to_offset: int | None = typer.Option(None, "--to-offset"),
    to_datetime: str | None = typer.Option(None, "--to-datetime", help="ISO 8601 time"),
    shift_by: int | None = typer.Option(None, "--shift-by"),
    execute: bool = typer.Option(False, "--execute", help="Apply (default: only print the plan)"),
) -> None:
    """Plan new committed offsets; change them only with --execute."""
    st = state(ctx)
    ts = parse_time_ms(to_datetime) if to_datetime is not None else None
    with st.admin() as admin:
        plan = admin.reset_group_offsets(
            group,
            topic,
            to_earliest=to_earliest,
            to_latest=to_latest,
            to_offset=to_offset,
            to_timestamp_ms=ts,
            shift_by=shift_by,
            execute=execute,
        )
    if st.json:
        print_json(
            {
                "group": group,
                "executed": execute,
                "plan": [
                    {"topic": r.topic, "partition": r.partition, "current": r.current, "new": r.new}
                    for r in plan
                ],
            }
        )
    else:
        print_table(
            f"{'reset' if execute else 'plan for'} group {group}",
            ["topic", "partition", "current", "new"],
            [(r.topic, r.partition, r.current, r.new) for r in plan],
        )
    if not execute:
        stderr.print("dry run: nothing changed; add --execute to apply")


@groups_app.command("delete")
def groups_delete(ctx: typer.Context, group: str = typer.Argument(...)) -> None:
    """Delete a group with no active members (and its committed offsets)."""
    st = state(ctx)
    with st.admin() as admin:
        admin.delete_group(group)
    if st.json:
        print_json({"deleted": group})
    else:
        stdout.print(f"deleted group {group}")


# -- offsets ------------------------------------------------------------------------------
@app.command("offsets")
def offsets(
    ctx: typer.Context,
    topic: str = typer.Argument(...),
    time_spec: str = typer.Option("latest", "--time", help="earliest, latest or ISO 8601 time"),
) -> None:
    """Per partition: the earliest / latest offset, or the first at or after a time."""
    st = state(ctx)
    spec = parse_offset_spec(time_spec)
    with st.admin() as admin:
        found = admin.list_offsets(topic, spec)
    if st.json:
        print_json({"topic": topic, "time": time_spec, "offsets": found})
    else:
        print_table(f"{topic} @ {time_spec}", ["partition", "offset"], sorted(found.items()))


# -- broker -------------------------------------------------------------------------------
@broker_app.command("start")
def broker_start(
    config: str | None = typer.Option(None, "--config", help="Broker config TOML"),
    root: str | None = typer.Option(None, "--root", help="Storage root URL"),
    listen: str | None = typer.Option(None, "--listen", help="host:port to listen on"),
    broker_id: int | None = typer.Option(None, "--broker-id", help="This broker's id"),
    kafka_listen: str | None = typer.Option(
        None, "--kafka-listen", help='Kafka protocol host:port (port 0 = free port; "" disables)'
    ),
) -> None:
    """Run a broker in the foreground (SIGTERM or Ctrl-C stops it gracefully)."""
    try:
        from sparklog.broker_lite.server import serve
    except ImportError as exc:
        raise ConfigError(
            f"the broker is not available in this installation ({exc}); accepted: a "
            "storage root address works without one"
        ) from None
    serve(
        config_path=config,
        root=root,
        listen=listen,
        broker_id=broker_id,
        kafka_listen=kafka_listen,
    )


# -- demo ---------------------------------------------------------------------------------
@app.command()
def demo(
    root: str | None = typer.Option(
        None, "--root", help="Storage root URL (default: a fresh temp directory, removed after)"
    ),
    records: int = typer.Option(50_000, "--records", min=1000, help="Page views to produce"),
    keep: bool = typer.Option(False, "--keep", help="Keep the root to explore it afterwards"),
) -> None:
    """Everything sparklog does, end to end: broker, producer, Spark streaming, reprocessing."""
    from sparklog.demo import DemoError, run_demo

    try:
        run_demo(root, records, keep or root is not None, console=stdout)
    except DemoError as exc:
        raise ConfigError(f"demo failed: {exc}") from None


# -- entry point ----------------------------------------------------------------------------
def _fail(message: str, code: int = 1) -> NoReturn:
    sys.stderr.write(f"error: {' '.join(message.split())}\n")
    sys.stderr.flush()
    raise SystemExit(code)


def _setup_logging() -> None:
    """CLI logs: SPARKLOG_LOG_LEVEL (default WARNING) and SPARKLOG_LOG_FORMAT (text or json)."""
    from sparklog.broker_lite.logs import setup_logging

    level = os.environ.get("SPARKLOG_LOG_LEVEL", "WARNING").upper()
    fmt = os.environ.get("SPARKLOG_LOG_FORMAT", "text").lower()
    if level not in ("DEBUG", "INFO", "WARNING", "ERROR") or fmt not in ("text", "json"):
        _fail(
            f"SPARKLOG_LOG_LEVEL={level!r} / SPARKLOG_LOG_FORMAT={fmt!r} not accepted; accepted: "
            "DEBUG, INFO, WARNING, ERROR / text, json"
        )
    setup_logging(level, fmt, loggers=("sparklog", "storage"))


def main(argv: list[str] | None = None) -> None:
    """Run the CLI; user mistakes become one line on stderr and a non-zero exit."""
    _setup_logging()
    try:
        app(args=argv, prog_name="sparklog", standalone_mode=False)
    except SparklogError as exc:
        _fail(str(exc), 1)
    except typer.Exit as exc:
        raise SystemExit(exc.exit_code) from None
    except typer.Abort:
        _fail("aborted", 130)
    except typer.TyperException as exc:  # usage errors: bad option, missing argument...
        message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
        code = getattr(exc, "exit_code", 2) or 2
        if not message.strip():  # no_args_is_help: the help was printed already
            raise SystemExit(code) from None
        _fail(message, code)
    except KeyboardInterrupt:
        raise SystemExit(130) from None
    except BrokenPipeError:
        raise SystemExit(0) from None
    except OSError as exc:
        _fail(f"{exc}", 1)
