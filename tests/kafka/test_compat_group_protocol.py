"""Group APIs at Kafka 3.9's versions (issue 24); KIP-848 is in test_compat_kip848.py."""

from __future__ import annotations

from datetime import timedelta

from kio.schema.join_group.v9.request import JoinGroupRequest, JoinGroupRequestProtocol
from kio.schema.list_groups.v5.request import ListGroupsRequest
from kio.schema.types import GroupId
from kio.static.primitive import i32Timedelta

from sparklog.broker_lite.kafka.groups import encode_subscription
from tests.kafka.wire import Connection
from tests.support.brokers import Cluster


def test_join_group_v9_and_list_groups_v5_filters(brokers: Cluster) -> None:
    conn = Connection(brokers.kafka_coordinator("g9"))
    try:
        join = JoinGroupRequest(
            group_id=GroupId("g9"),
            session_timeout=i32Timedelta.parse(timedelta(seconds=10)),
            rebalance_timeout=i32Timedelta.parse(timedelta(seconds=10)),
            member_id="",
            group_instance_id=None,
            protocol_type="consumer",
            protocols=(
                JoinGroupRequestProtocol(name="range", metadata=encode_subscription(["t"])),
            ),
            reason="testing v9",
        )
        joined = conn.call(join)
        assert joined.error_code.value == 0
        assert joined.leader == joined.member_id
        assert joined.skip_assignment is False

        def listed(**filters: tuple[str, ...]) -> list[tuple[str, str]]:
            answer = conn.call(ListGroupsRequest(**filters))
            assert answer.error_code.value == 0
            return [(g.group_id, g.group_type) for g in answer.groups]

        assert ("g9", "classic") in listed()
        assert ("g9", "classic") in listed(types_filter=("Classic",))
        assert listed(types_filter=("consumer",)) == []
        state = next(
            g.group_state for g in conn.call(ListGroupsRequest()).groups if g.group_id == "g9"
        )
        assert ("g9", "classic") in listed(states_filter=(state,))
        assert listed(states_filter=("Dead",)) == []
    finally:
        conn.close()
