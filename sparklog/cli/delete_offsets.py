"""``sparklog groups delete-offsets``: kafka-consumer-groups.sh --delete-offsets.

Drops a group's committed offsets of whole topics (``--topic T``) or some of
their partitions (``--topic T:0,1``); the group then starts those partitions
from its ``auto.offset.reset`` position.  Like Kafka's tool (and ``groups
delete``) it acts at once; ``--dry-run`` prints what would go.  It is refused,
with nothing deleted, while active members of the group are subscribed to one
of the topics (Kafka's GROUP_SUBSCRIBED_TO_TOPIC): they would commit again.
A topic that no longer exists can still have its leftover offsets dropped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import typer

from sparklog.cli.output import print_json, print_table, stderr
from sparklog.cli.resets import GROUP_ARGUMENT, TopicScopes, parse_topic_scope
from sparklog.cli.state import state
from sparklog.errors import (
    GroupIdNotFoundError,
    GroupSubscribedToTopicError,
    InvalidConfigurationError,
    UnknownTopicOrPartitionError,
)


@dataclass(frozen=True)
class Doomed:
    """A partition whose committed offset is to be dropped (``committed`` None: it has none)."""

    topic: str
    partition: int
    committed: int | None


def _subscribed_topics(admin: Any, group: str) -> set[str]:
    """Topics the group's active members are subscribed to or were assigned."""
    described = admin.describe_group(group)
    topics = {t for m in described.members for t in m.topics}
    return topics | {tp.topic for m in described.members for tp in m.assignment}


def plan_deletion(admin: Any, group: str, scopes: dict[str, set[int] | None]) -> list[Doomed]:
    """Per requested partition, its committed offset now; refuses what Kafka refuses."""
    if group not in admin.list_groups():
        raise GroupIdNotFoundError(f"unknown group {group!r}; nothing deleted")
    busy = sorted(set(scopes) & _subscribed_topics(admin, group))
    if busy:
        raise GroupSubscribedToTopicError(
            f"group {group!r} has active members subscribed to topic {busy[0]!r}; stop its "
            "consumers before deleting its offsets (nothing deleted)"
        )
    committed = admin.list_consumer_group_offsets(group)
    plan: list[Doomed] = []
    for topic, wanted in scopes.items():
        held = {tp.partition: om.offset for tp, om in committed.items() if tp.topic == topic}
        try:
            count: int | None = len(admin.describe_topic(topic, sizes=False).partitions)
        except UnknownTopicOrPartitionError:
            count = None  # deleted since: its leftover offsets can still go
            if not held:
                raise UnknownTopicOrPartitionError(
                    f"unknown topic {topic!r}, and group {group!r} has no offsets in it"
                ) from None
        if wanted is None:
            chosen = sorted(set(range(count or 0)) | set(held))
        else:
            stray = sorted(p for p in wanted if p not in held and (count is None or p >= count))
            if stray:
                accepted = f"0-{count - 1}" if count else ", ".join(map(str, sorted(held)))
                raise UnknownTopicOrPartitionError(
                    f"topic {topic!r} has no partition {stray[0]}; accepted: {accepted}"
                )
            chosen = sorted(wanted)
        plan.extend(Doomed(topic, p, held.get(p)) for p in chosen)
    return plan


def delete_offsets(
    ctx: typer.Context,
    group: str = GROUP_ARGUMENT,
    topic: TopicScopes = None,
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Only print the offsets that would be deleted"
    ),
) -> None:
    """Delete a group's offsets. Refused for topics its active members consume."""
    st = state(ctx)
    if not topic:
        raise InvalidConfigurationError("choose the topics: --topic TOPIC[:P,P] (repeatable)")
    scopes: dict[str, set[int] | None] = {}
    for text in topic:
        name, parts = parse_topic_scope(text)
        before = scopes.get(name, set())
        scopes[name] = None if parts is None or before is None else before | parts
    with st.admin() as admin:
        plan = plan_deletion(admin, group, scopes)
        if not dry_run:
            outcome = admin.delete_consumer_group_offsets(
                group, [(d.topic, d.partition) for d in plan]
            )
            refused = [err for err in outcome.values() if err is not None]
            if refused:  # a member joined after the check: say what did go
                gone = sum(1 for err in outcome.values() if err is None)
                raise type(refused[0])(
                    f"{refused[0]}; offsets of {gone} other partition(s) deleted"
                )
    if st.json:
        print_json(
            {
                "group": group,
                "executed": not dry_run,
                "partitions": [
                    {
                        "topic": d.topic,
                        "partition": d.partition,
                        "committed": d.committed,
                        "deleted": not dry_run and d.committed is not None,
                    }
                    for d in plan
                ],
            }
        )
    else:
        status = "would delete" if dry_run else "deleted"
        print_table(
            f"{'plan for' if dry_run else 'deleted offsets of'} group {group}",
            ["topic", "partition", "committed", "status"],
            [
                (d.topic, d.partition, d.committed, status if d.committed is not None else "none")
                for d in plan
            ],
        )
    if dry_run:
        stderr.print("dry run: nothing changed; drop --dry-run to delete")


def register(groups_app: typer.Typer) -> None:
    groups_app.command("delete-offsets")(delete_offsets)
