"""Rendering for the CLI: rich tables for people, stable JSON for scripts.

Piped output is never cut to 80 columns: a console that is not a terminal gets
a width wide enough for any table (``COLUMNS`` still wins when set).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import asdict, is_dataclass
from typing import Any, NoReturn

from rich.console import Console

#: Width of a console that is not a terminal: tables are as wide as their cells.
PIPED_WIDTH = 10_000


def _console(stream: Any, **kwargs: Any) -> Console:
    width = None
    if "COLUMNS" not in os.environ and not stream.isatty():
        width = PIPED_WIDTH
    return Console(soft_wrap=True, width=width, **kwargs)


stdout = _console(sys.stdout)
stderr = _console(sys.stderr, stderr=True)


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


def quiet_exit() -> NoReturn:
    """Exit 0 without a word once stdout's reader left (``| head``): no flush error at exit."""
    import typer

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except OSError:
        pass
    raise typer.Exit(0)


def iso_ms(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.timezone.utc).isoformat(
        timespec="milliseconds"
    )
