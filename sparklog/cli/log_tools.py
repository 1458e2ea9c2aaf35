"""``sparklog log check``: every damaged or missing file of a root's logs, read-only."""

from __future__ import annotations

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
