"""KIP-848's consumer group protocol (``group.protocol=consumer``) on the Kafka listener.

confluent-kafka's consumer with server-side assignment: it joins and reads,
members split partitions with incremental handovers (no partition owned twice,
no record lost or read twice when offsets are committed), a SIGKILLed member is
expelled after the broker's session timeout, the client's
``group.remote.assignor`` picks ``range`` or ``uniform``, and the AdminClient
describes it through ConsumerGroupDescribe (classic and consumer members sharing a
group: ``tests/kafka/test_compat_migration.py``).  Raw frames check the
reconciliation steps themselves and OffsetCommit/OffsetFetch v9's member epochs
(issue 24).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, ConsumerGroupType, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.consumer_group_heartbeat.v1.request import (
    ConsumerGroupHeartbeatRequest,
    TopicPartitions,
)
from kio.schema.offset_commit.v9.request import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from kio.schema.offset_fetch.v9.request import (
    OffsetFetchRequest,
    OffsetFetchRequestGroup,
)
from kio.schema.types import GroupId, TopicName
from kio.static.primitive import i32, i32Timedelta, i64

from tests.kafka.wire import Connection, join_group_v9
from tests.support.brokers import KIP848_CONFIG, Cluster, module_broker
from tests.support.waiting import wait_for

SESSION_MS = KIP848_CONFIG["consumer_group_session_timeout_ms"]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """One broker for the module (each test has its own topics and groups): fast."""
    yield from module_broker(tmp_path_factory, "kip848")


def _topic(cluster: Cluster, base: str, partitions: int) -> str:
    """A new topic named ``base`` plus a unique suffix (the broker is shared)."""
    name = f"{base}-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": cluster.kafka_bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(timeout=30)
    return name


def _produce(cluster: Cluster, topic: str, values: list[str], partitions: int) -> None:
    producer = Producer({"bootstrap.servers": cluster.kafka_bootstrap, "acks": "all"})
    for i, value in enumerate(values):
        producer.produce(topic, value=value.encode(), partition=i % partitions)
    assert producer.flush(30) == 0


def _consumer(cluster: Cluster, group: str, **extra: Any) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": cluster.kafka_bootstrap,
            "group.id": group,
            "group.protocol": "consumer",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            **extra,
        }
    )


def _assigned(consumer: Consumer) -> set[tuple[str, int]]:
    return {(tp.topic, tp.partition) for tp in consumer.assignment()}


def _group() -> str:
    return f"kip848-{uuid.uuid4().hex[:8]}"


def test_a_consumer_joins_and_reads_everything(broker: Cluster) -> None:
    events = _topic(broker, "events", 4)
    values = [f"v{i}" for i in range(40)]
    _produce(broker, events, values, 4)
    consumer = _consumer(broker, _group())
    seen: list[str] = []
    try:
        consumer.subscribe([events])

        def read_all() -> bool:
            msg = consumer.poll(0.2)
            if msg is not None:
                assert msg.error() is None, msg.error()
                seen.append(msg.value().decode())
            return len(seen) >= len(values)

        wait_for(read_all, 30, "every record read")
        assert sorted(seen) == sorted(values)
        assert _assigned(consumer) == {(events, p) for p in range(4)}
    finally:
        consumer.close()


def test_a_second_member_takes_half_without_loss_duplicates_or_overlap(broker: Cluster) -> None:
    orders = _topic(broker, "orders", 4)
    group = _group()
    first_half = [f"a{i}" for i in range(40)]
    _produce(broker, orders, first_half, 4)
    one, two = _consumer(broker, group), _consumer(broker, group)
    read: dict[tuple[int, int], str] = {}
    duplicates: list[tuple[int, int]] = []

    def poll(consumer: Consumer) -> None:
        msg = consumer.poll(0.05)
        if msg is not None and msg.error() is None:
            key = (msg.partition(), msg.offset())
            if key in read:
                duplicates.append(key)
            read[key] = msg.value().decode()
            consumer.commit(message=msg, asynchronous=False)
        # never one partition with two owners, at any moment
        assert not (_assigned(one) & _assigned(two)), (_assigned(one), _assigned(two))

    try:
        one.subscribe([orders])
        wait_for(lambda: (poll(one), len(read) >= 20)[1], 30, "the first member reading")
        two.subscribe([orders])
        second_half = [f"b{i}" for i in range(40)]
        _produce(broker, orders, second_half, 4)

        def split() -> bool:
            poll(one)
            poll(two)
            return len(_assigned(one)) == 2 and len(_assigned(two)) == 2

        wait_for(split, 30, "two members with two partitions each")
        everything = sorted(first_half + second_half)
        wait_for(
            lambda: (poll(one), poll(two), sorted(read.values()) == everything)[2],
            30,
            "every record read once",
        )
        assert duplicates == []
    finally:
        one.close()
        two.close()


def test_a_killed_member_is_expelled_after_its_session(broker: Cluster, tmp_path: Path) -> None:
    jobs = _topic(broker, "jobs", 4)
    group = _group()
    member = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.kafka.member",
            broker.kafka_bootstrap,
            group,
            jobs,
            str(tmp_path),
            "victim",
            "consumer",
        ]
    )
    survivor = _consumer(broker, group)
    try:
        assignment = tmp_path / "victim.assignment"
        wait_for(
            lambda: assignment.exists() and assignment.read_text() == "[0, 1, 2, 3]",
            30,
            "the subprocess member owning every partition",
        )
        survivor.subscribe([jobs])
        wait_for(lambda: (survivor.poll(0.1), len(_assigned(survivor)) == 2)[1], 30, "a split")
        member.send_signal(signal.SIGKILL)
        member.wait(10)
        wait_for(
            lambda: (survivor.poll(0.1), len(_assigned(survivor)) == 4)[1],
            SESSION_MS / 1000 + 15,
            "the dead member's partitions reassigned",
        )
        values = [f"after{i}" for i in range(8)]
        _produce(broker, jobs, values, 4)
        seen: list[str] = []

        def read() -> bool:
            msg = survivor.poll(0.1)
            if msg is not None and msg.error() is None:
                seen.append(msg.value().decode())
            return set(values) <= set(seen)

        wait_for(read, 30, "the survivor reading every partition")
    finally:
        if member.poll() is None:
            member.kill()
            member.wait(10)
        survivor.close()


def _owners(consumers: list[Consumer]) -> list[set[tuple[str, int]]]:
    for consumer in consumers:
        consumer.poll(0.05)
    return [_assigned(c) for c in consumers]


@pytest.mark.parametrize("assignor", ["range", "uniform"])
def test_the_client_chooses_the_server_assignor(broker: Cluster, assignor: str) -> None:
    left_topic = _topic(broker, "left", 3)
    right_topic = _topic(broker, "right", 3)
    group = _group()
    consumers = [_consumer(broker, group, **{"group.remote.assignor": assignor}) for _ in "ab"]
    admin = AdminClient({"bootstrap.servers": broker.kafka_bootstrap})
    try:
        consumers[0].subscribe([left_topic, right_topic])
        wait_for(lambda: len(_owners(consumers[:1])[0]) == 6, 30, "one member with all six")
        consumers[1].subscribe([left_topic, right_topic])
        owners = wait_for(
            lambda: (
                lambda o: (
                    o
                    if sorted(len(s) for s in o) == [2, 4] or [len(s) for s in o] == [3, 3]
                    else None
                )
            )(_owners(consumers)),
            30,
            "the partitions split",
        )
        described = admin.describe_consumer_groups([group])[group].result(timeout=30)
        assert described.type == ConsumerGroupType.CONSUMER
        if assignor == "range":
            # range: per topic, contiguous ranges; both topics split the same way
            for owned in owners:
                left = {p for t, p in owned if t == left_topic}
                assert left == {p for t, p in owned if t == right_topic} and left
        else:
            # uniform: balanced, moving as little as possible from the first member's
            assert [len(s) for s in owners] == [3, 3]
    finally:
        for consumer in consumers:
            consumer.close()


def test_describe_consumer_groups_shows_members_and_assignments(broker: Cluster) -> None:
    """A consumer group through ConsumerGroupDescribe; a classic group next to it is
    still described (GROUP_ID_NOT_FOUND from ConsumerGroupDescribe, as Kafka answers,
    makes librdkafka ask DescribeGroups)."""
    shown = _topic(broker, "shown", 2)
    group, old_group = _group(), _group()
    consumer = _consumer(broker, group, **{"client.id": "shown-client"})
    classic = Consumer(
        {
            "bootstrap.servers": broker.kafka_bootstrap,
            "group.id": old_group,
            "group.protocol": "classic",
        }
    )
    admin = AdminClient({"bootstrap.servers": broker.kafka_bootstrap})
    try:
        consumer.subscribe([shown])
        classic.subscribe([shown])
        wait_for(lambda: (consumer.poll(0.1), len(_assigned(consumer)) == 2)[1], 30, "joined")
        wait_for(lambda: (classic.poll(0.1), len(_assigned(classic)) == 2)[1], 30, "classic")
        old = admin.describe_consumer_groups([old_group])[old_group].result(timeout=30)
        assert old.type == ConsumerGroupType.CLASSIC and len(old.members) == 1
        described = admin.describe_consumer_groups([group])[group].result(timeout=30)
        assert described.type == ConsumerGroupType.CONSUMER
        assert str(described.state.name) == "STABLE"
        [member] = described.members
        assert member.client_id == "shown-client"
        assert {(tp.topic, tp.partition) for tp in member.assignment.topic_partitions} == {
            (shown, 0),
            (shown, 1),
        }
    finally:
        classic.close()
        consumer.close()


# -- raw frames: the reconciliation steps and v9 offsets -------------------------------------
def _heartbeat(conn: Connection, group: str, member: str, epoch: int, **fields: Any) -> Any:
    request = ConsumerGroupHeartbeatRequest(
        group_id=GroupId(group),
        member_id=member,
        member_epoch=i32(epoch),
        rebalance_timeout=i32Timedelta.parse(timedelta(milliseconds=30_000 if epoch == 0 else -1)),
        topic_partitions=fields.pop("owned", None),
        **fields,
    )
    return conn.call(request)


def _partitions(answer: Any) -> list[int]:
    assert answer.assignment is not None
    return sorted(p for t in answer.assignment.topic_partitions for p in t.partitions)


def _owned(answer: Any, partitions: list[int]) -> tuple[TopicPartitions, ...]:
    topic_id = answer.assignment.topic_partitions[0].topic_id
    return (TopicPartitions(topic_id=topic_id, partitions=tuple(i32(p) for p in partitions)),)


@pytest.fixture
def conn(broker: Cluster) -> Iterator[Connection]:
    connection = Connection(broker.kafka_bootstrap)
    yield connection
    connection.close()


def test_a_partition_is_revoked_before_it_is_assigned_again(
    broker: Cluster, conn: Connection
) -> None:
    steps = _topic(broker, "steps", 2)
    group = _group()
    first = _heartbeat(
        conn, group, "m-one", 0, subscribed_topic_names=(TopicName(steps),), owned=()
    )
    assert first.error_code.value == 0 and first.member_epoch == 1
    assert _partitions(first) == [0, 1]
    second = _heartbeat(
        conn, group, "m-two", 0, subscribed_topic_names=(TopicName(steps),), owned=()
    )
    assert second.member_epoch == 2 and _partitions(second) == []  # p1 is still m-one's
    revoking = _heartbeat(conn, group, "m-one", 1, owned=_owned(first, [0, 1]))
    assert revoking.member_epoch == 1 and _partitions(revoking) == [0]
    waiting = _heartbeat(conn, group, "m-two", 2, owned=())
    assert waiting.assignment is None or _partitions(waiting) == []
    acked = _heartbeat(conn, group, "m-one", 1, owned=_owned(first, [0]))
    assert acked.member_epoch == 2
    given = _heartbeat(conn, group, "m-two", 2, owned=())
    assert _partitions(given) == [1]
    # an epoch the coordinator never gave is fenced (the previous one is tolerated, as
    # Kafka does, for an answer that was lost); OffsetCommit v9 checks epochs too
    assert _heartbeat(conn, group, "m-one", 7, owned=()).error_code.value == 110

    def commit(member: str, epoch: int) -> int:
        answer = conn.call(
            OffsetCommitRequest(
                group_id=GroupId(group),
                generation_id_or_member_epoch=i32(epoch),
                member_id=member,
                group_instance_id=None,
                topics=(
                    OffsetCommitRequestTopic(
                        name=TopicName(steps),
                        partitions=(
                            OffsetCommitRequestPartition(
                                partition_index=i32(1),
                                committed_offset=i64(0),
                                committed_leader_epoch=i32(-1),
                                committed_metadata=None,
                            ),
                        ),
                    ),
                ),
            )
        )
        return int(answer.topics[0].partitions[0].error_code.value)

    assert commit("m-two", 2) == 0
    assert commit("m-two", 1) == 113  # STALE_MEMBER_EPOCH
    assert commit("nobody", 2) == 25  # UNKNOWN_MEMBER_ID

    def fetch(member: str, epoch: int) -> int:
        answer = conn.call(
            OffsetFetchRequest(
                groups=(
                    OffsetFetchRequestGroup(
                        group_id=GroupId(group),
                        member_id=member,
                        member_epoch=i32(epoch),
                        topics=None,
                    ),
                ),
                require_stable=False,
            )
        )
        return int(answer.groups[0].error_code.value)

    assert fetch("m-two", 2) == 0
    assert fetch("m-two", 1) == 113
    left = _heartbeat(conn, group, "m-one", -1)
    assert left.member_epoch == -1
    # with m-one gone, m-two moves to the new epoch and gets everything
    rest = _heartbeat(conn, group, "m-two", 2, owned=_owned(given, [1]))
    assert rest.member_epoch == 3 and _partitions(rest) == [0, 1]


def test_a_regex_subscription_picks_up_new_topics(broker: Cluster) -> None:
    prefix = f"rx{uuid.uuid4().hex[:6]}"
    one = _topic(broker, f"{prefix}-one", 1)
    other = _topic(broker, "other", 1)
    consumer = _consumer(broker, _group(), **{"topic.metadata.refresh.interval.ms": 500})
    try:
        consumer.subscribe([f"^{prefix}-.*"])  # librdkafka sends v1's subscribed_topic_regex
        wait_for(lambda: (consumer.poll(0.1), _assigned(consumer) == {(one, 0)})[1], 30, "rx")
        _topic(broker, f"{prefix}-two", 2)
        wait_for(
            lambda: (consumer.poll(0.1), len(_assigned(consumer)) == 3)[1],
            30,
            "the new matching topic assigned",
        )
        assert (other, 0) not in _assigned(consumer)
    finally:
        consumer.close()


def test_the_group_survives_a_coordinator_restart(broker: Cluster) -> None:
    durable = _topic(broker, "durable", 2)
    group = _group()
    before = [f"b{i}" for i in range(10)]
    _produce(broker, durable, before, 2)
    consumer = _consumer(broker, group)
    read: list[str] = []

    def poll() -> None:
        msg = consumer.poll(0.1)
        if msg is not None and msg.error() is None:
            read.append(msg.value().decode())
            consumer.commit(message=msg, asynchronous=False)

    def members() -> tuple[int, list[tuple[str, int]]]:
        """The group's epoch and each member's epoch (ConsumerGroupDescribe)."""
        from kio.schema.consumer_group_describe.v1.request import ConsumerGroupDescribeRequest

        conn = Connection(broker.kafka_bootstrap)
        try:
            [found] = conn.call(
                ConsumerGroupDescribeRequest(
                    group_ids=(GroupId(group),), include_authorized_operations=False
                )
            ).groups
        finally:
            conn.close()
        return found.group_epoch, sorted((m.member_id, m.member_epoch) for m in found.members)

    try:
        consumer.subscribe([durable])
        wait_for(lambda: (poll(), len(read) == len(before))[1], 30, "the first records")
        known = members()
        broker.kill(0)  # the coordinator dies without a word; its successor restores
        broker.restart(0)
        after = [f"a{i}" for i in range(10)]
        _produce(broker, durable, after, 2)
        wait_for(lambda: (poll(), len(read) >= len(before + after))[1], 45, "after the restart")
        assert sorted(read) == sorted(before + after)  # nothing lost, nothing read twice
        # restored, not rejoined: the same member at the same epochs (a member expelled
        # and back would have moved the group's epoch on twice)
        assert members() == known
    finally:
        consumer.close()


def test_refusals_say_why(broker: Cluster, conn: Connection) -> None:
    from kio.schema.describe_groups.v5.request import DescribeGroupsRequest
    from kio.schema.list_groups.v5.request import ListGroupsRequest

    from sparklog.broker_lite.kafka.groups import decode_assignment

    said = _topic(broker, "said", 1)
    classic = _group()
    joined = join_group_v9(conn, classic, {"sessioned": b"\x00\x01"}, protocol_type="connect")
    assert joined.error_code.value == 0
    names = (TopicName(said),)
    # a classic group of Kafka Connect workers cannot become a consumer group
    refused = _heartbeat(conn, classic, "m", 0, subscribed_topic_names=names, owned=())
    assert refused.error_code.value == 69  # GROUP_ID_NOT_FOUND
    assert refused.error_message == (
        f"Group {classic} is not a consumer group: its members [{joined.member_id!r}] are "
        "not Kafka consumers (protocol type 'consumer' with a consumer protocol "
        "subscription)."
    )
    group = _group()
    bad = _heartbeat(conn, group, "m", 0, subscribed_topic_regex="\\p{L}+", owned=())
    assert bad.error_code.value == 128 and "\\p{L}+" in bad.error_message
    odd = _heartbeat(
        conn, group, "m", 0, subscribed_topic_names=names, server_assignor="x", owned=()
    )
    assert odd.error_code.value == 112 and "uniform" in odd.error_message
    # a static member leaves with -2 and comes back under a new member id: same partitions
    first = _heartbeat(
        conn, group, "s1", 0, subscribed_topic_names=names, owned=(), instance_id="pod-a"
    )
    assert _partitions(first) == [0]
    twin = _heartbeat(
        conn, group, "s2", 0, subscribed_topic_names=names, owned=(), instance_id="pod-a"
    )
    assert twin.error_code.value == 111  # UNRELEASED_INSTANCE_ID
    assert _heartbeat(conn, group, "s1", -2, instance_id="pod-a").member_epoch == -2
    back = _heartbeat(
        conn, group, "s2", 0, subscribed_topic_names=names, owned=(), instance_id="pod-a"
    )
    assert back.member_epoch == first.member_epoch and _partitions(back) == [0]
    # DescribeGroups (the classic API) shows the consumer group as its layout can
    described = conn.call(
        DescribeGroupsRequest(groups=(GroupId(group),), include_authorized_operations=False)
    )
    [shown] = described.groups
    assert (shown.error_code.value, shown.group_state, shown.protocol_data) == (
        0,
        "Stable",
        "uniform",
    )
    assert [m.member_id for m in shown.members] == ["s2"]
    assert decode_assignment(shown.members[0].member_assignment) == [(said, 0)]
    listed = conn.call(ListGroupsRequest(types_filter=("Consumer",)))
    assert (group, "consumer") in [(g.group_id, g.group_type) for g in listed.groups]
    assert classic not in [g.group_id for g in listed.groups]


def test_new_partitions_are_assigned(broker: Cluster, conn: Connection) -> None:
    from confluent_kafka.admin import NewPartitions

    grown = _topic(broker, "grown", 1)
    group = _group()
    names = (TopicName(grown),)
    first = _heartbeat(conn, group, "m", 0, subscribed_topic_names=names, owned=())
    assert _partitions(first) == [0]
    admin = AdminClient({"bootstrap.servers": broker.kafka_bootstrap})
    admin.create_partitions([NewPartitions(grown, 3)])[grown].result(timeout=30)
    more = wait_for(
        lambda: (lambda a: a if a.assignment is not None else None)(
            _heartbeat(conn, group, "m", first.member_epoch, owned=_owned(first, [0]))
        ),
        30,
        "the new partitions in an answer",
    )
    assert more.member_epoch > first.member_epoch and _partitions(more) == [0, 1, 2]


def test_a_member_silent_while_revoking_is_expelled(broker: Cluster, conn: Connection) -> None:
    """Session timeouts hold in every state: a member that dies owing a revocation
    (the group Reconciling) is expelled after its session, and its partitions move."""
    stuck = _topic(broker, "stuck", 2)
    group = _group()
    names = (TopicName(stuck),)
    first = _heartbeat(conn, group, "dies", 0, subscribed_topic_names=names, owned=())
    assert _partitions(first) == [0, 1]
    second = _heartbeat(conn, group, "lives", 0, subscribed_topic_names=names, owned=())
    assert _partitions(second) == []
    owing = _heartbeat(conn, group, "dies", first.member_epoch, owned=_owned(first, [0, 1]))
    assert _partitions(owing) == [0]  # told to give one up; it never answers again

    def everything() -> Any:
        answer = _heartbeat(conn, group, "lives", second.member_epoch, owned=())
        assert answer.error_code.value == 0
        return answer if answer.assignment and _partitions(answer) == [0, 1] else None

    taken = wait_for(everything, SESSION_MS / 1000 + 15, "the silent member's partitions")
    assert taken.member_epoch > second.member_epoch
