"""``sparklog mirror``: mirror links onto this root (the global ``--address``, the destination).

Links live in the destination's cluster metadata log; ``mirror run LINK`` is the
long-running copier; ``mirror promote TOPIC`` stops mirroring a topic and makes
it writable (failover).
"""

from __future__ import annotations

import logging
from typing import Annotated, Any

import typer

from sparklog.cli.output import print_json, print_table, say
from sparklog.cli.state import state
from sparklog.clock import now_ms
from sparklog.errors import InvalidConfigurationError

mirror_app = typer.Typer(
    no_args_is_help=True,
    rich_markup_mode=None,
    help="Mirror topics between clusters, with offsets. The source is another root or a "
    "Kafka cluster (kafka://host:port); the global --address is the destination root.",
)


def _root(ctx: typer.Context, *, create: bool = False) -> Any:
    from sparklog.client.address import parse_address
    from sparklog.storage import open_root

    st = state(ctx).check()
    url = parse_address(st.address).root if st.address else None
    if not url:
        raise InvalidConfigurationError(
            "mirror links live in the destination root: give it as --address (a path, "
            "file://, s3://), not a broker's host:port"
        )
    # only `mirror create` makes a missing root; the others refuse it (a typo'd address)
    return open_root(url, st.storage_options, create=create)


def _describe(link: Any) -> dict[str, Any]:
    return {
        "name": link.name,
        "source": link.source,
        "topics": link.topics,
        "groups": link.groups,
        "prefix": link.prefix,
        "state": "paused" if link.paused else "active",
    }


@mirror_app.command("create")
def create(
    ctx: typer.Context,
    link: str = typer.Argument(..., metavar="LINK"),
    source: str = typer.Option(
        ..., "--source", metavar="ADDRESS", help="Source root URL, or kafka://host:port"
    ),
    topics: str = typer.Option(..., "--topics", metavar="PATTERN", help="Topics (regex)"),
    groups: str = typer.Option("", "--groups", metavar="PATTERN", help="Groups to sync (regex)"),
    prefix: str = typer.Option("", "--prefix", metavar="P", help="Mirror topics named P+topic"),
    source_option: Annotated[
        list[str] | None,
        typer.Option("--source-option", metavar="K=V", help="Source storage option (repeatable)"),
    ] = None,
) -> None:
    """Create a mirror link on this root (the destination)."""

    from sparklog.mirror.links import create_link
    from sparklog.storage_options import parse_storage_options

    root = _root(ctx, create=True)
    made = create_link(
        root,
        link,
        source=source,
        topics=topics,
        groups=groups,
        prefix=prefix,
        source_options=parse_storage_options(source_option or []),
        created_ms=now_ms(),
    )
    if state(ctx).json:
        print_json(_describe(made))
    else:
        say(f"created mirror link {link}: {source} topics {topics!r} -> {root.url}")


@mirror_app.command("list")
def list_(ctx: typer.Context) -> None:
    """List the mirror links of this root."""
    from sparklog.mirror.links import list_links

    links = [_describe(link) for link in list_links(_root(ctx))]
    if state(ctx).json:
        print_json(links)
    elif not links:
        say("no mirror links")
    else:
        columns = ["name", "source", "topics", "groups", "prefix", "state"]
        print_table(None, columns, [[d[c] for c in columns] for d in links])


@mirror_app.command("describe")
def describe(ctx: typer.Context, link: str = typer.Argument(..., metavar="LINK")) -> None:
    """A link's definition and lag per partition.

    Reads the source to compute the lag; an unreachable source is reported, not fatal.
    """
    from sparklog.mirror.copier import lag
    from sparklog.mirror.links import get_link

    root = _root(ctx)
    found = get_link(root, link)
    out = _describe(found)
    try:
        if found.kafka_source:
            from sparklog.mirror.kafka_source import KafkaMirror

            source = KafkaMirror(root, found)
            try:
                lags = source.lag()
            finally:
                source.close()
        else:
            lags = lag(root, found)
        out["partitions"] = [
            {
                "topic": x.topic,
                "partition": x.partition,
                "source_end": x.source_end,
                "mirror_end": x.mirror_end,
                "lag_records": x.lag_records,
                "lag_seconds": round(x.lag_seconds, 3),
                "gaps": [list(g) for g in x.gaps],
            }
            for x in lags
        ]
    except (OSError, Exception) as exc:  # the source unreachable: say why, keep going
        out["source_error"] = f"{type(exc).__name__}: {exc}"
        out["partitions"] = []
    if state(ctx).json:
        print_json(out)
        return
    say(
        f"link {found.name}: {found.source} topics {found.topics!r}"
        + (f" groups {found.groups!r}" if found.groups else "")
        + (f" prefix {found.prefix!r}" if found.prefix else "")
        + f" ({out['state']})"
    )
    if "source_error" in out:
        say(f"source unreachable: {out['source_error']}")
    columns = ["topic", "partition", "source_end", "mirror_end", "lag_records", "lag_seconds"]
    rows = [[p[c] for c in columns] for p in out["partitions"]]
    if rows:
        print_table(None, columns, rows)


@mirror_app.command("pause")
def pause(ctx: typer.Context, link: str = typer.Argument(..., metavar="LINK")) -> None:
    """Pause a link (its runner copies nothing until resumed)."""
    from sparklog.mirror.links import set_paused

    set_paused(_root(ctx), link, True)
    say(f"paused mirror link {link}")


@mirror_app.command("resume")
def resume(ctx: typer.Context, link: str = typer.Argument(..., metavar="LINK")) -> None:
    """Resume a paused link."""
    from sparklog.mirror.links import set_paused

    set_paused(_root(ctx), link, False)
    say(f"resumed mirror link {link}")


@mirror_app.command("delete")
def delete(ctx: typer.Context, link: str = typer.Argument(..., metavar="LINK")) -> None:
    """Delete a link; its mirror topics stay read-only until promoted."""
    from sparklog.mirror.links import delete_link

    delete_link(_root(ctx), link)
    say(f"deleted mirror link {link}")


@mirror_app.command("promote")
def promote(ctx: typer.Context, topic: str = typer.Argument(..., metavar="TOPIC")) -> None:
    """Make a mirror topic writable (failover).

    Stops mirroring TOPIC; producers write at its next offset.
    """
    from sparklog.mirror.copier import promote as promote_topic

    info = promote_topic(_root(ctx), topic)
    link = (info.mirror or {}).get("link")
    say(f"promoted {topic}: writable at its next offset, no longer mirrored by link {link}")


@mirror_app.command("run")
def run(
    ctx: typer.Context,
    link: str = typer.Argument(..., metavar="LINK"),
    once: bool = typer.Option(False, "--once", help="Copy until caught up, then stop"),
    interval_ms: int = typer.Option(200, "--interval-ms", min=1, help="Pause when caught up"),
    group_sync_ms: int = typer.Option(
        5000, "--group-sync-interval-ms", min=1, help="How often groups are synced"
    ),
    metrics_listen: str = typer.Option(
        "", "--metrics-listen", metavar="HOST:PORT", help="Serve Prometheus /metrics (lag)"
    ),
) -> None:
    """Run a link: copy continuously.

    Until the link is deleted or the process stopped; --once stops when caught up.
    """
    from sparklog.mirror.copier import mirror_for
    from sparklog.mirror.copier import run as run_link
    from sparklog.mirror.links import get_link

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    root = _root(ctx)
    if once:
        mirror = mirror_for(root, get_link(root, link))
        records = 0
        while True:
            report = mirror.step()
            records += report.records
            if not report.records:
                break
        say(f"mirror link {link}: copied {records} records; caught up")
        return
    metrics = None
    if metrics_listen:
        from sparklog.mirror.metrics import MirrorMetrics

        metrics = MirrorMetrics()
        port = metrics.serve(metrics_listen)
        logging.getLogger("sparklog.mirror").info("metrics on port %d", port)
    run_link(
        root,
        link,
        interval_ms=interval_ms,
        group_sync_interval_ms=group_sync_ms,
        metrics=metrics,
    )
