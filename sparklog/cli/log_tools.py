"""``sparklog log check``: every damaged or missing file of a root's logs, read-only."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import typer

from sparklog.cli.output import plural, print_json, print_table, say
from sparklog.cli.state import state
from sparklog.errors import SparklogError

log_app = typer.Typer(
    no_args_is_help=True,
    rich_markup_mode=None,
    help="Check a root's logs for damaged or missing files.",
)


class DamageFoundError(SparklogError, code="DAMAGE_FOUND"):
    """``log check`` found damaged or missing files (listed above the error)."""


_TOPICS = typer.Argument(
    None, metavar="[TOPIC]...", help="Only these topics (default: every log of the root)"
)


@log_app.command("check")
def check(ctx: typer.Context, topics: list[str] | None = _TOPICS) -> None:
    """List every damaged or missing file of the root's logs.

    Reads every commit, snapshot and segment reference (one listing per log
    folder, one read per file) and never repairs.
    Exits 1 if anything is found. Without TOPIC it also checks every group log
    and the cluster metadata log.
    """
    from sparklog.cli.tools import _root
    from sparklog.storage.log_check import check_root

    st = state(ctx)
    report = check_root(_root(st, "log check"), topics or None)
    rows = [[f.log, f.file, f.problem] for f in report.findings]
    if st.json:
        print_json(
            {
                "logs_checked": report.logs_checked,
                "files_checked": report.files_checked,
                "findings": [{"log": r[0], "file": r[1], "problem": r[2]} for r in rows],
            }
        )
    elif rows:
        print_table("damaged or missing", ["log", "file", "problem"], rows)
    checked = (
        f"{plural(report.files_checked, 'file')} of {plural(report.logs_checked, 'log')} checked"
    )
    if rows:
        raise DamageFoundError(f"{plural(len(rows), 'damaged or missing file')}; {checked}")
    if not st.json:
        say(f"no damage found: {checked}")


_RECOVER_TOPIC = typer.Argument(None, metavar="[TOPIC]", help="The topic whose shard log to repair")
_SHARD = typer.Option(
    None, "--shard", metavar="S", help="Only this shard of TOPIC (default: every shard)"
)
_GROUP = typer.Option(
    None, "--group", metavar="GROUP", help="Repair this group's offset log instead"
)
_METADATA = typer.Option(False, "--metadata", help="Repair the cluster metadata log instead")
_JOURNAL = typer.Option(
    None,
    "--journal",
    metavar="BROKER/ID",
    help="Repair this broker journal instead (as `log check` names it)",
)
_EXECUTE = typer.Option(False, "--execute", help="Act (default: a dry run that only reads)")


@log_app.command("recover")
def recover(
    ctx: typer.Context,
    topic: str | None = _RECOVER_TOPIC,
    shard: int | None = _SHARD,
    group: str | None = _GROUP,
    metadata: bool = _METADATA,
    journal: str | None = _JOURNAL,
    execute: bool = _EXECUTE,
) -> None:
    """Repair a log's damaged files (a dry run by default).

    Rebuilds the log from its newest sound snapshot and sound commits and puts a
    repair commit in place of each damaged or missing version. The offsets a lost
    commit may have given out are given up (listed), never given out again.
    Damaged snapshots are deleted when a sound base remains. A broker journal
    gets a repair version in place of each damaged or missing version, moving the
    next offset of every partition it leases past what the lost version can have
    given out.
    """
    from sparklog.cli.tools import _root
    from sparklog.errors import InvalidConfigurationError
    from sparklog.storage.log_check import read_shard
    from sparklog.storage.log_recover import (
        execute_journal_recovery,
        execute_recovery,
        metadata_repair_change,
        plan_journal_recovery,
        plan_recovery,
        shard_repair_change,
    )

    st = state(ctx)
    if sum((topic is not None, group is not None, metadata, journal is not None)) != 1:
        raise InvalidConfigurationError(
            "log recover needs one log; accepted: TOPIC [--shard S], --group GROUP, "
            "--metadata or --journal BROKER/ID"
        )
    if shard is not None and topic is None:
        raise InvalidConfigurationError("--shard needs TOPIC; accepted: TOPIC --shard S")
    root = _root(st, "log recover")
    if journal is not None:
        plan = plan_journal_recovery(root, journal)
        if execute and plan.needed:
            execute_journal_recovery(root, journal, plan)
        _report(st, [plan], execute)
        return
    jobs: list[tuple[Any, Any]] = []
    if topic is not None:
        found = root.topic(topic)
        if shard is not None and not 0 <= shard < found.shards:
            raise InvalidConfigurationError(
                f"--shard {shard}: topic {topic!r} has shards 0-{found.shards - 1}"
            )
        for s in range(found.shards) if shard is None else [shard]:
            jobs.append((found.open_shard(s), shard_repair_change(found, s)))
    elif group is not None:
        if group not in root.groups.list_groups():
            raise InvalidConfigurationError(f"--group {group!r}: no such group in the root")
        jobs.append((root.groups.log(group)[0], None))
    else:
        jobs.append((root.metadata.log, metadata_repair_change))
    plans = []
    damaged_journals: list[str] = []
    for log, change in jobs:
        plan = plan_recovery(log, change)
        if execute and plan.needed:
            execute_recovery(log, plan)
        plans.append(plan)
        if topic is not None and not plan.needed:
            # a sound shard log may lease a journal with a damaged version: its repair
            # is the journal's (`log check` names it too)
            _, _, leased = read_shard(log)
            if leased is not None and leased not in damaged_journals:
                damaged_journals.append(leased)
    _report(st, plans, execute, damaged_journals)


def _report(st: Any, plans: list[Any], execute: bool, damaged_journals: Sequence[str] = ()) -> None:
    needed = [p for p in plans if p.needed]
    if st.json:
        print_json(
            {
                "executed": execute and bool(needed),
                "damaged_journals": list(damaged_journals),
                "logs": [
                    {
                        "log": p.log,
                        "base": p.base,
                        "repairs": [
                            {"version": r.version, "problem": r.problem} for r in p.repairs
                        ],
                        "snapshots_deleted": [v for v, _ in p.snapshots_deleted],
                        "commits_pruned": p.commits_pruned,
                        "given_up": {str(k): v for k, v in sorted(p.given_up.items())},
                    }
                    for p in plans
                ],
            }
        )
        return
    for plan in needed:
        what = "version" if plan.log.startswith("journal ") else "commit"
        rows = [
            [plan.log, r.version, r.problem, f"replace with a repair {what}"] for r in plan.repairs
        ]
        rows += [[plan.log, v, f"snapshot {why}", "delete"] for v, why in plan.snapshots_deleted]
        rows += [[plan.log, v, "below the base", "delete"] for v in plan.commits_pruned]
        print_table(
            f"{plan.log}: rebuilt from {plan.base}", ["log", "version", "problem", "action"], rows
        )
        for partition, ranges in sorted(plan.given_up.items()):
            spans = ", ".join(f"[{a}, {b})" for a, b in ranges)
            say(f"partition {partition}: offsets {spans} given up (never given out again)")
    for journal in damaged_journals:
        say(
            f"journal {journal}, which the topic's shards lease, has a damaged version: "
            f"repair it with `sparklog log recover --journal {journal}`"
        )
    if not needed and damaged_journals:
        say(f"the {plural(len(plans), 'shard log')} need no repair of their own")
    elif not needed:
        say(f"nothing to repair in {plural(len(plans), 'log')}")
    elif execute:
        say(f"repaired {plural(len(needed), 'log')}")
    else:
        logs = plural(len(needed), "log")
        say(f"dry run: nothing changed; run again with --execute to repair {logs}")
