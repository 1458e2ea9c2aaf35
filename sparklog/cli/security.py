"""``sparklog users``: SCRAM users in a root's cluster metadata log (docs/security.md).

As ``kafka-configs --alter --add-config 'SCRAM-SHA-256=[password=...]'
--entity-type users``, but the password is read from a file (``-`` for stdin),
never from the command line, so it is not in shell history, ``ps`` or a log.
The commands work on a storage root (``--address`` a path or URL) or through a
broker (an address host:port, with the CLI's SASL settings for a user allowed
Alter on the cluster), which Kafka clients reach through AlterUserScramCredentials.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated

import typer

from sparklog.cli.output import print_json, print_table, say
from sparklog.cli.state import CliState, state
from sparklog.errors import InvalidConfigurationError

if TYPE_CHECKING:
    from sparklog.storage.cluster_metadata import ClusterMetadata

users_app = typer.Typer(
    no_args_is_help=True,
    rich_markup_mode=None,
    help="Create, delete, list SCRAM users (root or broker).",
)

USER = typer.Argument(..., metavar="NAME", help="User name (the principal is User:NAME)")
MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")


def _metadata(st: CliState, *, create: bool) -> ClusterMetadata:
    from sparklog.client.address import parse_address
    from sparklog.storage.catalog import open_root

    st.check()
    address = parse_address(st.address)
    if address.root is None:
        raise InvalidConfigurationError(
            f"this command needs a storage root as --address (got the broker address "
            f"{address.text!r}); against a broker, use a Kafka admin client's CreateAcls, "
            "DeleteAcls or AlterClientQuotas"
        )
    return open_root(address.root, st.storage_options or None, create=create).metadata


def _read_password(path: str) -> str:
    try:
        if path == "-":
            text = sys.stdin.read()
        else:
            with open(path, encoding="utf-8") as f:
                text = f.read()
    except OSError as exc:
        raise InvalidConfigurationError(
            f"--password-file {path!r} cannot be read ({exc.strerror})"
        ) from None
    password = text.rstrip("\r\n")
    if not password:
        raise InvalidConfigurationError(f"--password-file {path!r} is empty")
    return password


def _mechanisms(mechanism: list[str] | None) -> list[str]:
    chosen = [m.upper() for m in (mechanism or ["SCRAM-SHA-256"])]
    for m in chosen:
        if m not in MECHANISMS:
            raise InvalidConfigurationError(
                f"--mechanism {m!r} is not accepted; accepted: {', '.join(MECHANISMS)}"
            )
    return chosen


@users_app.command("create")
def users_create(
    ctx: typer.Context,
    name: str = USER,
    password_file: str = typer.Option(
        ...,
        "--password-file",
        metavar="FILE",
        help="File holding the password (first line; '-' reads stdin)",
    ),
    mechanism: Annotated[
        list[str] | None,
        typer.Option(
            "--mechanism",
            "-m",
            metavar="M",
            help="SCRAM-SHA-256 (default) or SCRAM-SHA-512; repeat for both",
        ),
    ] = None,
    iterations: int = typer.Option(4096, "--iterations", help="SCRAM iterations (4096-16384)"),
) -> None:
    """Create a user, or set its password.

    PLAIN logins check the same credential as SCRAM ones.
    """
    st = state(ctx)
    password = _read_password(password_file)
    chosen = _mechanisms(mechanism)
    with st.admin(create=True) as admin:
        for m in chosen:
            admin.create_user(name, password, m, iterations)
    if st.json:
        print_json({"user": name, "mechanisms": chosen})
    else:
        say(f"User:{name}: {', '.join(chosen)} credential set")


@users_app.command("delete")
def users_delete(
    ctx: typer.Context,
    name: str = USER,
    mechanism: Annotated[
        list[str] | None,
        typer.Option("--mechanism", "-m", metavar="M", help="Only this mechanism's credential"),
    ] = None,
) -> None:
    """Delete a user's credentials (every mechanism unless --mechanism)."""
    st = state(ctx)
    deleted: list[str] = []
    with st.admin() as admin:
        for m in _mechanisms(mechanism) if mechanism else [None]:
            deleted += admin.delete_user(name, m)
    if st.json:
        print_json({"user": name, "deleted": deleted})
    else:
        say(f"User:{name}: {', '.join(deleted)} credential deleted")


@users_app.command("list")
def users_list(ctx: typer.Context) -> None:
    """List users and their SCRAM mechanisms (never a password or hash)."""
    st = state(ctx)
    with st.admin() as admin:
        found = admin.list_users()
    if st.json:
        print_json(
            [
                {"user": u, "mechanisms": [{"mechanism": m, "iterations": i} for m, i in creds]}
                for u, creds in found.items()
            ]
        )
        return
    print_table(
        None,
        ["USER", "MECHANISMS"],
        [[u, ", ".join(f"{m} ({i})" for m, i in creds)] for u, creds in found.items()],
    )


# -- acls --------------------------------------------------------------------------------
acls_app = typer.Typer(
    no_args_is_help=True,
    rich_markup_mode=None,
    help="Add, remove, list ACLs (on a root; kafka-acls' flags).",
)

_PRINCIPALS = typer.Option(None, "--allow-principal", metavar="PRINCIPAL", help="User:NAME allowed")
_DENY = typer.Option(None, "--deny-principal", metavar="PRINCIPAL", help="User:NAME denied")
_OPERATION = typer.Option(
    None,
    "--operation",
    metavar="OP",
    help="Read, Write, Create, Delete, Alter, Describe, DescribeConfigs, AlterConfigs, "
    "IdempotentWrite, ClusterAction, All (repeatable)",
)
_TOPIC = typer.Option(None, "--topic", metavar="TOPIC", help="Topic resource ('*': every topic)")
_GROUP = typer.Option(None, "--group", metavar="GROUP", help="Group resource ('*': every group)")
_CLUSTER = typer.Option(False, "--cluster", help="The cluster resource")
_TXN = typer.Option(None, "--transactional-id", metavar="ID", help="Transactional id resource")
_PATTERN = typer.Option(
    "literal", "--resource-pattern-type", metavar="TYPE", help="literal (default) or prefixed"
)
_HOST = typer.Option("*", "--host", metavar="HOST", help="Host the ACL applies to ('*': any)")


def _operation_name(text: str) -> str:
    """kafka-acls' spelling (DescribeConfigs) to the model's (DESCRIBE_CONFIGS)."""
    import re

    return re.sub(r"(?<=[a-z])(?=[A-Z])", "_", text.strip()).upper().replace("-", "_")


def _resources(
    topic: list[str] | None, group: list[str] | None, cluster: bool, txn: list[str] | None
) -> list[tuple[str, str]]:
    from sparklog.security.acls import CLUSTER_NAME

    found = [("TOPIC", t) for t in topic or []]
    found += [("GROUP", g) for g in group or []]
    found += [("TRANSACTIONAL_ID", t) for t in txn or []]
    if cluster:
        found.append(("CLUSTER", CLUSTER_NAME))
    return found


def _print_bindings(st: CliState, bindings: list[dict[str, str]], title: str | None = None) -> None:
    """ACL bindings as JSON or a table, under ``title`` (what the rows are) when given."""
    if st.json:
        print_json(bindings)
        return
    print_table(
        title,
        ["PRINCIPAL", "PERMISSION", "OPERATION", "RESOURCE", "NAME", "PATTERN", "HOST"],
        [
            [
                b["principal"],
                b["permission"],
                b["operation"],
                b["resource_type"],
                b["name"],
                b["pattern_type"],
                b["host"],
            ]
            for b in bindings
        ],
    )


@acls_app.command("add")
def acls_add(
    ctx: typer.Context,
    allow_principal: list[str] | None = _PRINCIPALS,
    deny_principal: list[str] | None = _DENY,
    operation: list[str] | None = _OPERATION,
    topic: list[str] | None = _TOPIC,
    group: list[str] | None = _GROUP,
    cluster: bool = _CLUSTER,
    transactional_id: list[str] | None = _TXN,
    resource_pattern_type: str = _PATTERN,
    host: str = _HOST,
) -> None:
    """Add ACLs: each principal x operation x resource.

    As kafka-acls --add.
    """
    from sparklog.security import acls

    st = state(ctx)
    resources = _resources(topic, group, cluster, transactional_id)
    if not resources:
        raise InvalidConfigurationError(
            "name a resource: --topic, --group, --cluster or --transactional-id"
        )
    if not operation:
        raise InvalidConfigurationError(
            "name at least one --operation (e.g. Read, Write, Describe, All)"
        )
    if not allow_principal and not deny_principal:
        raise InvalidConfigurationError(
            "name a principal: --allow-principal or --deny-principal User:NAME"
        )
    bindings = [
        acls.binding(
            rtype,
            name,
            principal,
            _operation_name(op),
            permission,
            resource_pattern_type,
            host,
        )
        for permission, principals in (("ALLOW", allow_principal), ("DENY", deny_principal))
        for principal in principals or []
        for op in operation
        for rtype, name in resources
    ]
    acls.create(_metadata(st, create=True), bindings)
    _print_bindings(st, bindings)


def _filters(
    allow_principal: list[str] | None,
    deny_principal: list[str] | None,
    operation: list[str] | None,
    resources: list[tuple[str, str]],
    pattern: str | None,
) -> list[dict[str, object]]:
    principals: list[tuple[str | None, str | None]] = [
        *(("ALLOW", p) for p in allow_principal or []),
        *(("DENY", p) for p in deny_principal or []),
    ] or [(None, None)]
    where: list[tuple[str | None, str | None]] = list(resources) or [(None, None)]
    ops: list[str | None] = [_operation_name(o) for o in operation or []] or [None]
    return [
        {
            "resource_type": rtype,
            "name": name,
            "pattern_type": pattern.upper() if pattern else "ANY",
            "principal": principal,
            "host": None,
            "operation": op,
            "permission": permission,
        }
        for permission, principal in principals
        for op in ops
        for rtype, name in where
    ]


@acls_app.command("remove")
def acls_remove(
    ctx: typer.Context,
    allow_principal: list[str] | None = _PRINCIPALS,
    deny_principal: list[str] | None = _DENY,
    operation: list[str] | None = _OPERATION,
    topic: list[str] | None = _TOPIC,
    group: list[str] | None = _GROUP,
    cluster: bool = _CLUSTER,
    transactional_id: list[str] | None = _TXN,
    resource_pattern_type: str | None = typer.Option(
        None, "--resource-pattern-type", metavar="TYPE", help="literal, prefixed (default: any)"
    ),
) -> None:
    """Remove the ACLs matching the flags (as kafka-acls --remove)."""
    from sparklog.security import acls

    st = state(ctx)
    resources = _resources(topic, group, cluster, transactional_id)
    if not resources:
        raise InvalidConfigurationError(
            "name a resource: --topic, --group, --cluster or --transactional-id"
        )
    matched = acls.delete(
        _metadata(st, create=False),
        _filters(allow_principal, deny_principal, operation, resources, resource_pattern_type),
    )
    removed = {acls.key(b): b for found in matched for b in found}
    if not removed and not st.json:
        say("no ACL matched: nothing removed")
        return
    # headed as what was removed: a bare table reads like the ACLs that remain
    title = f"removed {len(removed)} ACL{'s' if len(removed) != 1 else ''}:"
    _print_bindings(st, list(removed.values()), title)


@acls_app.command("list")
def acls_list(
    ctx: typer.Context,
    topic: list[str] | None = _TOPIC,
    group: list[str] | None = _GROUP,
    cluster: bool = _CLUSTER,
    transactional_id: list[str] | None = _TXN,
    principal: str | None = typer.Option(
        None, "--principal", metavar="PRINCIPAL", help="Only this principal's ACLs"
    ),
) -> None:
    """List ACLs (all, or those on the named resources)."""
    from sparklog.security import acls

    st = state(ctx)
    image = _metadata(st, create=False).image()
    flts = _filters(None, None, None, _resources(topic, group, cluster, transactional_id), None)
    for flt in flts:
        flt["principal"] = principal
    found = sorted(
        (dict(v) for v in image.acls.values() if any(acls.matches_filter(v, f) for f in flts)),
        key=acls.key,
    )
    _print_bindings(st, found)


# -- quotas ------------------------------------------------------------------------------
quotas_app = typer.Typer(
    no_args_is_help=True,
    rich_markup_mode=None,
    help="Alter and describe client quotas (on a root).",
)
_USER = typer.Option(None, "--user", metavar="NAME", help="The user entity ('' = the default)")
_CLIENT = typer.Option(
    None, "--client-id", metavar="ID", help="The client-id entity ('' = the default)"
)
_IP = typer.Option(
    None,
    "--ip",
    metavar="ADDRESS",
    help="The ip entity ('' = the default IP), alone: its quota is connection_creation_rate",
)


_ENTITY_TYPE = typer.Option(
    None,
    "--entity-type",
    metavar="TYPE",
    help="kafka-configs' spelling: users, clients or ips, each followed by --entity-name or "
    "--entity-default (repeatable)",
)
_ENTITY_NAME = typer.Option(
    None, "--entity-name", metavar="NAME", help="The name of the --entity-type before it"
)
_ENTITY_DEFAULT = typer.Option(
    False, "--entity-default", help="The default entity of the --entity-type before it"
)
#: kafka-configs' --entity-type for quotas, and this command's option of the same entity
ENTITY_TYPES = {"users": "user", "clients": "client-id", "ips": "ip"}


def _kafka_entity(
    argv: list[str],
    types: list[str] | None,
    names: list[str] | None,
    default: bool,
    *,
    bare_is_any: bool = False,
) -> dict[str, str | None]:
    """kafka-configs' ``--entity-type users --entity-name bob [--entity-type clients
    --entity-default]`` as {"user": "bob", "client-id": ""}: each type takes the name, or
    the default (""), after it.  ``bare_is_any`` (describe): a type with neither means
    every entity of that type (None), as ``kafka-configs --describe --entity-type users``.

    Read in command-line order from ``argv`` (options of different names lose their order
    once parsed); InvalidConfigurationError names a type or pairing not accepted.
    """
    if not types:
        if names or default:
            raise InvalidConfigurationError(
                "--entity-name / --entity-default without --entity-type; accepted: "
                "--entity-type users|clients|ips --entity-name NAME (or --entity-default)"
            )
        return {}
    for kind in types:
        if kind not in ENTITY_TYPES:
            raise InvalidConfigurationError(
                f"--entity-type {kind!r} is not accepted for quotas; accepted: users, clients, ips"
            )
    found: dict[str, str | None] = {}
    pending: str | None = None

    def bare(kind: str) -> None:
        """A type with no name or default after it: every entity of it, or refused."""
        if not bare_is_any:
            raise InvalidConfigurationError(
                f"--entity-type {kind} has no --entity-name or --entity-default after it"
            )
        found[ENTITY_TYPES[kind]] = None

    words = iter(argv)
    for word in words:
        flag, eq, inline = word.partition("=")
        if flag == "--entity-type":
            if pending is not None:
                bare(pending)
            pending = inline if eq else next(words, "")
        elif flag in ("--entity-name", "--entity-default"):
            if pending is None:
                raise InvalidConfigurationError(
                    f"{flag} before any --entity-type; accepted: --entity-type users|clients|ips "
                    f"{flag}{' NAME' if flag == '--entity-name' else ''}"
                )
            value = (inline if eq else next(words, "")) if flag == "--entity-name" else ""
            if ENTITY_TYPES[pending] in found:
                raise InvalidConfigurationError(f"--entity-type {pending} given twice")
            found[ENTITY_TYPES[pending]] = value
            pending = None
    if pending is not None:
        bare(pending)
    return found


def _quota_entity(
    user: str | None,
    client_id: str | None,
    kafka_form: tuple[str | None, str | None, str | None] = (None, None, None),
    ip: str | None = None,
) -> list[tuple[str, str | None]]:
    """The entity named by --user / --client-id / --ip or by kafka-configs' --entity-type
    form (user, client id, ip)."""
    if kafka_form != (None, None, None):
        if user is not None or client_id is not None or ip is not None:
            raise InvalidConfigurationError(
                "--entity-type and --user/--client-id/--ip both given; accepted: one form"
            )
        user, client_id, ip = kafka_form
    entity: list[tuple[str, str | None]] = []
    if user is not None:
        entity.append(("user", user or None))
    if client_id is not None:
        entity.append(("client-id", client_id or None))
    if ip is not None:
        entity.append(("ip", ip or None))
    if not entity:
        raise InvalidConfigurationError(
            "name an entity: --user NAME and/or --client-id ID ('' = default), or --ip "
            "ADDRESS, or --entity-type users|clients|ips --entity-name NAME"
        )
    return entity


@quotas_app.command("alter")
def quotas_alter(
    ctx: typer.Context,
    user: str | None = _USER,
    client_id: str | None = _CLIENT,
    add_config: str | None = typer.Option(
        None,
        "--add-config",
        metavar="K=V,...",
        help="producer_byte_rate, consumer_byte_rate (bytes/s), request_percentage; for an "
        "ip: connection_creation_rate (connections/s)",
    ),
    delete_config: str | None = typer.Option(
        None, "--delete-config", metavar="K,...", help="Quotas to remove"
    ),
    entity_type: list[str] | None = _ENTITY_TYPE,
    entity_name: list[str] | None = _ENTITY_NAME,
    entity_default: bool = _ENTITY_DEFAULT,
    ip: str | None = _IP,
) -> None:
    """Set or remove an entity's quotas.

    As kafka-configs --alter --entity-type users/clients: either spelling works,
    --user bob or --entity-type users --entity-name bob.
    """
    from sparklog.security import quotas

    st = state(ctx)
    from sparklog.cli import state as cli_state

    argv = cli_state.COMMAND_LINE or sys.argv[1:]
    named = _kafka_entity(argv, entity_type, entity_name, entity_default)
    entity = _quota_entity(
        user, client_id, (named.get("user"), named.get("client-id"), named.get("ip")), ip
    )
    sets: dict[str, float] = {}
    for pair in (add_config or "").split(","):
        if not pair.strip():
            continue
        key, eq, value = pair.partition("=")
        try:
            sets[key.strip()] = float(value)
        except ValueError:
            raise InvalidConfigurationError(
                f"--add-config {pair!r} is not accepted; accepted: KEY=NUMBER"
            ) from None
        if not eq:
            raise InvalidConfigurationError(
                f"--add-config {pair!r} is not accepted; accepted: KEY=NUMBER"
            )
    removes = [k.strip() for k in (delete_config or "").split(",") if k.strip()]
    if not sets and not removes:
        raise InvalidConfigurationError("give --add-config K=V or --delete-config K")
    after = quotas.alter(_metadata(st, create=True), entity, sets, removes)
    doc = quotas.describe_doc(quotas.check_entity(entity), after)
    if st.json:
        print_json(doc)
    else:
        say(f"{doc['entity']}: {doc['quotas'] or 'no quotas'}")


@quotas_app.command("describe")
def quotas_describe(
    ctx: typer.Context,
    user: str | None = _USER,
    client_id: str | None = _CLIENT,
    entity_type: list[str] | None = _ENTITY_TYPE,
    entity_name: list[str] | None = _ENTITY_NAME,
    entity_default: bool = _ENTITY_DEFAULT,
    ip: str | None = _IP,
) -> None:
    """Show quotas (all, or those of the named entity types and names)."""
    from sparklog.cli import state as cli_state
    from sparklog.security import quotas

    argv = cli_state.COMMAND_LINE or sys.argv[1:]
    named = _kafka_entity(argv, entity_type, entity_name, entity_default, bare_is_any=True)
    if named and (user is not None or client_id is not None or ip is not None):
        raise InvalidConfigurationError(
            "--entity-type and --user/--client-id/--ip both given; accepted: one form"
        )
    if not named:
        given = (("user", user), ("client-id", client_id), ("ip", ip))
        named = {k: v for k, v in given if v is not None}
    st = state(ctx)
    image = _metadata(st, create=False).image()
    # Kafka's DescribeClientQuotas match types: 0 this name, 1 the default, 2 any
    components: list[tuple[str, int, str | None]] = [
        (kind, 2, None) if name is None else (kind, 0 if name else 1, name or None)
        for kind, name in named.items()
    ]
    docs = [
        quotas.describe_doc(entity, values)
        for entity, values in quotas.entries(image)
        if quotas.matches(entity, components, strict=False)
    ]
    if st.json:
        print_json(docs)
        return
    print_table(
        None,
        ["ENTITY", "QUOTAS"],
        [
            [
                ",".join(f"{k}={v}" for k, v in d["entity"].items()),
                ", ".join(f"{k}={v:g}" for k, v in d["quotas"].items()),
            ]
            for d in docs
        ],
    )
