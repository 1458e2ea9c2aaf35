"""``sparklog transactions list|describe|abort``: kafka-transactions' commands.

Kafka transactional ids and their coordinator state come from the cluster
metadata log (any broker, or the root itself); ``abort`` goes through a broker,
which writes the abort markers and fences the producer.
"""

from __future__ import annotations

from typing import Any

import typer

from sparklog.cli.output import print_json, print_table, say
from sparklog.cli.state import state

transactions_app = typer.Typer(
    no_args_is_help=True,
    rich_markup_mode=None,
    help="List, describe and abort Kafka transactions.",
)
TRANSACTIONAL_ID = typer.Argument(..., metavar="TRANSACTIONAL_ID", help="Transactional id")


def _doc(tid: str, s: dict[str, Any]) -> dict[str, Any]:
    return {
        "transactional_id": tid,
        "state": s["state"],
        "producer_id": s["pid"],
        "producer_epoch": s["epoch"],
        "timeout_ms": s["timeout_ms"],
        "started_ms": s.get("started_ms", -1),
        "partitions": [{"topic": t, "partition": p} for t, p in s.get("partitions", [])],
        "groups": sorted(s.get("groups", {})),
    }


@transactions_app.command("list")
def transactions_list(ctx: typer.Context) -> None:
    """List transactional ids with their state and producer id."""
    st = state(ctx)
    with st.admin() as admin:
        found = admin.list_transactions()
    if st.json:
        print_json([_doc(t, s) for t, s in found.items()])
        return
    print_table(
        None,
        ["transactional id", "state", "producer id", "epoch"],
        [(t, s["state"], s["pid"], s["epoch"]) for t, s in found.items()],
    )


@transactions_app.command("describe")
def transactions_describe(ctx: typer.Context, transactional_id: str = TRANSACTIONAL_ID) -> None:
    """Show a transactional id's state, timeout and partitions."""
    st = state(ctx)
    with st.admin() as admin:
        doc = _doc(transactional_id, admin.describe_transaction(transactional_id))
    if st.json:
        print_json(doc)
        return
    print_table(
        None,
        ["field", "value"],
        [(k, v) for k, v in doc.items() if k not in ("partitions", "groups")],
    )
    print_table(
        None, ["topic", "partition"], [(p["topic"], p["partition"]) for p in doc["partitions"]]
    )


@transactions_app.command("abort")
def transactions_abort(ctx: typer.Context, transactional_id: str = TRANSACTIONAL_ID) -> None:
    """Abort a transactional id's open (hanging) transaction.

    Its producer is fenced.
    """
    st = state(ctx)
    with st.admin() as admin:
        admin.abort_transaction(transactional_id)
        after = admin.describe_transaction(transactional_id)
    if st.json:
        print_json(_doc(transactional_id, after))
    else:
        say(f"transaction of {transactional_id} is {after['state']}")
