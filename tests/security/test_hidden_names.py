"""No API names a topic its caller may not describe (#38.6), as Kafka (KAFKA-18813).

Two tenants on one SASL broker with ACLs: alice owns ``alice.*``, bob ``bob.*``.
Over the real listener, with raw Kafka requests as bob:

* a KIP-848 heartbeat subscribing by regex ``.*`` is assigned bob's topic only;
  one naming alice's topic is refused with TOPIC_AUTHORIZATION_FAILED;
* ConsumerGroupDescribe of a group (bob may describe) whose member reads
  alice's topic answers TOPIC_AUTHORIZATION_FAILED and no members;
* Metadata and DeleteTopics by alice's topic id refuse without her topic's name.
"""

from __future__ import annotations

import pathlib
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.consumer_group_describe.v0.request import ConsumerGroupDescribeRequest
from kio.schema.consumer_group_heartbeat.v1.request import ConsumerGroupHeartbeatRequest
from kio.schema.delete_topics.v6.request import DeleteTopicsRequest, DeleteTopicState
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.types import GroupId, TopicName
from kio.static.primitive import i32, i32Timedelta

from sparklog.security import acls
from tests.kafka.test_security import _plain_login
from tests.kafka.wire import Connection
from tests.security.tenants import tenants_root
from tests.support.brokers import Cluster

TOPIC_DENIED = 29
ALICE, BOB = "alice.secret", "bob.data"


@pytest.fixture
def cluster(tmp_path: pathlib.Path) -> Iterator[Cluster]:
    root = tenants_root(
        tmp_path,
        [acls.binding("GROUP", "bob-g", "User:bob", "READ"),
         acls.binding("GROUP", "shared-g", "User:bob", "DESCRIBE"),
         acls.binding("GROUP", "shared-g", "User:alice", "READ")],
    )  # fmt: skip
    cluster = Cluster(tmp_path, root)
    cluster.start(
        0, kafka_security_protocol="SASL_PLAINTEXT", authorizer="acl", super_users="User:admin"
    )
    admin = AdminClient(
        {"bootstrap.servers": cluster.kafka_bootstrap, "security.protocol": "SASL_PLAINTEXT",
         "sasl.mechanism": "PLAIN", "sasl.username": "admin", "sasl.password": "admin-pw"}
    )  # fmt: skip
    for future in admin.create_topics([NewTopic(t, 2, 1) for t in (ALICE, BOB)]).values():
        future.result(timeout=30)
    yield cluster
    cluster.stop_all()


def _login(cluster: Cluster, user: str) -> Connection:
    return _plain_login(cluster.brokers[0].kafka_address, user, f"{user}-pw")


def _topic_ids(cluster: Cluster) -> dict[str, uuid.UUID]:
    conn = _login(cluster, "admin")
    answer = conn.call(
        MetadataRequest(
            topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False
        )
    )
    conn.close()
    return {str(t.name): t.topic_id for t in answer.topics}


def _join(conn: Connection, group: str, **subscription: Any) -> Any:
    return conn.call(
        ConsumerGroupHeartbeatRequest(
            group_id=GroupId(group),
            member_id=uuid.uuid4().hex,
            member_epoch=i32(0),
            rebalance_timeout=i32Timedelta.parse(timedelta(milliseconds=30_000)),
            topic_partitions=(),
            **subscription,
        )
    )


def test_a_regex_subscription_sees_only_the_members_topics(cluster: Cluster) -> None:
    ids = _topic_ids(cluster)
    bob = _login(cluster, "bob")
    answer = _join(bob, "bob-g", subscribed_topic_regex=".*")
    assert answer.error_code == 0
    assigned = {t.topic_id for t in answer.assignment.topic_partitions}
    assert assigned == {ids[BOB]}
    named = _join(bob, "bob-g", subscribed_topic_names=(TopicName(ALICE),))
    assert named.error_code == TOPIC_DENIED
    assert named.assignment is None
    bob.close()


def test_a_group_using_anothers_topic_is_described_without_it(cluster: Cluster) -> None:
    alice = _login(cluster, "alice")
    assert _join(alice, "shared-g", subscribed_topic_names=(TopicName(ALICE),)).error_code == 0
    bob = _login(cluster, "bob")
    described = bob.call(
        ConsumerGroupDescribeRequest(group_ids=(GroupId("shared-g"),),
                                     include_authorized_operations=False)
    )  # fmt: skip
    [group] = described.groups
    assert (group.error_code, group.members) == (TOPIC_DENIED, ())
    assert ALICE not in repr(described)
    mine = alice.call(
        ConsumerGroupDescribeRequest(group_ids=(GroupId("shared-g"),),
                                     include_authorized_operations=False)
    )  # fmt: skip
    assert [m.subscribed_topic_names for m in mine.groups[0].members] == [(ALICE,)]
    alice.close()
    bob.close()


def test_a_topic_id_refused_carries_no_name(cluster: Cluster) -> None:
    ids = _topic_ids(cluster)
    bob = _login(cluster, "bob")
    metadata = bob.call(
        MetadataRequest(
            topics=(MetadataRequestTopic(topic_id=ids[ALICE], name=None),
                    MetadataRequestTopic(topic_id=ids[BOB], name=None)),
            allow_auto_topic_creation=False, include_topic_authorized_operations=False,
        )
    )  # fmt: skip
    by_id = {t.topic_id: (t.error_code, t.name) for t in metadata.topics}
    assert by_id == {ids[ALICE]: (TOPIC_DENIED, None), ids[BOB]: (0, BOB)}
    deleted = bob.call(
        DeleteTopicsRequest(
            topics=(DeleteTopicState(name=None, topic_id=ids[ALICE]),),
            timeout=i32Timedelta.parse(timedelta(seconds=30)),
        )
    )
    assert [(r.error_code, r.name) for r in deleted.responses] == [(TOPIC_DENIED, None)]
    assert ALICE not in repr(deleted) and ALICE not in repr(metadata)
    bob.close()
