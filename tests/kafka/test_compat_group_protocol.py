"""Group APIs at Kafka 3.9's versions, and KIP-848 refused so clients fail fast (issue 24)."""

from __future__ import annotations

import uuid
from datetime import timedelta

from confluent_kafka import Consumer, KafkaError
from kio.schema.join_group.v9.request import JoinGroupRequest, JoinGroupRequestProtocol
from kio.schema.list_groups.v5.request import ListGroupsRequest
from kio.schema.types import GroupId
from kio.static.primitive import i32Timedelta

from sparklog.broker_lite.kafka.groups import encode_subscription
from tests.kafka.wire import Connection
from tests.support.brokers import Cluster
from tests.support.waiting import wait_for


def test_join_group_v9_and_list_groups_v5_filters(one_broker: Cluster) -> None:
    conn = Connection(one_broker.kafka_bootstrap)
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


def test_group_protocol_consumer_fails_fast_with_a_reason(one_broker: Cluster) -> None:
    """confluent-kafka with KIP-848's protocol gets a fatal error at once, not silence."""
    consumer = Consumer(
        {
            "bootstrap.servers": one_broker.kafka_bootstrap,
            "group.id": f"kip848-{uuid.uuid4().hex[:6]}",
            "group.protocol": "consumer",
        }
    )
    errors: list[KafkaError] = []
    try:
        consumer.subscribe(["anything"])

        def got_error() -> bool:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is not None:
                errors.append(msg.error())
            return bool(errors)

        wait_for(got_error, timeout_s=60, what="the consumer reports the refusal")
    finally:
        consumer.close()
    # librdkafka does not pass the response's error_message on: it reports the code
    assert errors[0].fatal() or errors[0].code() == KafkaError._FATAL
    assert "ConsumerGroupHeartbeat" in errors[0].str()
    assert "API version not supported" in errors[0].str()
