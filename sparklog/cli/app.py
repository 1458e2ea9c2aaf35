"""The ``sparklog`` command line: topics, produce, consume, groups, offsets, broker, demo.

Every command takes the global ``--address`` (a storage root, ``host:port`` or
``sparklog://host:port``; default ``$SPARKLOG_ADDRESS``), ``--storage-option
key=value`` (or ``SPARKLOG_STORAGE_<KEY>``) and ``--output table|json``.  A user
mistake prints one line on stderr (a JSON object with ``--output json``) and
exits non-zero, never a traceback.  Client modules are imported inside the
commands: ``--help`` and metadata commands start fast.
"""

from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from sparklog.cli.output import plural, print_json, print_table, quiet_exit, say, stdout
from sparklog.cli.parse import one_group, one_topic, parse_offset_spec, parse_pairs
from sparklog.cli.records import consume, produce
from sparklog.cli.state import CliState, check_output, state
from sparklog.errors import InvalidConfigurationError, SparklogError, TopicAlreadyExistsError

if TYPE_CHECKING:
    from sparklog.client.types import GroupDescription, TopicDescription


def _plain_argument_help() -> None:
    """Arguments show their METAVAR only: typer 0.29 appends a ``<str>`` type label."""
    import typer.core

    argument = getattr(typer.core, "TyperArgument", None)
    if argument is not None and hasattr(argument, "display_type_rich"):
        argument.display_type_rich = lambda self, ctx: None


_plain_argument_help()


def _typer(help_text: str) -> typer.Typer:
    # rich_markup_mode=None: plain help (no <str>/<bool> type noise, no rich import)
    return typer.Typer(no_args_is_help=True, rich_markup_mode=None, help=help_text)


app = typer.Typer(
    add_completion=False,
    rich_markup_mode=None,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="sparklog: Kafka's model on object storage, for Spark.",
)
topics_app = _typer("Create, list, describe, alter, delete topics.")
groups_app = _typer("List, describe, reset, delete groups and their offsets.")
broker_app = _typer("Run a broker.")
perf_app = _typer("Performance tests. As kafka-producer-perf-test, kafka-consumer-perf-test.")
app.add_typer(topics_app, name="topics")
app.add_typer(groups_app, name="groups")
app.add_typer(broker_app, name="broker")
app.add_typer(perf_app, name="perf")
app.command("produce")(produce)
app.command("consume")(consume)


def _print_version(asked: bool) -> None:
    """``sparklog --version``: the installed package's version, as Kafka's tools' --version."""
    if not asked:
        return
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = version("sparklog")
    except PackageNotFoundError:  # a checkout on PYTHONPATH, not installed
        found = "unknown (not installed)"
    say(f"sparklog {found}")
    raise typer.Exit(0)


@app.callback()
def main_options(
    ctx: typer.Context,
    address: str | None = typer.Option(
        None,
        "--address",
        "-a",
        envvar="SPARKLOG_ADDRESS",
        metavar="ADDRESS",
        help="Storage root (path, file://, s3://, memory://), or brokers host:port[,host:port] "
        "(also sparklog://host:port)",
    ),
    storage_option: Annotated[
        list[str] | None,
        typer.Option(
            "--storage-option", "-S", metavar="K=V", help="fsspec storage option key=value"
        ),
    ] = None,
    output: str = typer.Option("table", "--output", "-o", metavar="FORMAT", help="table or json"),
    version: bool = typer.Option(
        False,
        "--version",
        is_eager=True,
        callback=_print_version,
        help="Print sparklog's version and exit",
    ),
) -> None:
    """sparklog: Kafka's model on object storage, for Spark."""
    # Only stored here: the address is checked when a command uses it, so any
    # command's --help works without one (and demo/broker take their own root).
    ctx.obj = CliState(address, list(storage_option or []), check_output(output))


TOPIC = typer.Argument(..., metavar="TOPIC", help="Topic name")
#: the topic of a ``topics`` command: an argument, or kafka-topics' ``--topic TOPIC``
TOPIC_ARGUMENT = typer.Argument(None, metavar="TOPIC", help="Topic name")
TOPIC_OPTION = typer.Option(
    None, "--topic", metavar="TOPIC", help="The topic (kafka-topics' spelling)"
)
GROUP = typer.Argument(..., metavar="GROUP", help="Consumer group id")


# -- topics ------------------------------------------------------------------------
def topic_doc(desc: TopicDescription) -> dict[str, Any]:
    """The JSON shape of a topic, the same in every command that prints one."""
    return {
        "topic": desc.name,
        "topic_id": desc.topic_id,
        "partitions": [
            {
                "topic": desc.name,
                "partition": p.partition,
                "leader": p.leader,
                "log_start_offset": p.log_start_offset,
                "high_watermark": p.high_watermark,
                "size_bytes": p.size_bytes,
            }
            for p in desc.partitions
        ],
        "replication_factor": desc.replication_factor,
        "config": desc.config,
    }


def _print_topic(desc: TopicDescription, as_json: bool) -> None:
    if as_json:
        print_json(topic_doc(desc))
        return
    stdout.print(
        f"[bold]{desc.name}[/]  id {desc.topic_id}  partitions {len(desc.partitions)}  "
        f"replication factor {desc.replication_factor}"
    )
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
    topic: str | None = TOPIC_ARGUMENT,
    topic_option: str | None = TOPIC_OPTION,
    partitions: int = typer.Option(
        1, "--partitions", "-p", metavar="N", help="Number of partitions"
    ),
    config: Annotated[
        list[str] | None,
        typer.Option("--config", "-c", metavar="K=V", help="Topic config key=value"),
    ] = None,
    replication_factor: int = typer.Option(
        1,
        "--replication-factor",
        metavar="N",
        help="1 to the number of live brokers, or -1 for the default (1); kept and described "
        "back as Kafka's, the object store holds the data once",
    ),
    if_not_exists: bool = typer.Option(
        False, "--if-not-exists", help="Succeed without a change if the topic exists"
    ),
) -> None:
    """Create a topic. The first topic of a root also creates the root.

    Leaders: partition p is in shard p mod commit.shards, and each shard has one
    leader broker. By default a topic a broker creates gets four shards per broker
    registered then (one per broker with journal_records off; at most one per
    partition), so its leaders spread over the brokers and a dead broker's spread
    over the survivors; set --config commit.shards=N to choose (fixed at creation).
    """
    name = one_topic(topic, topic_option)
    st = state(ctx)
    pairs = parse_pairs(config or [], "--config")
    with st.admin(create=True) as admin:
        try:
            desc = admin.create_topic(
                name, partitions, pairs, replication_factor=replication_factor
            )
        except TopicAlreadyExistsError:
            if not if_not_exists:
                raise
            desc = admin.describe_topic(name, sizes=False)
            if st.json:
                print_json(topic_doc(desc))
            else:
                say(f"topic {name} already exists (--if-not-exists: nothing changed)")
            return
    if st.json:
        print_json(topic_doc(desc))
    else:
        say(f"created topic {name} with {plural(partitions, 'partition')}")


def _print_names(names: list[str], as_json: bool) -> None:
    """A list of names: a JSON array, or one name per line."""
    if as_json:
        print_json(names)
        return
    for name in names:
        say(name)


@topics_app.command("list")
def topics_list(ctx: typer.Context) -> None:
    """List topics."""
    from sparklog.protocol import actions

    st = state(ctx)
    names = st.broker_names(actions.LIST_TOPICS)
    if names is None:
        with st.admin() as admin:
            names = admin.list_topics()
    _print_names(names, st.json)


@topics_app.command("describe")
def topics_describe(
    ctx: typer.Context,
    topic: str | None = TOPIC_ARGUMENT,
    topic_option: str | None = TOPIC_OPTION,
) -> None:
    """Show a topic. Per partition: leader, log start, high watermark, size; and its config."""
    name = one_topic(topic, topic_option)
    st = state(ctx)
    with st.admin() as admin:
        _print_topic(admin.describe_topic(name), st.json)


@topics_app.command("alter")
def topics_alter(
    ctx: typer.Context,
    topic: str | None = TOPIC_ARGUMENT,
    topic_option: str | None = TOPIC_OPTION,
    config: Annotated[
        list[str] | None, typer.Option("--config", "-c", metavar="K=V", help="Config to set")
    ] = None,
    delete_config: Annotated[
        list[str] | None,
        typer.Option("--delete-config", metavar="KEY", help="Config to remove (back to default)"),
    ] = None,
    partitions: int | None = typer.Option(None, "--partitions", "-p", hidden=True),
) -> None:
    """Change topic config. Set keys with --config, remove them with --delete-config."""
    name = one_topic(topic, topic_option)
    if partitions is not None:  # kafka-topics --alter --partitions N: a reflex worth a hint
        raise InvalidConfigurationError(
            f"topics alter changes configs, not the partition count; accepted: sparklog topics "
            f"add-partitions {name} --partitions {partitions}"
        )
    st = state(ctx)
    updates = parse_pairs(config or [], "--config")
    removed = list(delete_config or [])
    if not updates and not removed:
        raise InvalidConfigurationError(
            "nothing to alter; accepted: --config key=value, --delete-config key"
        )
    with st.admin() as admin:
        desc = admin.alter_topic_config(name, updates, removed)
    if st.json:
        print_json(topic_doc(desc))
    else:
        changes = [f"{k}={desc.config[k]}" for k in updates] + [
            f"{k} back to default ({desc.config.get(k, 'unset')})" for k in removed
        ]
        say(f"altered {name}: " + ", ".join(changes))


@topics_app.command("add-partitions")
def topics_add_partitions(
    ctx: typer.Context,
    topic: str | None = TOPIC_ARGUMENT,
    topic_option: str | None = TOPIC_OPTION,
    partitions: int = typer.Option(
        ..., "--partitions", "-p", metavar="N", help="New total partition count"
    ),
) -> None:
    """Grow a topic to a total number of partitions."""
    name = one_topic(topic, topic_option)
    st = state(ctx)
    with st.admin() as admin:
        desc = admin.add_partitions(name, partitions)
    if st.json:
        print_json(topic_doc(desc))
    else:
        say(f"{name} now has {plural(len(desc.partitions), 'partition')}")


@topics_app.command("delete")
def topics_delete(
    ctx: typer.Context,
    topic: str | None = TOPIC_ARGUMENT,
    topic_option: str | None = TOPIC_OPTION,
) -> None:
    """Delete a topic and its data."""
    name = one_topic(topic, topic_option)
    st = state(ctx)
    with st.admin() as admin:
        admin.delete_topic(name)
    if st.json:
        print_json({"topic": name, "deleted": True})
    else:
        say(f"deleted topic {name}")


# -- groups -----------------------------------------------------------------------------
@groups_app.command("list")
def groups_list(
    ctx: typer.Context,
    states: Annotated[
        list[str] | None,
        typer.Option(
            "--state", metavar="STATE", help="Only groups in this state (Stable, Empty, ...)"
        ),
    ] = None,
) -> None:
    """List consumer groups (--state: only those in a state)."""
    from sparklog.protocol import actions

    st = state(ctx)
    names = None if states else st.broker_names(actions.LIST_GROUPS)
    if names is not None:
        _print_names(names, st.json)
        return
    with st.admin() as admin:
        names = admin.list_groups()
        if states:
            wanted = {s.lower() for s in states}
            names = [g for g in names if admin.describe_group(g).state.lower() in wanted]
        _print_names(names, st.json)


def group_doc(desc: GroupDescription) -> dict[str, Any]:
    """The JSON shape of a group, the same in every command that prints one."""
    return {
        "group": desc.group,
        "state": desc.state,
        "generation": desc.generation,
        "strategy": desc.strategy,
        "members": [
            {
                "member_id": m.member_id,
                "topics": m.topics,
                "assignment": [{"topic": t, "partition": p} for t, p in m.assignment],
            }
            for m in desc.members
        ],
        "partitions": [
            {
                "topic": p.topic,
                "partition": p.partition,
                "committed": p.committed,
                "log_start_offset": p.log_start_offset,
                "high_watermark": p.high_watermark,
                "lag": p.lag,
                "member": p.member,
            }
            for p in desc.lag
        ],
        "total_lag": desc.total_lag,
    }


@groups_app.command("describe")
def groups_describe(
    ctx: typer.Context,
    group: str | None = typer.Argument(None, metavar="GROUP", help="Consumer group id"),
    group_option: str | None = typer.Option(
        None, "--group", metavar="GROUP", help="The group (kafka-consumer-groups' spelling)"
    ),
    all_groups: bool = typer.Option(
        False, "--all-groups", help="Describe every group (kafka-consumer-groups' flag)"
    ),
    members: bool = typer.Option(False, "--members", help="Show members and their partitions"),
    group_state: bool = typer.Option(
        False, "--state", help="One line per group: state, generation, strategy, members"
    ),
) -> None:
    """Show a group. Per partition: committed offset, high watermark, lag, member.

    As kafka-consumer-groups --describe: --all-groups for every group, --members
    for the members, --state for the group's state alone.
    """
    if members and group_state:
        raise InvalidConfigurationError("--members and --state both given; accepted: one of them")
    if all_groups and (group or group_option):
        raise InvalidConfigurationError(
            f"--all-groups and a group ({group or group_option!r}) both given; accepted: one "
            "of them"
        )
    st = state(ctx)
    with st.admin() as admin:
        names = admin.list_groups() if all_groups else [one_group(group, group_option)]
        found = [admin.describe_group(name) for name in names]
    if group_state:
        _print_group_states(found, st.json, many=all_groups)
        return
    if st.json:
        if all_groups:
            print_json([group_doc(desc) for desc in found])
        else:
            print_json(group_doc(found[0]))
        return
    for desc in found:
        _print_group(desc, members)


def _print_group_states(found: list[GroupDescription], as_json: bool, *, many: bool) -> None:
    """``--state``: each group's state line (kafka-consumer-groups --describe --state)."""
    docs = [
        {
            "group": d.group,
            "state": d.state,
            "generation": d.generation,
            "strategy": d.strategy,
            "members": len(d.members),
        }
        for d in found
    ]
    if as_json:
        print_json(docs if many else docs[0])
        return
    print_table(
        None,
        ["group", "state", "generation", "strategy", "members"],
        [(d["group"], d["state"], d["generation"], d["strategy"], d["members"]) for d in docs],
    )


def _print_group(desc: GroupDescription, members: bool) -> None:
    """One group's table: its partitions and lag, or (``members``) its members."""
    stdout.print(
        f"[bold]{desc.group}[/]  state {desc.state}  generation {desc.generation}  "
        f"{plural(len(desc.members), 'member')}  total lag {desc.total_lag}"
    )
    if members:
        print_table(
            None,
            ["member", "topics", "partitions"],
            [
                (
                    m.member_id,
                    ",".join(m.topics),
                    " ".join(f"{t}-{p}" for t, p in m.assignment),
                )
                for m in desc.members
            ],
        )
        return
    print_table(
        None,
        ["topic", "partition", "committed", "high watermark", "lag", "member"],
        [(p.topic, p.partition, p.committed, p.high_watermark, p.lag, p.member) for p in desc.lag],
    )


def _require_group(admin: Any, group: str) -> None:
    from sparklog.errors import GroupIdNotFoundError

    if group not in admin.list_groups():
        raise GroupIdNotFoundError(f"unknown group {group!r}; nothing deleted")


@groups_app.command("delete")
def groups_delete(ctx: typer.Context, group: str = GROUP) -> None:
    """Delete a group and its offsets. Refused while it has active members."""
    st = state(ctx)
    with st.admin() as admin:
        _require_group(admin, group)
        admin.delete_group(group)
    if st.json:
        print_json({"group": group, "deleted": True})
    else:
        say(f"deleted group {group}")


from sparklog.cli import delete_offsets as _delete_offsets  # noqa: E402
from sparklog.cli import resets as _resets  # noqa: E402  (registers groups reset-offsets)

_resets.register(groups_app)
from sparklog.cli.connect import connect_app as _connect_app  # noqa: E402

app.add_typer(_connect_app, name="connect")
from sparklog.cli.mirror import mirror_app as _mirror_app  # noqa: E402

app.add_typer(_mirror_app, name="mirror")
from sparklog.cli.security import acls_app as _acls_app  # noqa: E402
from sparklog.cli.security import quotas_app as _quotas_app  # noqa: E402
from sparklog.cli.security import users_app as _users_app  # noqa: E402

app.add_typer(_users_app, name="users")
app.add_typer(_acls_app, name="acls")
app.add_typer(_quotas_app, name="quotas")
from sparklog.cli.log_tools import log_app as _log_app  # noqa: E402

app.add_typer(_log_app, name="log")
from sparklog.cli.transactions import transactions_app as _transactions_app  # noqa: E402

app.add_typer(_transactions_app, name="transactions")
_delete_offsets.register(groups_app)


# -- offsets ------------------------------------------------------------------------------
@app.command("offsets")
def offsets(
    ctx: typer.Context,
    topic: str = TOPIC,
    time_spec: str = typer.Option(
        "latest", "--time", metavar="TIME", help="earliest, latest or ISO 8601 time"
    ),
) -> None:
    """Show offsets. Per partition: earliest, latest, or the first at or after a time."""
    st = state(ctx)
    spec = parse_offset_spec(time_spec)
    with st.admin() as admin:
        found = admin.list_offsets(topic, spec)
    if st.json:
        print_json(
            {
                "topic": topic,
                "time": time_spec,
                "partitions": [
                    {"topic": topic, "partition": p, "offset": o} for p, o in sorted(found.items())
                ],
            }
        )
    else:
        print_table(f"{topic} @ {time_spec}", ["partition", "offset"], sorted(found.items()))


from sparklog.cli import tools as _tools  # noqa: E402  (dump-log, perf)

_tools.register(app, perf_app)


# -- broker -------------------------------------------------------------------------------
@broker_app.command("start")
def broker_start(
    ctx: typer.Context,
    config: str | None = typer.Option(
        None, "--config", metavar="PATH", help="Broker config TOML (default: built-in defaults)"
    ),
    root: str | None = typer.Option(
        None,
        "--root",
        metavar="URL",
        help="Storage root URL (default: the global --address / $SPARKLOG_ADDRESS if it is "
        "a root, else the config's root)",
    ),
    listen: str | None = typer.Option(
        None, "--listen", metavar="HOST:PORT", help="Address to listen on"
    ),
    broker_id: int | None = typer.Option(None, "--broker-id", metavar="N", help="This broker's id"),
    kafka_listen: str | None = typer.Option(
        None,
        "--kafka-listen",
        metavar="HOST:PORT",
        help='Kafka protocol address (port 0 = free port; "" disables)',
    ),
) -> None:
    """Run a broker in the foreground. SIGTERM or Ctrl-C stops it gracefully."""
    if root is None:
        root = _root_of_address(ctx)
    if config is not None and not os.path.isfile(config):
        raise InvalidConfigurationError(f"--config {config!r} does not exist or is not a file")
    try:
        from sparklog.broker_lite.server import serve
    except ImportError as exc:
        raise InvalidConfigurationError(
            f"the broker is not available in this installation ({exc}); accepted: a "
            "storage root address works without one"
        ) from None
    from sparklog.mirror.admin import RootLinks

    serve(
        config_path=config,
        root=root,
        listen=listen,
        broker_id=broker_id,
        kafka_listen=kafka_listen,
        mirror=RootLinks,  # this process runs mirror links: the broker is handed the hook
    )


def _root_of_address(ctx: typer.Context) -> str | None:
    """The global address when it names a storage root (a broker serves a root)."""
    obj = ctx.find_root().obj
    if not isinstance(obj, CliState) or not obj.address:
        return None
    from sparklog.client.address import parse_address

    return parse_address(obj.address).root


# -- demo ---------------------------------------------------------------------------------
@app.command()
def demo(
    root: str | None = typer.Option(
        None,
        "--root",
        metavar="URL",
        help="Storage root URL (default: a fresh temp directory, removed after)",
    ),
    records: int = typer.Option(
        50_000, "--records", min=1000, metavar="N", help="Page views to produce"
    ),
    keep: bool = typer.Option(False, "--keep", help="Keep the root to explore it afterwards"),
) -> None:
    """Run the demo. Broker, producer, Spark streaming, reprocessing, end to end."""
    from sparklog.demo import DemoError, run_demo

    try:
        run_demo(root, records, keep or root is not None, console=stdout.console)
    except DemoError as exc:
        raise InvalidConfigurationError(f"demo failed: {exc}") from None


# -- entry point ----------------------------------------------------------------------------
#: Kafka tool flags a Kafka user types first, and the sparklog form of each.
KAFKA_HINTS = {
    "--bootstrap-server": "put the address before the command: sparklog -a HOST:PORT ...",
    "--broker-list": "put the address before the command: sparklog -a HOST:PORT ...",
    "--topic": "name the topic as an argument: sparklog consume TOPIC, sparklog produce TOPIC",
    "--create": "sparklog topics create TOPIC --partitions N",
    "--list": "sparklog topics list (or sparklog groups list)",
    "--describe": "sparklog topics describe TOPIC (or sparklog groups describe GROUP)",
    "--delete": "sparklog topics delete TOPIC (or sparklog groups delete GROUP)",
    "--alter": "sparklog topics alter TOPIC --config K=V",
    "--reset-offsets": "sparklog groups reset-offsets GROUP --topic TOPIC --to-earliest",
    "--delete-offsets": "sparklog groups delete-offsets GROUP --topic TOPIC",
    "--consumer-property": "use --storage-option K=V for storage, or the command's options",
    "--files": "sparklog dump-log TOPIC [--partition N] [--object KEY] --print-data "
    "(segments are named by topic and partition, on the storage root)",
}


#: the global options (they go before the command), with an example value
GLOBAL_FLAGS = {
    "-a": "HOST:PORT",
    "--address": "HOST:PORT",
    "-o": "json",
    "--output": "json",
    "-S": "K=V",
    "--storage-option": "K=V",
}


def _command_words(argv: list[str]) -> list[str]:
    """The command path of a command line (``topics describe``): its words before the first
    option, global options and their values skipped."""
    words: list[str] = []
    index = 0
    while index < len(argv):
        arg = argv[index]
        if arg in GLOBAL_FLAGS:
            index += 2
            continue
        if arg.startswith("-"):
            if words:
                break
            index += 1
            continue
        words.append(arg)
        index += 1
    return words


def _topic_hint(argv: list[str]) -> str:
    """The sparklog form of ``--topic X`` on a command that takes the topic as an argument."""
    words = _command_words(argv)
    value = "TOPIC"
    if "--topic" in argv and argv.index("--topic") + 1 < len(argv):
        value = argv[argv.index("--topic") + 1]
    if words:
        return f"name the topic as an argument: sparklog {' '.join(words)} {value}"
    return KAFKA_HINTS["--topic"]


def _hint(message: str, argv: list[str] | None = None) -> str:
    """A usage error about a Kafka tool's flag, with the sparklog form of that flag."""
    import re

    found = re.search(r"no such option: (--?[\w-]+)", message, re.IGNORECASE)
    flag = found.group(1) if found else ""
    if flag in GLOBAL_FLAGS:
        return (
            f"{message} ({flag} is a global option: put it before the command, as in "
            f"sparklog {flag} {GLOBAL_FLAGS[flag]} consume TOPIC)"
        )
    hint = _topic_hint(argv or []) if flag == "--topic" else KAFKA_HINTS.get(flag)
    return f"{message} (sparklog form: {hint})" if hint else message


def _json_errors(argv: list[str]) -> bool:
    """True when the command line asks for --output json (errors then print as JSON)."""
    for index, arg in enumerate(argv):
        if arg in ("-o", "--output") and index + 1 < len(argv):
            return argv[index + 1] == "json"
        if arg in ("--output=json", "-ojson"):
            return True
    return False


def _fail(message: str, code: int = 1, *, as_json: bool = False, kind: str = "") -> NoReturn:
    text = " ".join(message.split())
    if as_json:
        doc = {"error": {"code": kind or "INVALID_REQUEST", "message": text, "exit_code": code}}
        sys.stderr.write(json.dumps(doc) + "\n")
    else:
        sys.stderr.write(f"error: {text}\n")
    sys.stderr.flush()
    raise SystemExit(code)


def _setup_logging() -> None:
    """CLI logs: SPARKLOG_LOG_LEVEL (default WARNING) and SPARKLOG_LOG_FORMAT (text or json)."""
    level = os.environ.get("SPARKLOG_LOG_LEVEL", "WARNING").upper()
    fmt = os.environ.get("SPARKLOG_LOG_FORMAT", "text").lower()
    if level not in ("DEBUG", "INFO", "WARNING", "ERROR") or fmt not in ("text", "json"):
        _fail(
            f"SPARKLOG_LOG_LEVEL={level!r} / SPARKLOG_LOG_FORMAT={fmt!r} not accepted; accepted: "
            "DEBUG, INFO, WARNING, ERROR / text, json"
        )
    from sparklog.broker_lite.logs import setup_logging

    setup_logging(level, fmt, loggers=("sparklog", "storage"))


def main(argv: list[str] | None = None) -> None:
    """Run the CLI; user mistakes become one line on stderr and a non-zero exit."""
    args = list(sys.argv[1:] if argv is None else argv)
    from sparklog.cli import state as cli_state

    cli_state.COMMAND_LINE[:] = args
    as_json = _json_errors(args)
    _setup_logging()
    try:
        exit_code = app(args=args, prog_name="sparklog", standalone_mode=False)
    except SparklogError as exc:
        _fail(str(exc), getattr(exc, "exit_code", 1), as_json=as_json, kind=exc.code)
    except typer.Exit as exc:
        raise SystemExit(exc.exit_code) from None
    except typer.Abort:
        _fail("aborted", 130, as_json=as_json, kind="ABORTED")
    except typer.TyperException as exc:  # usage errors: bad option, missing argument...
        message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
        code = getattr(exc, "exit_code", 2) or 2
        if not message.strip():  # no_args_is_help: the help was printed already
            raise SystemExit(code) from None
        _fail(_hint(message, args), code, as_json=as_json, kind="USAGE")
    except KeyboardInterrupt:
        raise SystemExit(130) from None
    except BrokenPipeError:
        try:
            quiet_exit()
        except typer.Exit:
            raise SystemExit(0) from None
    except OSError as exc:
        _fail(f"{exc}", 1, as_json=as_json, kind="OS_ERROR")
    # typer answers Ctrl-C outside a command's own handling with exit code 130, returned
    # (not raised) when not standalone: never let it become a silent exit 0
    if isinstance(exit_code, int) and exit_code == 130:
        _fail("interrupted", 130, as_json=as_json, kind="INTERRUPTED")
    if isinstance(exit_code, int) and exit_code:
        raise SystemExit(exit_code)
