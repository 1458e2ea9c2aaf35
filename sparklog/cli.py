"""The ``sparklog`` command line."""

from __future__ import annotations

import tempfile
import time

import typer
from rich.console import Console

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="sparklog: Kafka's model on object storage, for Spark.",
)
console = Console()


@app.command()
def demo(
    root: str = typer.Option(None, help="Storage root URL (default: a fresh temp directory)"),
    records: int = typer.Option(100_000, help="Records to produce"),
) -> None:
    """Storage quick start: create a topic, append records, read them back."""
    from storage import make_batch, open_root

    url = root or tempfile.mkdtemp(prefix="sparklog-demo-")
    console.print(f"root: [bold]{url}[/]")
    log_root = open_root(url)
    log_root.create_topic("quickstart", partitions=3)
    topic = log_root.topic("quickstart")
    started = time.perf_counter()
    per_partition = records // 3
    for p in range(3):
        topic.append(p, make_batch([b"x" * 100] * per_partition, keys=[b"k" * 16] * per_partition))
    elapsed = time.perf_counter() - started
    total = sum(topic.partition(p).read(0).num_rows for p in range(3))
    console.print(
        f"appended and read back {total} records ({total / elapsed:,.0f} records/s append)"
    )


def main() -> None:
    app()
