"""``sparklog users``: SCRAM users in a root's cluster metadata log (DESIGN.md §7).

As ``kafka-configs --alter --add-config 'SCRAM-SHA-256=[password=...]'
--entity-type users``, but the password is read from a file (``-`` for stdin),
never from the command line, so it is not in shell history, ``ps`` or a log.
The commands work on a storage root (``--address`` a path or URL); a broker
takes the same change through Kafka's AlterUserScramCredentials.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated

import typer

from sparklog.cli.output import print_json, print_table, say
from sparklog.cli.state import CliState, state
from sparklog.errors import ConfigError

if TYPE_CHECKING:
    from sparklog.storage.cluster_metadata import ClusterMetadata

users_app = typer.Typer(
    no_args_is_help=True,
    rich_markup_mode=None,
    help="Create, delete, list SCRAM users (on a storage root).",
)

USER = typer.Argument(..., metavar="NAME", help="User name (the principal is User:NAME)")
MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")


def _metadata(st: CliState, *, create: bool) -> ClusterMetadata:
    from sparklog.client.address import parse_address
    from sparklog.storage.catalog import open_root

    st.check()
    address = parse_address(st.address)
    if address.root is None:
        raise ConfigError(
            f"sparklog users needs a storage root as --address (got the broker address "
            f"{address.text!r}); against a broker, use a Kafka admin client's "
            "AlterUserScramCredentials"
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
        raise ConfigError(f"--password-file {path!r} cannot be read ({exc.strerror})") from None
    password = text.rstrip("\r\n")
    if not password:
        raise ConfigError(f"--password-file {path!r} is empty")
    return password


def _mechanisms(mechanism: list[str] | None) -> list[str]:
    chosen = [m.upper() for m in (mechanism or ["SCRAM-SHA-256"])]
    for m in chosen:
        if m not in MECHANISMS:
            raise ConfigError(
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
    """Create a user, or set its password (PLAIN logins check the same credential)."""
    from sparklog.security import users

    st = state(ctx)
    password = _read_password(password_file)
    metadata = _metadata(st, create=True)
    done = []
    for m in _mechanisms(mechanism):
        users.create(metadata, name, m, password, iterations)
        done.append(m)
    if st.json:
        print_json({"user": name, "mechanisms": done})
    else:
        say(f"User:{name}: {', '.join(done)} credential set")


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
    from sparklog.security import users

    st = state(ctx)
    metadata = _metadata(st, create=False)
    deleted: list[str] = []
    for m in _mechanisms(mechanism) if mechanism else [None]:
        deleted += users.delete(metadata, name, m)
    if st.json:
        print_json({"user": name, "deleted": deleted})
    else:
        say(f"User:{name}: {', '.join(deleted)} credential deleted")


@users_app.command("list")
def users_list(ctx: typer.Context) -> None:
    """List users and their SCRAM mechanisms (never a password or hash)."""
    from sparklog.security import users

    st = state(ctx)
    metadata = _metadata(st, create=False)
    found = users.users(metadata.image())
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
