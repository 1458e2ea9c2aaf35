"""Every Kafka API under ``authorizer = "acl"``, at the byte level: each answers its
authorisation code to a principal without ACLs, keeps the connection open, and
serves a super user.

One SASL_PLAINTEXT broker; ``mallory`` has no ACL, ``admin`` is a super user.
Requests are kio entities built from the fields each API needs (the others
zero-like), sent after a SASL PLAIN login on a raw connection.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from kio.index import load_request_schema, load_response_schema
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest
from kio.serial import entity_reader

from sparklog.broker_lite.kafka.authorize import blank
from sparklog.security import users
from sparklog.storage.catalog import open_root
from tests.kafka.wire import Connection, record_batch_bytes
from tests.support.brokers import Cluster

TOPIC, GROUP = 29, 30
CLUSTER, TXN = 31, 53


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    tmp_path = tmp_path_factory.mktemp("acl-apis")
    root = f"file://{tmp_path}/root"
    metadata = open_root(root, create=True).metadata
    for user in ("admin", "mallory"):
        users.create(metadata, user, "SCRAM-SHA-256", f"{user}-pw")
    cluster = Cluster(tmp_path, root)
    cluster.start(
        0, kafka_security_protocol="SASL_PLAINTEXT", authorizer="acl", super_users="User:admin"
    )
    admin = login(cluster, "admin")
    created = admin.call(
        request(19, 7, topics=(part(19, 7, "CreatableTopic", name="t", num_partitions=1,
                                    replication_factor=1),), timeout=10_000)
    )  # fmt: skip
    assert errors_in(created) == {0}
    admin.close()
    yield cluster
    cluster.stop_all()


def login(cluster: Cluster, user: str) -> Connection:
    conn = Connection(cluster.brokers[0].kafka_address)
    assert conn.call(SaslHandshakeRequest(mechanism="PLAIN")).error_code == 0
    answer = conn.call(SaslAuthenticateRequest(auth_bytes=f"\0{user}\0{user}-pw".encode()))
    assert answer.error_code == 0, answer.error_message
    return conn


def request(api_key: int, version: int, **values: Any) -> Any:
    return blank(load_request_schema(api_key, version), **values)


def part(api_key: int, version: int, cls_name: str, **values: Any) -> Any:
    module = sys.modules[load_request_schema(api_key, version).__module__]
    return blank(getattr(module, cls_name), **values)


def errors_in(entity: Any) -> set[int]:
    """Every error code anywhere in a response."""
    found: set[int] = set()
    if dataclasses.is_dataclass(entity):
        for f in dataclasses.fields(entity):
            value = getattr(entity, f.name)
            if f.name.endswith("error_code"):  # partition_error_code too
                found.add(int(value))
            else:
                found |= errors_in(value)
    elif isinstance(entity, tuple):
        for item in entity:
            found |= errors_in(item)
    return found


def call(conn: Connection, req: Any) -> Any:
    conn.send_frame(conn.encode(req))
    frame = conn.read_frame()
    assert frame is not None, "the broker closed the connection"
    cls = load_response_schema(req.__api_key__, req.__version__)
    _header, offset = entity_reader(cls.__header_schema__)(frame, 0)
    return entity_reader(cls)(frame, offset)[0]


def cases() -> list[tuple[str, Any, int]]:
    batch = record_batch_bytes([b"x"])
    return [
        ("Produce", request(0, 9, acks=-1, timeout=10_000, topic_data=(
            part(0, 9, "TopicProduceData", name="t", partition_data=(
                part(0, 9, "PartitionProduceData", index=0, records=batch),)),)), TOPIC),
        ("Fetch", request(1, 12, max_wait=0, max_bytes=1 << 20, topics=(
            part(1, 12, "FetchTopic", topic="t", partitions=(
                part(1, 12, "FetchPartition", partition=0, fetch_offset=0,
                     partition_max_bytes=1 << 20),)),)), TOPIC),
        ("ListOffsets", request(2, 7, topics=(part(2, 7, "ListOffsetsTopic", name="t",
            partitions=(part(2, 7, "ListOffsetsPartition", partition_index=0),)),)), TOPIC),
        ("OffsetCommit", request(8, 8, group_id="g", topics=(
            part(8, 8, "OffsetCommitRequestTopic", name="t", partitions=(
                part(8, 8, "OffsetCommitRequestPartition", partition_index=0),)),)), GROUP),
        ("OffsetFetch v7", request(9, 7, group_id="g", topics=None), GROUP),
        ("OffsetFetch v8", request(9, 8, groups=(
            part(9, 8, "OffsetFetchRequestGroup", group_id="g", topics=None),)), GROUP),
        ("FindCoordinator v0", request(10, 0, key="g"), GROUP),  # no key type: a group
        ("FindCoordinator group", request(10, 4, key_type=0, coordinator_keys=("g",)), GROUP),
        ("FindCoordinator txn", request(10, 4, key_type=1, coordinator_keys=("x",)), TXN),
        ("JoinGroup", request(11, 7, group_id="g", session_timeout=10_000,
                              rebalance_timeout=10_000, protocol_type="consumer"), GROUP),
        ("Heartbeat", request(12, 4, group_id="g", generation_id=1, member_id="m"), GROUP),
        ("LeaveGroup", request(13, 5, group_id="g"), GROUP),
        ("SyncGroup", request(14, 5, group_id="g", generation_id=1, member_id="m"), GROUP),
        ("DescribeGroups", request(15, 5, groups=("g",)), GROUP),
        ("CreateTopics", request(19, 7, timeout=10_000, topics=(
            part(19, 7, "CreatableTopic", name="new", num_partitions=1,
                 replication_factor=1),)), TOPIC),
        ("DeleteTopics", request(20, 6, timeout=10_000, topics=(
            part(20, 6, "DeleteTopicState", name="t"),)), TOPIC),
        ("DeleteRecords", request(21, 2, timeout=10_000, topics=(
            part(21, 2, "DeleteRecordsTopic", name="t", partitions=(
                part(21, 2, "DeleteRecordsPartition", partition_index=0, offset=0),)),)), TOPIC),
        ("InitProducerId", request(22, 4, transaction_timeout=60_000), CLUSTER),
        ("OffsetForLeaderEpoch", request(23, 4, topics=(
            part(23, 4, "OffsetForLeaderTopic", topic="t", partitions=(
                part(23, 4, "OffsetForLeaderPartition", partition=0, leader_epoch=0),)),)),
         TOPIC),
        ("DescribeAcls", request(29, 3, resource_type_filter=1, pattern_type_filter=1,
                                 operation=1, permission_type=1), CLUSTER),
        ("DescribeConfigs topic", request(32, 4, resources=(
            part(32, 4, "DescribeConfigsResource", resource_type=2, resource_name="t",
                 configuration_keys=None),)), TOPIC),
        ("DescribeConfigs broker", request(32, 4, resources=(
            part(32, 4, "DescribeConfigsResource", resource_type=4, resource_name="0",
                 configuration_keys=None),)), CLUSTER),
        ("AlterConfigs", request(33, 2, resources=(
            part(33, 2, "AlterConfigsResource", resource_type=2, resource_name="t", configs=(
                part(33, 2, "AlterableConfig", name="retention.ms", value="1"),)),)), TOPIC),
        ("IncrementalAlterConfigs", request(44, 1, resources=(
            part(44, 1, "AlterConfigsResource", resource_type=2, resource_name="t", configs=(
                part(44, 1, "AlterableConfig", name="retention.ms", config_operation=0,
                     value="1"),)),)), TOPIC),
        ("CreatePartitions", request(37, 3, timeout=10_000, topics=(
            part(37, 3, "CreatePartitionsTopic", name="t", count=3, assignments=None),)), TOPIC),
        ("DeleteGroups", request(42, 2, groups_names=("g",)), GROUP),
        ("OffsetDelete", request(47, 0, group_id="g", topics=(
            part(47, 0, "OffsetDeleteRequestTopic", name="t", partitions=(
                part(47, 0, "OffsetDeleteRequestPartition", partition_index=0),)),)), GROUP),
        ("DescribeClientQuotas", request(48, 1), CLUSTER),
        ("DescribeUserScramCredentials", request(50, 0, users=None), CLUSTER),
        ("DescribeCluster", request(60, 1), CLUSTER),
        ("AddPartitionsToTxn", request(24, 3, v3_and_below_transactional_id="x",
                                       v3_and_below_producer_id=1, v3_and_below_producer_epoch=0,
                                       v3_and_below_topics=(
            part(24, 3, "AddPartitionsToTxnTopic", name="t", partitions=(0,)),)), TXN),
        ("AddOffsetsToTxn", request(25, 3, transactional_id="x", producer_id=1,
                                    producer_epoch=0, group_id="g"), TXN),
        ("EndTxn", request(26, 3, transactional_id="x", producer_id=1, producer_epoch=0,
                           committed=True), TXN),
        ("TxnOffsetCommit", request(28, 3, transactional_id="x", group_id="g", producer_id=1,
                                    producer_epoch=0, generation_id=-1, member_id="",
                                    group_instance_id=None, topics=(
            part(28, 3, "TxnOffsetCommitRequestTopic", name="t", partitions=(
                part(28, 3, "TxnOffsetCommitRequestPartition", partition_index=0,
                     committed_offset=0, committed_leader_epoch=-1,
                     committed_metadata=""),)),)), TXN),
        ("DescribeProducers", request(61, 0, topics=(
            part(61, 0, "TopicRequest", name="t", partition_indexes=(0,)),)), TOPIC),
        ("DescribeTransactions", request(65, 0, transactional_ids=("x",)), TXN),
    ]  # fmt: skip


CASES = cases()


@pytest.mark.parametrize("name,req,expected", CASES, ids=[c[0] for c in CASES])
def test_a_principal_without_acls_gets_the_authorisation_code(
    secured: Cluster, name: str, req: Any, expected: int
) -> None:
    conn = login(secured, "mallory")
    try:
        assert expected in errors_in(call(conn, req)), name
        # the connection still serves
        assert call(conn, request(3, 12, topics=None)).topics == ()
    finally:
        conn.close()


#: the cases a super user may run on the shared topic (deleting or growing it would change
#: what the other cases see)
HARMLESS_CASES = [c for c in CASES if c[0] not in ("DeleteTopics", "CreatePartitions")]


@pytest.mark.parametrize("name,req,expected", HARMLESS_CASES, ids=[c[0] for c in HARMLESS_CASES])
def test_a_super_user_is_never_refused(
    secured: Cluster, name: str, req: Any, expected: int
) -> None:
    conn = login(secured, "admin")
    try:
        assert not errors_in(call(conn, req)) & {TOPIC, GROUP, CLUSTER, TXN}, name
    finally:
        conn.close()


def test_metadata_and_list_groups_leave_out_what_the_principal_may_not_describe(
    secured: Cluster,
) -> None:
    admin = login(secured, "admin")
    assert "t" in [t.name for t in call(admin, request(3, 12, topics=None)).topics]
    admin.close()
    mallory = login(secured, "mallory")
    assert call(mallory, request(3, 12, topics=None)).topics == ()
    named = call(mallory, request(3, 12, topics=(part(3, 12, "MetadataRequestTopic", name="t"),)))
    assert [(t.name, int(t.error_code)) for t in named.topics] == [("t", TOPIC)]
    assert call(mallory, request(16, 4)).groups == ()
    mallory.close()


def test_unauthenticated_requests_close_the_connection(secured: Cluster) -> None:
    conn = Connection(secured.brokers[0].kafka_address)
    conn.send_frame(conn.encode(request(60, 1)))
    assert conn.read_frame() is None
    conn.close()
