"""SubscriptionState on its own: the consumer's state kept without any I/O."""

from __future__ import annotations

import re

import pytest

from sparklog.client.subscription_state import SubscriptionState
from sparklog.client.types import TopicPartition
from sparklog.errors import InvalidConfigurationError

A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)


def test_assignment_keeps_order_and_forgets_what_is_no_longer_assigned() -> None:
    state = SubscriptionState("earliest")
    assert state.set_assignment([A1, A0, A1]) == {A0, A1}
    assert state.assigned_partitions() == [A1, A0]
    state.seek(A0, 5)
    state.seek(A1, 7)
    state.pause([A1])
    assert state.fetchable_partitions() == [A0]
    state.set_assignment([A0, B0])
    assert state.positions() == {A0: 5}
    assert state.paused_partitions() == set()
    assert state.missing_positions() == [B0]
    state.clear_positions()
    assert state.missing_positions() == [A0, B0]


def test_only_assigned_partitions_are_accepted() -> None:
    state = SubscriptionState("latest")
    state.set_assignment([A0])
    state.require_assigned(A0)
    with pytest.raises(InvalidConfigurationError, match="not assigned"):
        state.require_assigned(B0)


def test_pattern_matches_report_a_change_once() -> None:
    state = SubscriptionState("earliest")
    state.subscribe_pattern(re.compile("a.*"))
    assert state.has_subscription() and state.topics == []
    assert state.update_pattern_matches(["ab", "aa"]) is True
    assert state.topics == ["aa", "ab"]
    assert state.update_pattern_matches(["aa", "ab"]) is False
    state.subscribe_topics(["z", "y", "z"])
    assert state.pattern is None and state.topics == ["y", "z"]
    state.unsubscribe()
    assert not state.has_subscription()


def test_highwater_is_none_before_a_fetch() -> None:
    state = SubscriptionState("earliest")
    assert state.highwater(A0) is None
    state.record_highwater(A0, 12)
    assert state.highwater(A0) == 12
