"""Rendering for the CLI: rich tables for people, stable JSON for scripts.

Piped output is never cut to 80 columns: a console that is not a terminal gets
a width wide enough for any table (``COLUMNS`` still wins when set).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from dataclasses import asdict, is_dataclass
from typing import TYPE_CHECKING, Any, NoReturn

from sparklog.errors import SparklogError

if TYPE_CHECKING:
    from rich.console import Console

#: Width of a console that is not a terminal: tables are as wide as their cells.
PIPED_WIDTH = 10_000


class LazyConsole:
    """A rich Console for stdout or stderr, built on first use.

    Commands that print plain lines (``topics list``, ``groups list``, one-line
    confirmations) go through :func:`say` and never import rich; tables, markup
    and progress bars build the Console when they first need it.
    """

    def __init__(self, use_stderr: bool) -> None:
        self.use_stderr = use_stderr
        self._console: Console | None = None

    @property
    def console(self) -> Console:
        if self._console is None:
            from rich.console import Console

            stream = sys.stderr if self.use_stderr else sys.stdout
            width = None
            if "COLUMNS" not in os.environ and not stream.isatty():
                width = PIPED_WIDTH
            self._console = Console(soft_wrap=True, width=width, stderr=self.use_stderr)
        return self._console

    def print(self, *objects: Any, **kwargs: Any) -> None:
        self.console.print(*objects, **kwargs)


stdout = LazyConsole(use_stderr=False)
stderr = LazyConsole(use_stderr=True)


def plural(count: int, noun: str) -> str:
    """``1 partition``, ``3 partitions``: counts in messages read as English."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def say(line: str) -> None:
    """One plain line on stdout (no markup, no rich import)."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def warn(line: str) -> None:
    """One ``warning:`` line on stderr (never a logging record with a timestamp)."""
    sys.stderr.write(f"warning: {line}\n")
    sys.stderr.flush()


def to_jsonable(value: Any) -> Any:
    """Dataclasses, tuples, bytes (utf-8, else {"base64": ...}) into JSON-ready values."""
    from sparklog.cli.lines import decode

    if is_dataclass(value) and not isinstance(value, type):
        return to_jsonable(asdict(value))
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set):
        return [to_jsonable(v) for v in value]
    if isinstance(value, bytes):
        return decode(value)
    return value


def print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(to_jsonable(value), sort_keys=False) + "\n")
    sys.stdout.flush()


def print_table(title: str | None, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for name in columns:
        table.add_column(name, justify="right" if name in NUMERIC else "left")
    for row in rows:
        table.add_row(*["-" if v is None else str(v) for v in row])
    stdout.print(table)


NUMERIC = {
    "partitions",
    "partition",
    "log start",
    "high watermark",
    "size bytes",
    "committed",
    "lag",
    "offset",
    "current",
    "new",
    "records",
}


class CommandInterrupted(SparklogError, code="INTERRUPTED"):
    """The user interrupted a command (Ctrl-C); the message says what it had done."""

    exit_code = 130


class PartlyDoneError(SparklogError, code="PARTLY_DONE"):
    """A command failed after doing part of its work; the message says which part."""


def quiet_exit() -> NoReturn:
    """Exit 0 without a word once stdout's reader left (``| head``): no flush error at exit."""
    import typer

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except OSError:
        pass
    raise typer.Exit(0)
