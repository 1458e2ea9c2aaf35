"""``sparklog groups reset-offsets``: kafka-consumer-groups.sh --reset-offsets, dry run by default.

Scopes: ``--topic T`` (repeatable, ``T:0,1`` for some partitions), ``--all-topics``
(every topic the group has offsets in) or ``--from-file`` (CSV ``topic,partition,offset``,
the format ``--export`` prints).  A target outside a partition's
``[log start, high watermark]`` is clamped and the clamp is reported on stderr.
"""

from __future__ import annotations

import csv
import re
import sys
from dataclasses import dataclass
from typing import Annotated, Any

import typer

from sparklog.cli.output import print_json, print_table, stderr
from sparklog.cli.parse import one_group, parse_time_ms
from sparklog.cli.state import state
from sparklog.clock import now_ms
from sparklog.errors import InvalidConfigurationError
from sparklog.topic_partition import TopicPartition

_DURATION = re.compile(
    r"^P(?:(?P<d>\d+)D)?(?:T(?:(?P<h>\d+)H)?(?:(?P<m>\d+)M)?(?:(?P<s>\d+(?:\.\d+)?)S)?)?$",
    re.IGNORECASE,
)


def parse_duration_ms(text: str) -> int:
    """Kafka's --by-duration form, ISO 8601 ``PnDTnHnMnS`` (e.g. PT1H30M), in ms."""
    found = _DURATION.match(text.strip())
    if not found or text.strip().upper() in ("P", "PT"):
        raise InvalidConfigurationError(
            f"--by-duration {text!r} is not accepted; accepted: ISO 8601 duration such as "
            "PT1H, P1DT2H30M, PT45S"
        )
    days, hours, minutes = (int(found.group(g) or 0) for g in "dhm")
    seconds = float(found.group("s") or 0)
    return int(((days * 24 + hours) * 60 + minutes) * 60_000 + seconds * 1000)


def parse_topic_scope(text: str) -> tuple[str, set[int] | None]:
    """``topic`` or Kafka's ``topic:0,1,2``."""
    name, sep, parts = text.partition(":")
    if not sep:
        return name, None
    try:
        return name, {int(p) for p in parts.split(",") if p.strip()}
    except ValueError:
        raise InvalidConfigurationError(
            f"--topic {text!r} is not accepted; accepted: TOPIC or TOPIC:0,1,2"
        ) from None


def read_offsets_file(path: str) -> dict[TopicPartition, int]:
    """Kafka's reset CSV: ``topic,partition,offset`` per line."""
    out: dict[TopicPartition, int] = {}
    try:
        with open(path, newline="") as handle:
            for number, row in enumerate(csv.reader(handle), start=1):
                if not row or not "".join(row).strip():
                    continue
                try:
                    topic, partition, offset = (cell.strip() for cell in row)
                    out[TopicPartition(topic, int(partition))] = int(offset)
                except ValueError:
                    raise InvalidConfigurationError(
                        f"--from-file {path!r} line {number} {','.join(row)!r} is not accepted; "
                        "accepted: topic,partition,offset"
                    ) from None
    except OSError as exc:
        raise InvalidConfigurationError(
            f"--from-file {path!r} cannot be read: {exc.strerror}"
        ) from None
    return out


@dataclass
class Planned:
    topic: str
    partition: int
    committed: int | None
    requested: int
    new: int
    log_start_offset: int
    high_watermark: int

    @property
    def clamped(self) -> bool:
        return self.requested != self.new


def plan_resets(
    admin: Any,
    group: str,
    scopes: dict[str, set[int] | None],
    how: str,
    value: Any,
) -> list[Planned]:
    """The reset plan: per partition, the committed offset and the (clamped) new one."""
    plan: list[Planned] = []
    for topic, wanted in scopes.items():
        # a dry run of "to earliest" yields the committed offsets, and checks the partitions
        current = {
            r.partition: r.current
            for r in admin.reset_group_offsets(
                group, topic, to_earliest=True, partitions=wanted, execute=False
            )
        }
        described = admin.describe_topic(topic, sizes=False)
        at_time: dict[int, int] = {}
        if how in ("datetime", "duration"):
            when = value if how == "datetime" else now_ms() - value
            at_time = admin.list_offsets(topic, when)
        for part in described.partitions:
            if part.partition not in current:
                continue
            now = current[part.partition]
            start, end = part.log_start_offset, part.high_watermark
            if how == "earliest":
                requested = start
            elif how == "latest":
                requested = end
            elif how == "offset":
                requested = value
            elif how in ("datetime", "duration"):
                requested = at_time[part.partition]
            elif how == "shift":
                requested = (now if now is not None else start) + value
            elif how == "current":
                if now is None:
                    continue  # nothing committed: nothing to keep
                requested = now
            else:  # file
                if (topic, part.partition) not in value:
                    continue
                requested = value[(topic, part.partition)]
            new = min(max(requested, start), end)
            plan.append(Planned(topic, part.partition, now, requested, new, start, end))
    return plan


def register(groups_app: typer.Typer) -> None:
    groups_app.command("reset-offsets")(reset_offsets)


#: the group argument and --topic option of the group offset commands
GROUP_ARGUMENT = typer.Argument(..., metavar="GROUP", help="Consumer group id")
TopicScopes = Annotated[
    list[str] | None,
    typer.Option(
        "--topic", "-t", metavar="TOPIC[:P,P]", help="Topic, or some partitions; repeatable"
    ),
]


def reset_offsets(
    ctx: typer.Context,
    group_argument: str | None = typer.Argument(None, metavar="GROUP", help="Consumer group id"),
    group_option: str | None = typer.Option(
        None, "--group", metavar="GROUP", help="The group (kafka-consumer-groups' spelling)"
    ),
    topic: TopicScopes = None,
    all_topics: bool = typer.Option(
        False, "--all-topics", help="Every topic the group has committed offsets in"
    ),
    from_file: str | None = typer.Option(
        None, "--from-file", metavar="CSV", help="Offsets from a topic,partition,offset CSV"
    ),
    to_earliest: bool = typer.Option(False, "--to-earliest", help="To the log start"),
    to_latest: bool = typer.Option(False, "--to-latest", help="To the high watermark"),
    to_current: bool = typer.Option(False, "--to-current", help="Keep the committed offsets"),
    to_offset: int | None = typer.Option(None, "--to-offset", metavar="N", help="To offset N"),
    to_datetime: str | None = typer.Option(
        None, "--to-datetime", metavar="TIME", help="To the first offset at or after TIME"
    ),
    by_duration: str | None = typer.Option(
        None, "--by-duration", metavar="PnDTnHnMnS", help="To the first offset this long ago"
    ),
    shift_by: int | None = typer.Option(
        None, "--shift-by", metavar="N", help="Move the committed offsets by N (may be < 0)"
    ),
    export: bool = typer.Option(
        False, "--export", help="Print the plan as topic,partition,offset CSV (for --from-file)"
    ),
    execute: bool = typer.Option(False, "--execute", help="Apply (default: only print the plan)"),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Only print the plan (the default; Kafka's flag)"
    ),
    create_group: bool = typer.Option(
        False,
        "--create-group",
        help="With --execute, create the group if it does not exist (a misspelt group is "
        "otherwise refused)",
    ),
) -> None:
    """Plan new committed offsets. They change only with --execute.

    Out-of-range targets are clamped to [log start, high watermark], with a
    warning naming each clamped partition. A group that does not exist is
    refused with --execute unless --create-group is given (kafka-consumer-groups
    creates it without a word, so a misspelt name would make a new group).
    """
    group = one_group(group_argument, group_option)
    if dry_run and execute:
        raise InvalidConfigurationError("--dry-run and --execute both given; accepted: one of them")
    st = state(ctx)
    chosen = [
        (name, value)
        for name, value, given in (
            ("earliest", None, to_earliest),
            ("latest", None, to_latest),
            ("current", None, to_current),
            ("offset", to_offset, to_offset is not None),
            ("datetime", to_datetime, to_datetime is not None),
            ("duration", by_duration, by_duration is not None),
            ("shift", shift_by, shift_by is not None),
            ("file", from_file, from_file is not None),
        )
        if given
    ]
    if len(chosen) != 1:
        raise InvalidConfigurationError(
            f"choose exactly one reset ({', '.join(n for n, _ in chosen) or 'none given'}); "
            "accepted: --to-earliest, --to-latest, --to-current, --to-offset, --to-datetime, "
            "--by-duration, --shift-by, --from-file"
        )
    how, raw = chosen[0]
    value: Any = raw
    if how == "datetime":
        value = parse_time_ms(str(raw))
    elif how == "duration":
        value = parse_duration_ms(str(raw))
    elif how == "file":
        value = read_offsets_file(str(raw))
    scope_count = sum([bool(topic), all_topics])
    if how != "file" and scope_count != 1:
        raise InvalidConfigurationError(
            "choose the topics: --topic TOPIC[:P,P] (repeatable) or --all-topics"
        )
    if how == "file" and scope_count:
        raise InvalidConfigurationError("--from-file names its topics; drop --topic / --all-topics")
    with st.admin() as admin:
        known = admin.list_groups()
        if group not in known:
            _unknown_group(group, known, execute=execute, create=create_group)
        scopes: dict[str, set[int] | None] = {}
        if how == "file":
            for name, partition in value:
                existing = scopes.setdefault(name, set())
                assert existing is not None
                existing.add(partition)
        elif all_topics:
            described = admin.describe_group(group)
            scopes = {name: None for name in sorted({p.topic for p in described.lag})}
        else:
            for text in topic or []:
                name, parts = parse_topic_scope(text)
                scopes[name] = parts
        plan = plan_resets(admin, group, scopes, how, value)
        for row in plan:
            if row.clamped:
                stderr.print(
                    f"warning: {row.topic} partition {row.partition}: offset {row.requested} is "
                    f"outside [{row.log_start_offset}, {row.high_watermark}]; clamped to {row.new}",
                    highlight=False,
                )
        if execute:
            _apply(admin, group, plan)
    if export:
        writer = csv.writer(sys.stdout, lineterminator="\n")
        for row in plan:
            writer.writerow([row.topic, row.partition, row.new])
    elif st.json:
        print_json(
            {
                "group": group,
                "executed": execute,
                "partitions": [
                    {
                        "topic": r.topic,
                        "partition": r.partition,
                        "committed": r.committed,
                        "new": r.new,
                        "requested": r.requested,
                        "clamped": r.clamped,
                    }
                    for r in plan
                ],
            }
        )
    else:
        print_table(
            f"{'reset' if execute else 'plan for'} group {group}",
            ["topic", "partition", "current", "new"],
            [(r.topic, r.partition, r.committed, r.new) for r in plan],
        )
    if not execute:
        stderr.print("dry run: nothing changed; add --execute to apply")


def _unknown_group(group: str, known: list[str], *, execute: bool, create: bool) -> None:
    """A reset of a group that does not exist: refused with --execute unless --create-group
    (the dry run says so); the message names close group names, since a typo is likeliest."""
    import difflib

    close = difflib.get_close_matches(group, known, n=3)
    nearby = f" (did you mean {', '.join(repr(g) for g in close)}?)" if close else ""
    if not execute:
        stderr.print(
            f"note: group {group!r} does not exist{nearby}; --execute refuses it unless "
            "--create-group is given",
            highlight=False,
        )
    elif not create:
        from sparklog.errors import GroupIdNotFoundError

        raise GroupIdNotFoundError(
            f"group {group!r} does not exist{nearby}; nothing changed. To create it with these "
            "offsets, add --create-group"
        )


def _apply(admin: Any, group: str, plan: list[Planned]) -> None:
    """Commit the plan: one reset per (topic, new offset), each checked for active members."""
    targets: dict[tuple[str, int], list[int]] = {}
    for row in plan:
        targets.setdefault((row.topic, row.new), []).append(row.partition)
    for (topic, new), partitions in sorted(targets.items()):
        admin.reset_group_offsets(group, topic, to_offset=new, partitions=partitions, execute=True)
