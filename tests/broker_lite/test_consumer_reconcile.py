"""KIP-848's reconciliation on the typed state, with no coordinator and no clock.

``consumer_reconcile`` is I/O-free (issue 40 item 5): the target assignment and each
member's step towards it are driven here directly, as ``classic_group``'s transitions
are, through the same functions the heartbeat and the classic bridge use.
"""

from __future__ import annotations

from sparklog.groups.classic_group import empty_doc
from sparklog.groups.consumer_reconcile import reconcile, refresh_target, set_state
from sparklog.groups.consumer_state import (
    ASSIGNING,
    CONSUMER_TYPE,
    RECONCILING,
    STABLE,
    ConsumerState,
    empty_state,
    new_member,
)

TOPIC = "orders"


def _group(*members: str) -> ConsumerState:
    group = empty_state()
    for member in members:
        entry = new_member()
        entry["topic_names"] = [TOPIC]
        group["members"][member] = entry
    return group


def _refresh(group: ConsumerState, changed: bool = True) -> None:
    refresh_target(
        group,
        changed,
        topic_names=lambda: [TOPIC],
        partition_counts=lambda topics: dict.fromkeys(topics, 4),
        may_describe=None,
    )


def _step(group: ConsumerState, member: str, owned: list[tuple[str, int]] | None) -> None:
    reconcile(
        group, member, group["members"][member], owned, now_ms=1_000, session_timeout_ms=45_000
    )


def test_a_partition_moves_only_after_its_old_owner_acknowledges_the_revocation() -> None:
    group = _group("a")
    _refresh(group)
    _step(group, "a", [])
    assert sorted(map(tuple, group["members"]["a"]["assigned"])) == [(TOPIC, p) for p in range(4)]
    assert group["members"]["a"]["member_epoch"] == group["assignment_epoch"] == 1

    group["members"]["b"] = new_member()
    group["members"]["b"]["topic_names"] = [TOPIC]
    _refresh(group)  # b joined: epoch 2, a new target splitting the partitions
    assert group["group_epoch"] == group["assignment_epoch"] == 2
    given_to_b = {tuple(tp) for tp in group["target"]["b"]}
    assert len(given_to_b) == 2

    _step(group, "b", [])  # a still owns b's target: b moves to epoch 2 with nothing
    assert group["members"]["b"]["assigned"] == []
    _step(group, "a", [(TOPIC, p) for p in range(4)])  # a is told to give two up
    a = group["members"]["a"]
    assert {tuple(tp) for tp in a["revoking"]} == given_to_b
    assert a["member_epoch"] == 1  # stays at its old epoch until it acknowledges
    assert a["revoke_deadline_ms"] == 1_000 + 45_000

    _step(group, "b", [])  # not acknowledged yet: still nothing for b
    assert group["members"]["b"]["assigned"] == []
    kept = [tuple(tp) for tp in a["assigned"]]
    _step(group, "a", kept)  # a no longer owns them: it moves to epoch 2
    assert a["revoking"] == [] and a["member_epoch"] == 2
    _step(group, "b", [])
    assert {tuple(tp) for tp in group["members"]["b"]["assigned"]} == given_to_b


def test_the_group_state_follows_the_epochs() -> None:
    doc = empty_doc("g")
    doc["type"] = CONSUMER_TYPE
    doc["consumer"] = group = _group("a")
    group["group_epoch"] = 1
    set_state(doc)
    assert doc["state"] == ASSIGNING
    _refresh(group, changed=False)
    set_state(doc)
    assert doc["state"] == RECONCILING
    _step(group, "a", [])
    set_state(doc)
    assert doc["state"] == STABLE
