"""``sparklog mirror``: mirror links onto this cluster (the global ``--address``: the destination).

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
from sparklog.errors import InvalidConfigurationError

mirror_app = typer.Typer(
    no_args_is_help=True,
    rich_markup_mode=None,
    help="Mirror topics between clusters, with offsets. The source is another root or a "
    "Kafka cluster (kafka://host:port); the global --address is the destination (a root "
    "or a broker).",
)


def _root(ctx: typer.Context, command: str) -> Any:
    """The destination root (``mirror run`` copies into it directly)."""
    from sparklog.client.address import parse_address
    from sparklog.storage import open_root

    st = state(ctx).check()
    url = parse_address(st.address).root if st.address else None
    if not url:
        raise InvalidConfigurationError(
            f"mirror {command} copies into the destination root: give it as --address (a "
            "path, file://, s3://), not a broker's host:port (a broker runs links itself: "
            "broker key mirror_links)"
        )
    return open_root(url, st.storage_options, create=False)


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
    """Create a mirror link on this cluster (the destination)."""
    from sparklog.mirror.links import KAFKA_SCHEME
    from sparklog.storage_options import parse_storage_options

    if not source.startswith(KAFKA_SCHEME):
        from sparklog.storage.objectstore import normalize_url

        source = normalize_url(source)  # a relative path is this shell's, not a broker's
    st = state(ctx)
    # only `mirror create` makes a missing root; the others refuse it (a typo'd address)
    with st.admin(create=True) as admin:
        made = admin.create_mirror_link(
            link,
            source=source,
            topics=topics,
            groups=groups,
            prefix=prefix,
            source_options=parse_storage_options(source_option or []),
        )
    if st.json:
        print_json(made)
    else:
        say(f"created mirror link {link}: {made['source']} topics {topics!r} -> {st.address}")


@mirror_app.command("list")
def list_(ctx: typer.Context) -> None:
    """List the mirror links of this cluster."""
    st = state(ctx)
    with st.admin() as admin:
        links = admin.list_mirror_links()
    if st.json:
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
    st = state(ctx)
    with st.admin() as admin:
        out = admin.describe_mirror_link(link)
    if st.json:
        print_json(out)
        return
    say(
        f"link {out['name']}: {out['source']} topics {out['topics']!r}"
        + (f" groups {out['groups']!r}" if out["groups"] else "")
        + (f" prefix {out['prefix']!r}" if out["prefix"] else "")
        + f" ({out['state']})"
    )
    if "source_error" in out:
        say(f"source unreachable: {out['source_error']}")
    for why in out.get("stopped", {}).values():
        say(f"stopped: {why}")
    columns = ["topic", "partition", "source_end", "mirror_end", "lag_records", "lag_seconds"]
    rows = [[p[c] for c in columns] for p in out["partitions"]]
    if rows:
        print_table(None, columns, rows)


def _set_paused(ctx: typer.Context, link: str, paused: bool) -> None:
    with state(ctx).admin() as admin:
        admin.pause_mirror_link(link, paused)
    say(f"{'paused' if paused else 'resumed'} mirror link {link}")


@mirror_app.command("pause")
def pause(ctx: typer.Context, link: str = typer.Argument(..., metavar="LINK")) -> None:
    """Pause a link (its runner copies nothing until resumed)."""
    _set_paused(ctx, link, True)


@mirror_app.command("resume")
def resume(ctx: typer.Context, link: str = typer.Argument(..., metavar="LINK")) -> None:
    """Resume a paused link."""
    _set_paused(ctx, link, False)


@mirror_app.command("delete")
def delete(ctx: typer.Context, link: str = typer.Argument(..., metavar="LINK")) -> None:
    """Delete a link; its mirror topics stay read-only until promoted."""
    with state(ctx).admin() as admin:
        admin.delete_mirror_link(link)
    say(f"deleted mirror link {link}")


@mirror_app.command("promote")
def promote(ctx: typer.Context, topic: str = typer.Argument(..., metavar="TOPIC")) -> None:
    """Make a mirror topic writable (failover).

    Stops mirroring TOPIC; producers write at its next offset.
    """
    with state(ctx).admin() as admin:
        mirror = admin.promote_mirror_topic(topic)
    link = mirror.get("link")
    say(f"promoted {topic}: writable at its next offset, no longer mirrored by link {link}")


@mirror_app.command("reverse")
def reverse(
    ctx: typer.Context,
    link: str = typer.Argument(..., metavar="LINK"),
    name: str = typer.Option("", "--name", metavar="NAME", help="Reverse link (LINK-back)"),
    source_option: Annotated[
        list[str] | None,
        typer.Option("--source-option", metavar="K=V", help="Option to read this root from there"),
    ] = None,
) -> None:
    """Fail back after a promote: the reverse link on LINK's source.

    Mirrors this root's promoted topics back to LINK's source (a root), from where the
    copy ended; refuses if that source has records past those ends.
    """
    from sparklog.storage_options import parse_storage_options

    st = state(ctx)
    with st.admin() as admin:
        done = admin.reverse_mirror_link(
            link, reverse_name=name, source_options=parse_storage_options(source_option or [])
        )
    if st.json:
        print_json(done)
        return
    topics = ", ".join(done["mirror_topics"]) or "none yet"
    say(
        f"created mirror link {done['name']} on {done['on']} (source {done['source']}, topics "
        f"{done['topics']!r}); its mirror topics there now: {topics}. Run it there: "
        f"sparklog -a {done['on']} mirror run {done['name']}"
    )


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
    from sparklog.mirror.links import get_link
    from sparklog.mirror.runner import mirror_for
    from sparklog.mirror.runner import run as run_link

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    root = _root(ctx, "run")
    if once:
        found = get_link(root, link)
        if found.paused:
            say(f"mirror link {link} is paused: copied nothing (mirror resume {link})")
            return
        mirror = mirror_for(root, found)
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
