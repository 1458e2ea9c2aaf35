"""docs/client.md's table of commands names every command the CLI has, and only those
(issue 39: "docs/client.md's CLI table complete and true")."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import click
from typer.main import get_command

from sparklog.cli.app import app

DOC = Path(__file__).resolve().parents[2] / "docs" / "client.md"


def _commands() -> set[str]:
    found: set[str] = set()

    def walk(command: Any, ctx: click.Context, prefix: str) -> None:
        if hasattr(command, "list_commands"):  # a group (typer's own, not click.Group)
            for name in command.list_commands(ctx):
                sub = command.get_command(ctx, name)
                assert sub is not None
                walk(sub, click.Context(sub, parent=ctx), f"{prefix} {name}".strip())
        else:
            found.add(prefix)

    root = get_command(app)
    walk(root, click.Context(root), "")
    return found


def test_the_docs_table_names_every_command_and_no_other() -> None:
    rows = set(re.findall(r"^\| `sparklog ([a-z -]+)` \|", DOC.read_text(), re.M))
    commands = _commands()
    assert len(commands) > 40
    assert rows == commands, (sorted(commands - rows), sorted(rows - commands))
