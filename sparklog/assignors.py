"""Partition assignment strategies of Kafka's consumer: range, roundrobin and sticky.

The group leader runs one of these on the members' subscriptions and sends
the result through sync_group.  Each is a pure function so that it is easy to
test and every member would compute the same thing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

TP = tuple[str, int]
Assignment = dict[str, list[TP]]


def range_assign(
    subscriptions: Mapping[str, Sequence[str]],
    partitions: Mapping[str, int],
    previous: Mapping[str, Sequence[TP]] | None = None,
) -> Assignment:
    """Per topic, consecutive partition ranges to members in sorted order (RangeAssignor)."""
    out: Assignment = {m: [] for m in subscriptions}
    for topic in sorted(partitions):
        members = sorted(m for m, topics in subscriptions.items() if topic in topics)
        if not members:
            continue
        per, extra = divmod(partitions[topic], len(members))
        start = 0
        for i, member in enumerate(members):
            count = per + (1 if i < extra else 0)
            out[member].extend((topic, p) for p in range(start, start + count))
            start += count
    return out


def roundrobin_assign(
    subscriptions: Mapping[str, Sequence[str]],
    partitions: Mapping[str, int],
    previous: Mapping[str, Sequence[TP]] | None = None,
) -> Assignment:
    """All partitions in order, dealt to subscribed members in turn (Kafka's RoundRobinAssignor)."""
    out: Assignment = {m: [] for m in subscriptions}
    members = sorted(subscriptions)
    if not members:
        return out
    turn = 0
    for topic in sorted(partitions):
        for p in range(partitions[topic]):
            for _ in range(len(members)):
                member = members[turn % len(members)]
                turn += 1
                if topic in subscriptions[member]:
                    out[member].append((topic, p))
                    break
    return out


def sticky_assign(
    subscriptions: Mapping[str, Sequence[str]],
    partitions: Mapping[str, int],
    previous: Mapping[str, Sequence[TP]] | None = None,
) -> Assignment:
    """Balanced like roundrobin, but a member keeps what it owned where balance allows."""
    members = sorted(subscriptions)
    out: Assignment = {m: [] for m in members}
    if not members:
        return out
    all_tps = [(t, p) for t in sorted(partitions) for p in range(partitions[t])]
    eligible = {tp: [m for m in members if tp[0] in subscriptions[m]] for tp in all_tps}
    total = sum(1 for tp in all_tps if eligible[tp])
    quota = -(-total // len(members))
    taken: set[TP] = set()
    for member in members:
        for t, p in sorted((previous or {}).get(member, [])):
            tp = (t, int(p))
            if (
                tp in eligible
                and member in eligible[tp]
                and tp not in taken
                and len(out[member]) < quota
            ):
                out[member].append(tp)
                taken.add(tp)
    for tp in all_tps:
        if tp in taken or not eligible[tp]:
            continue
        member = min(eligible[tp], key=lambda m: (len(out[m]), m))
        out[member].append(tp)
    # even out: move from the fullest to the emptiest while the gap is more than one
    while True:
        fullest = max(members, key=lambda m: (len(out[m]), m))
        emptiest = min(members, key=lambda m: (len(out[m]), m))
        if len(out[fullest]) - len(out[emptiest]) <= 1:
            break
        movable = [tp for tp in out[fullest] if emptiest in eligible[tp]]
        if not movable:
            break
        out[fullest].remove(movable[-1])
        out[emptiest].append(movable[-1])
    return {m: sorted(tps) for m, tps in out.items()}


STRATEGIES: dict[str, Callable[..., Assignment]] = {
    "range": range_assign,
    "roundrobin": roundrobin_assign,
    "sticky": sticky_assign,
}
