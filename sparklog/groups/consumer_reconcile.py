"""KIP-848's assignment and reconciliation, on a consumer group's typed state.

The group has an epoch, bumped by every change of membership, subscriptions or the
subscribed topics' partitions; a bumped epoch makes the group's assignor compute a
new *target assignment* (:func:`refresh_target`, Kafka's TargetAssignmentBuilder).
Each member then converges on its target one heartbeat at a time
(:func:`reconcile`, Kafka's CurrentAssignmentBuilder):

* partitions it owns and must give up are revoked first (the answer leaves them
  out); the member stays at its old epoch until a heartbeat shows it no longer
  owns them;
* then it moves to the target's epoch and gets its new partitions, but only
  those no other member still owns (revoked and not yet acknowledged): a
  partition is never owned by two members at once.

No I/O and no clock: the caller hands in the topics, partition counts and time.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence

from sparklog.errors import InvalidRegularExpressionError
from sparklog.groups.assignors import range_assign, sticky_assign
from sparklog.groups.classic_group import GroupDoc, PartitionCounts
from sparklog.groups.consumer_state import (
    ASSIGNING,
    EMPTY,
    RECONCILING,
    STABLE,
    ConsumerMemberDoc,
    ConsumerState,
    is_consumer_group,
    pair_set,
    sorted_pairs,
)
from sparklog.topic_partition import TopicPartition

#: Kafka's server-side assignors: ``uniform`` (balanced and sticky) is the default
ASSIGNORS = {"uniform": sticky_assign, "range": range_assign}
DEFAULT_ASSIGNOR = "uniform"
#: (principal, host, topic) -> whether that member may describe the topic
MayDescribe = Callable[[str, str, str], bool]


def compile_regex(pattern: str) -> re.Pattern[str]:
    """A subscription regex (Java's syntax; the common subset Python's ``re`` shares).

    Kafka matches the whole topic name (RE2J); constructs Python lacks
    (``\\p{L}``, ``(?<name>...)`` is accepted by both) are refused with
    INVALID_REGULAR_EXPRESSION naming the pattern.
    """
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise InvalidRegularExpressionError(
            f"subscribed_topic_regex {pattern!r} is not accepted ({exc}); accepted: the "
            "regular expressions Java and Python share (classes, groups, alternation, "
            "quantifiers)"
        ) from None


def subscribed_topics(
    entry: ConsumerMemberDoc, topics: Sequence[str], may_describe: MayDescribe | None
) -> list[str]:
    """The topics ``entry`` subscribes to: its names, and those of ``topics`` its regex
    matches that its principal may describe (every one without an authorizer)."""
    names = set(entry["topic_names"])
    regex = entry["topic_regex"]
    if regex:
        pattern = compile_regex(regex)
        matched = [t for t in topics if pattern.fullmatch(t)]
        principal = entry.get("principal")
        if principal is not None and may_describe is not None:
            host = entry.get("principal_host") or "*"
            matched = [t for t in matched if may_describe(principal, host, t)]
        names.update(matched)
    return sorted(names)


def refresh_target(
    group: ConsumerState,
    changed: bool,
    *,
    topic_names: Callable[[], Iterable[str]],
    partition_counts: PartitionCounts,
    may_describe: MayDescribe | None,
) -> None:
    """Bump the group epoch (once) if members or subscriptions ``changed`` or the
    subscribed topics' partitions did, and compute the new target assignment."""
    members = group["members"]  # a static member that left keeps its partitions
    regex = any(e["topic_regex"] for e in members.values())
    existing = list(topic_names()) if regex else []
    subscriptions = {m: subscribed_topics(e, existing, may_describe) for m, e in members.items()}
    wanted = {t for ts in subscriptions.values() for t in ts}
    counts = {t: n for t, n in partition_counts(wanted).items() if n}
    if changed or counts != group["topics"]:
        group["topics"] = counts
        group["group_epoch"] += 1
    if group["assignment_epoch"] >= group["group_epoch"]:
        return
    chosen = Counter(e["assignor"] for e in members.values() if e["assignor"])
    name = chosen.most_common(1)[0][0] if chosen else DEFAULT_ASSIGNOR
    previous = {
        m: [TopicPartition(str(t), int(p)) for t, p in tps] for m, tps in group["target"].items()
    }
    result = ASSIGNORS[name](subscriptions, counts, previous) if members else {}
    group["target"] = {m: sorted_pairs(result.get(m, [])) for m in members}
    group["assignor"] = name
    group["assignment_epoch"] = group["group_epoch"]


def owned_by_others(group: ConsumerState, member: str) -> set[tuple[str, int]]:
    """The partitions the other members own or are still revoking."""
    return {
        tp
        for m, e in group["members"].items()
        if m != member
        for tp in pair_set(e["assigned"]) | pair_set(e["revoking"])
    }


def reconcile(
    group: ConsumerState,
    member: str,
    entry: ConsumerMemberDoc,
    owned: Sequence[tuple[str, int]] | None,
    *,
    now_ms: int,
    session_timeout_ms: int,
) -> None:
    """Move ``entry`` one step towards its target (revoke first, then assign free ones);
    ``owned``: what the member says it owns (None: unknown)."""
    if entry["revoking"]:
        if owned is None or pair_set(owned) & pair_set(entry["revoking"]):
            return  # not acknowledged yet
        entry["revoking"] = []
        entry["revoke_deadline_ms"] = 0
    target = pair_set(group["target"].get(member, []))
    assigned = pair_set(entry["assigned"])
    if entry["member_epoch"] == group["assignment_epoch"] and assigned == target:
        return
    revoke = assigned - target
    if revoke:
        entry["assigned"] = sorted_pairs(assigned & target)
        entry["revoking"] = sorted_pairs(revoke)
        entry["revoke_deadline_ms"] = now_ms + int(
            entry.get("rebalance_timeout_ms") or session_timeout_ms
        )
        return
    free = target - owned_by_others(group, member)
    if entry["member_epoch"] != group["assignment_epoch"]:
        entry["previous_member_epoch"] = entry["member_epoch"]
        entry["member_epoch"] = group["assignment_epoch"]
    entry["assigned"] = sorted_pairs(assigned | free)


def release(entry: ConsumerMemberDoc) -> None:
    """A member rejoining under a known id owns nothing now."""
    entry["assigned"] = []
    entry["revoking"] = []


def set_state(doc: GroupDoc) -> None:
    """The group's KIP-848 state from its epochs and members (a downgraded group keeps its
    classic state): Empty, Assigning (a target to compute), Reconciling, Stable."""
    if not is_consumer_group(doc):
        return  # downgraded to a classic group: its own states apply
    group = doc["consumer"]
    members = group["members"].values()
    if not group["members"]:
        doc["state"] = EMPTY
    elif group["assignment_epoch"] < group["group_epoch"]:
        doc["state"] = ASSIGNING
    elif any(
        e["member_epoch"] != group["assignment_epoch"] or e["revoking"]
        for e in members
        if e["member_epoch"] >= 0
    ):
        doc["state"] = RECONCILING
    else:
        doc["state"] = STABLE
