"""Rendering for the CLI: rich tables for people, stable JSON for scripts."""

from __future__ import annotations

import base64
import datetime as dt
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict, is_dataclass
from typing import Any

from rich.console import Console
from rich.table import Table

stdout = Console(soft_wrap=True)
stderr = Console(stderr=True, soft_wrap=True)


def to_jsonable(value: Any) -> Any:
    """Dataclasses, tuples, bytes (utf-8, else {"base64": ...}) into JSON-ready values."""
    if is_dataclass(value) and not isinstance(value, type):
        return to_jsonable(asdict(value))
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set):
        return [to_jsonable(v) for v in value]
    if isinstance(value, bytes):
        return decode_bytes(value)
    return value


def decode_bytes(value: bytes | None) -> Any:
    if value is None:
        return None
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(value).decode()}


def print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(to_jsonable(value), sort_keys=False) + "\n")
    sys.stdout.flush()


def print_table(title: str | None, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
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


def iso_ms(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.timezone.utc).isoformat(
        timespec="milliseconds"
    )
