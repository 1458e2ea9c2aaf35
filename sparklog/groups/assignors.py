"""Partition assignors of Kafka's classic group protocol: range, roundrobin, sticky.

Each takes the members' subscriptions, the partition counts of the topics and
(for sticky) the previous assignment, and returns every member's partitions.
Deterministic: members and partitions are sorted before dealing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from sparklog.topic_partition import TopicPartition

Assignment = dict[str, list[TopicPartition]]
Assignor = Callable[
    [Mapping[str, Sequence[str]], Mapping[str, int], Mapping[str, Sequence[TopicPartition]]],
    Assignment,
]


def _all_partitions(
    members: Mapping[str, Sequence[str]], partitions: Mapping[str, int]
) -> list[TopicPartition]:
    topics = sorted({t for subs in members.values() for t in subs})
    return [TopicPartition(t, p) for t in topics for p in range(partitions.get(t, 0))]


def range_assign(
    members: Mapping[str, Sequence[str]],
    partitions: Mapping[str, int],
    previous: Mapping[str, Sequence[TopicPartition]] | None = None,
) -> Assignment:
    """Per topic, contiguous ranges of partitions; the first members get one extra."""
    out: Assignment = {m: [] for m in members}
    for topic in sorted({t for subs in members.values() for t in subs}):
        subscribers = sorted(m for m, subs in members.items() if topic in subs)
        count = partitions.get(topic, 0)
        per, extra = divmod(count, len(subscribers))
        start = 0
        for i, member in enumerate(subscribers):
            n = per + (1 if i < extra else 0)
            out[member].extend(TopicPartition(topic, p) for p in range(start, start + n))
            start += n
    return out


def roundrobin_assign(
    members: Mapping[str, Sequence[str]],
    partitions: Mapping[str, int],
    previous: Mapping[str, Sequence[TopicPartition]] | None = None,
) -> Assignment:
    """Deal all partitions, sorted, to the subscribed members in turn."""
    out: Assignment = {m: [] for m in members}
    order = sorted(members)
    if not order:
        return out
    i = 0
    for tp in _all_partitions(members, partitions):
        for _ in range(len(order)):
            member = order[i % len(order)]
            i += 1
            if tp[0] in members[member]:
                out[member].append(tp)
                break
    return out


def sticky_assign(
    members: Mapping[str, Sequence[str]],
    partitions: Mapping[str, int],
    previous: Mapping[str, Sequence[TopicPartition]] | None = None,
) -> Assignment:
    """Balanced, moving as few partitions as possible from the previous assignment."""
    valid = set(_all_partitions(members, partitions))
    out: Assignment = {m: [] for m in members}
    taken: set[TopicPartition] = set()
    total = len(valid)
    quota = -(-total // len(members)) if members else 0
    for member in sorted(members):
        for raw in (previous or {}).get(member, ()):
            tp = (str(raw[0]), int(raw[1]))
            if (
                tp in valid
                and tp not in taken
                and tp[0] in members[member]
                and len(out[member]) < quota
            ):
                out[member].append(tp)
                taken.add(tp)
    for tp in sorted(valid - taken):
        eligible = [m for m in members if tp[0] in members[m]]
        best = min(eligible, key=lambda m: (len(out[m]), m))
        out[best].append(tp)
    # Even out what unequal subscriptions left uneven: move from the fullest.
    for _ in range(total):
        donor = max(out, key=lambda m: (len(out[m]), m))
        moved = False
        for tp in sorted(out[donor], reverse=True):
            takers = [
                m for m in members if tp[0] in members[m] and len(out[m]) < len(out[donor]) - 1
            ]
            if takers:
                taker = min(takers, key=lambda m: (len(out[m]), m))
                out[donor].remove(tp)
                out[taker].append(tp)
                moved = True
                break
        if not moved:
            break
    return {m: sorted(tps) for m, tps in out.items()}


ASSIGNORS: dict[str, Assignor] = {
    "range": range_assign,
    "roundrobin": roundrobin_assign,
    "sticky": sticky_assign,
}
