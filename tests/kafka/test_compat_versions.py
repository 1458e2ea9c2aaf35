"""Old API versions older clients send (issue 24 item 6), encoded by kafka-python.

kafka-python's ``kafka.protocol.old`` classes encode the versions Kafka 3.9 still
served and kio (Kafka 4's schemas) does not generate: OffsetCommit v0-v1 (sarama
1.22's default), OffsetFetch v0, ListOffsets v0 (Burrow), DescribeConfigs v0 and
DescribeAcls v0 (sarama's ClusterAdmin), CreateTopics v0-v1, DeleteTopics v0.
An independent encoder, so the listener's legacy schemas are checked against
someone else's reading of Kafka's formats.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.protocol.old.admin import (
    CreateTopicsRequest_v0,
    CreateTopicsRequest_v1,
    CreateTopicsResponse_v0,
    CreateTopicsResponse_v1,
    DeleteTopicsRequest_v0,
    DeleteTopicsResponse_v0,
    DescribeAclsRequest_v0,
    DescribeAclsResponse_v0,
    DescribeConfigsRequest_v0,
    DescribeConfigsResponse_v0,
)
from kafka.protocol.old.commit import (
    OffsetCommitRequest_v0,
    OffsetCommitRequest_v1,
    OffsetCommitResponse_v0,
    OffsetCommitResponse_v1,
    OffsetFetchRequest_v0,
    OffsetFetchResponse_v0,
)
from kafka.protocol.old.fetch import (
    FetchRequest_v0,
    FetchRequest_v2,
    FetchRequest_v3,
    FetchResponse_v0,
    FetchResponse_v2,
    FetchResponse_v3,
)
from kafka.protocol.old.list_offsets import ListOffsetsRequest_v0, ListOffsetsResponse_v0
from kafka.protocol.old.produce import (
    ProduceRequest_v0,
    ProduceRequest_v2,
    ProduceResponse_v0,
    ProduceResponse_v2,
)
from kafka.record.legacy_records import LegacyRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords as KafkaMemoryRecords
from kio.schema.api_versions.v0.request import ApiVersionsRequest as ApiVersionsV0
from kio.schema.produce.v9.request import ProduceRequest

from sparklog.broker_lite.kafka.versions import API_TABLE
from tests.kafka.wire import Connection, record_batch_bytes
from tests.support.brokers import Cluster

TOPIC = "legacy"


@pytest.fixture
def conn(one_broker: Cluster) -> Iterator[Connection]:
    bootstrap = one_broker.kafka_bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(timeout=30)
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(5):
        producer.produce(TOPIC, value=f"v{i}".encode())
    assert producer.flush(30) == 0
    connection = Connection(bootstrap)
    yield connection
    connection.close()


def old_call(conn: Connection, request: Any, response_cls: Any) -> dict[str, Any]:
    """Send a kafka-python old-version request; its response as a dict."""
    conn.correlation += 1
    request.with_header(correlation_id=conn.correlation, client_id="sarama")
    conn.sock.sendall(request.encode(header=True, framed=True))
    frame = conn.read_frame()
    assert frame is not None, "the broker closed the connection"
    assert int.from_bytes(frame[:4], "big", signed=True) == conn.correlation
    return response_cls.decode(frame[4:]).to_object()


def test_sarama_offset_commit_v0_v1_and_fetch_v0(conn: Connection) -> None:
    commit_v1 = OffsetCommitRequest_v1(
        group_id="sarama-group",
        generation_id_or_member_epoch=-1,
        member_id="",
        topics=[(TOPIC, [(0, 3, -1, "meta")])],
    )
    answer = old_call(conn, commit_v1, OffsetCommitResponse_v1)
    assert answer["topics"][0]["partitions"][0]["error_code"] == 0
    fetch = OffsetFetchRequest_v0(group_id="sarama-group", topics=[(TOPIC, [0])])
    found = old_call(conn, fetch, OffsetFetchResponse_v0)["topics"][0]["partitions"][0]
    assert (found["committed_offset"], found["error_code"]) == (3, 0)

    commit_v0 = OffsetCommitRequest_v0(group_id="sarama-group", topics=[(TOPIC, [(0, 4, "")])])
    answer = old_call(conn, commit_v0, OffsetCommitResponse_v0)
    assert answer["topics"][0]["partitions"][0]["error_code"] == 0
    found = old_call(conn, fetch, OffsetFetchResponse_v0)["topics"][0]["partitions"][0]
    assert found["committed_offset"] == 4


def test_burrow_list_offsets_v0(conn: Connection) -> None:
    def offsets(timestamp: int) -> list[int]:
        request = ListOffsetsRequest_v0(replica_id=-1, topics=[(TOPIC, [(0, timestamp, 1)])])
        part = old_call(conn, request, ListOffsetsResponse_v0)["topics"][0]["partitions"][0]
        assert part["error_code"] == 0
        return list(part["old_style_offsets"])

    assert offsets(-1) == [5]
    assert offsets(-2) == [0]


def test_sarama_admin_describe_configs_v0_and_acls_v0(conn: Connection) -> None:
    request = DescribeConfigsRequest_v0(resources=[(2, TOPIC, ["retention.ms"])])
    (result,) = old_call(conn, request, DescribeConfigsResponse_v0)["results"]
    assert result["error_code"] == 0 and result["resource_name"] == TOPIC
    (config,) = result["configs"]
    assert config["name"] == "retention.ms" and config["is_default"] is True

    acls = DescribeAclsRequest_v0(
        resource_type_filter=1,
        resource_name_filter=None,
        principal_filter=None,
        host_filter=None,
        operation=1,
        permission_type=1,
    )
    answer = old_call(conn, acls, DescribeAclsResponse_v0)
    assert answer["error_code"] == 54  # SECURITY_DISABLED: no authorizer, as Kafka says
    assert answer["resources"] == []


def test_create_topics_v0_v1_and_delete_topics_v0(conn: Connection) -> None:
    v0 = CreateTopicsRequest_v0(topics=[("old-made", 2, 1, [], [])], timeout_ms=10_000)
    assert old_call(conn, v0, CreateTopicsResponse_v0)["topics"] == [
        {"name": "old-made", "error_code": 0}
    ]
    v1 = CreateTopicsRequest_v1(
        topics=[("old-made", 2, 1, [], [])], timeout_ms=10_000, validate_only=False
    )
    (again,) = old_call(conn, v1, CreateTopicsResponse_v1)["topics"]
    assert again["error_code"] == 36 and "old-made" in again["error_message"]
    delete = DeleteTopicsRequest_v0(topic_names=["old-made"], timeout_ms=10_000)
    assert old_call(conn, delete, DeleteTopicsResponse_v0)["responses"] == [
        {"name": "old-made", "error_code": 0}
    ]


def test_api_versions_advertise_the_floors_served(conn: Connection) -> None:
    answer = conn.call(ApiVersionsV0())
    ranges = {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys}
    assert ranges == {a.key: (a.min_version, a.max_version) for a in API_TABLE.values()}
    for key, floor in {2: 0, 8: 0, 9: 0, 19: 0, 20: 0, 23: 0, 29: 0, 32: 0}.items():
        assert ranges[key][0] == floor


def test_an_unsupported_version_closes_the_connection_as_kafka_does(conn: Connection) -> None:
    produce_v9 = conn.encode(
        ProduceRequest(transactional_id=None, acks=1, timeout=timedelta(seconds=1), topic_data=())
    )
    # the same body claiming Produce v12, which the table does not list
    conn.send_frame(produce_v9[:2] + (12).to_bytes(2, "big") + produce_v9[4:])
    assert conn.read_frame() is None


def message_set(magic: int, values: list[bytes], compression: int = 0) -> bytes:
    """A message set of the old format ``magic``, built by kafka-python."""
    builder = LegacyRecordBatchBuilder(magic, compression, 1 << 20)
    for i, value in enumerate(values):
        builder.append(i, timestamp=1_700_000_000_000 + i if magic else None, key=None, value=value)
    return bytes(builder.build())


def fetched(conn: Connection, request: Any, response_cls: Any) -> list[tuple[int, int, bytes]]:
    """(magic, offset, value) of each message a Fetch v0-3 answer carries."""
    answer = old_call(conn, request, response_cls)
    (part,) = answer["responses"][0]["partitions"]
    assert part["error_code"] == 0
    records = KafkaMemoryRecords(part["records"])
    out = []
    while records.has_next():
        batch = records.next_batch()
        out.extend((batch.magic, r.offset, r.value) for r in batch)
    return out


def test_kafka_go_0_2_produce_v0_v2_and_fetch_v0_v3_old_message_formats(
    conn: Connection,
) -> None:
    def produce(request: Any, response_cls: Any) -> tuple[int, int]:
        part = old_call(conn, request, response_cls)["responses"][0]["partition_responses"][0]
        return part["error_code"], part["base_offset"]

    # the fixture's topic holds v0..v4 at offsets 0-4
    v2 = ProduceRequest_v2(-1, 10_000, [(TOPIC, [(0, message_set(1, [b"m1a", b"m1b"]))])])
    assert produce(v2, ProduceResponse_v2) == (0, 5)
    gzip_set = message_set(1, [b"gz1", b"gz2"], compression=1)
    assert produce(
        ProduceRequest_v2(-1, 10_000, [(TOPIC, [(0, gzip_set)])]), ProduceResponse_v2
    ) == (0, 7)
    v0 = ProduceRequest_v0(-1, 10_000, [(TOPIC, [(0, message_set(0, [b"m0"]))])])
    assert produce(v0, ProduceResponse_v0) == (0, 9)
    corrupt = bytearray(message_set(1, [b"bad"]))
    corrupt[-1] ^= 0xFF
    bad = ProduceRequest_v2(-1, 10_000, [(TOPIC, [(0, bytes(corrupt))])])
    assert produce(bad, ProduceResponse_v2)[0] == 2  # CORRUPT_MESSAGE

    values = [b"v0", b"v1", b"v2", b"v3", b"v4", b"m1a", b"m1b", b"gz1", b"gz2", b"m0"]
    v2_fetch = FetchRequest_v2(-1, 100, 1, [(TOPIC, [(0, 0, 1 << 20)])])
    assert fetched(conn, v2_fetch, FetchResponse_v2) == [(1, i, v) for i, v in enumerate(values)]
    v3_fetch = FetchRequest_v3(-1, 100, 1, 1 << 20, [(TOPIC, [(0, 5, 1 << 20)])])
    assert fetched(conn, v3_fetch, FetchResponse_v3) == [
        (1, i + 5, v) for i, v in enumerate(values[5:])
    ]
    v0_fetch = FetchRequest_v0(-1, 100, 1, [(TOPIC, [(0, 8, 1 << 20)])])
    assert fetched(conn, v0_fetch, FetchResponse_v0) == [(0, 8, b"gz2"), (0, 9, b"m0")]


def test_newer_versions_kafka_3_9_served(conn: Connection) -> None:
    """Produce v11 (KIP-951's v10 fields left empty) and OffsetCommit v9 (KIP-848's
    first version, the same body as v8)."""
    from kio.schema.offset_commit.v9.request import (
        OffsetCommitRequest,
        OffsetCommitRequestPartition,
        OffsetCommitRequestTopic,
    )
    from kio.schema.produce.v11.request import (
        PartitionProduceData,
        TopicProduceData,
    )
    from kio.schema.produce.v11.request import ProduceRequest as ProduceV11

    answer = conn.call(
        ProduceV11(
            transactional_id=None,
            acks=-1,
            timeout=timedelta(seconds=10),
            topic_data=(
                TopicProduceData(
                    name=TOPIC,
                    partition_data=(
                        PartitionProduceData(index=0, records=record_batch_bytes([b"new"])),
                    ),
                ),
            ),
        )
    )
    part = answer.responses[0].partition_responses[0]
    assert (part.error_code.value, part.base_offset) == (0, 5)
    commit = conn.call(
        OffsetCommitRequest(
            group_id="v9-group",
            generation_id_or_member_epoch=-1,
            member_id="",
            group_instance_id=None,
            topics=(
                OffsetCommitRequestTopic(
                    name=TOPIC,
                    partitions=(
                        OffsetCommitRequestPartition(
                            partition_index=0,
                            committed_offset=6,
                            committed_leader_epoch=-1,
                            committed_metadata=None,
                        ),
                    ),
                ),
            ),
        )
    )
    assert commit.topics[0].partitions[0].error_code.value == 0


def test_offset_fetch_v9_batches_groups_and_delete_topics_v6_by_id(
    one_broker: Cluster, conn: Connection
) -> None:
    from kio.schema.delete_topics.v6.request import DeleteTopicsRequest, DeleteTopicState
    from kio.schema.offset_fetch.v9.request import (
        OffsetFetchRequest,
        OffsetFetchRequestGroup,
        OffsetFetchRequestTopics,
    )

    commit = OffsetCommitRequest_v1(
        group_id="g-one", generation_id_or_member_epoch=-1, member_id="",
        topics=[(TOPIC, [(0, 2, -1, "")])],
    )  # fmt: skip
    assert (
        old_call(conn, commit, OffsetCommitResponse_v1)["topics"][0]["partitions"][0]["error_code"]
        == 0
    )

    def group(name: str) -> OffsetFetchRequestGroup:
        topics = (OffsetFetchRequestTopics(name=TOPIC, partition_indexes=(0,)),)
        return OffsetFetchRequestGroup(
            group_id=name, member_id=None, member_epoch=-1, topics=topics
        )

    answer = conn.call(
        OffsetFetchRequest(groups=(group("g-one"), group("g-none")), require_stable=False)
    )
    found = {g.group_id: g.topics[0].partitions[0].committed_offset for g in answer.groups}
    assert found == {"g-one": 2, "g-none": -1}

    admin = AdminClient({"bootstrap.servers": one_broker.kafka_bootstrap})
    admin.create_topics([NewTopic("by-id", 1, 1)])["by-id"].result(timeout=30)
    from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic

    meta = conn.call(
        MetadataRequest(
            topics=(MetadataRequestTopic(topic_id=uuid.UUID(int=0), name="by-id"),),
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
    )
    topic_id = meta.topics[0].topic_id
    assert topic_id != uuid.UUID(int=0)
    deleted = conn.call(
        DeleteTopicsRequest(
            topics=(DeleteTopicState(name=None, topic_id=topic_id),), timeout=timedelta(seconds=10)
        )
    )
    (result,) = deleted.responses
    assert (result.error_code.value, result.name) == (0, "by-id")
    unknown = conn.call(
        DeleteTopicsRequest(
            topics=(DeleteTopicState(name=None, topic_id=uuid.uuid4()),),
            timeout=timedelta(seconds=10),
        )
    )
    assert unknown.responses[0].error_code.value == 100  # UNKNOWN_TOPIC_ID


def test_find_coordinator_v5_batches_keys(one_broker: Cluster, conn: Connection) -> None:
    from kio.schema.find_coordinator.v5.request import FindCoordinatorRequest

    answer = conn.call(FindCoordinatorRequest(key_type=0, coordinator_keys=("g-a", "g-b")))
    host, port = one_broker.kafka_bootstrap.rsplit(":", 1)
    assert [(c.key, c.error_code.value, c.host, c.port) for c in answer.coordinators] == [
        ("g-a", 0, host, int(port)),
        ("g-b", 0, host, int(port)),
    ]
    txn = conn.call(FindCoordinatorRequest(key_type=1, coordinator_keys=("tx",)))
    # transactional ids (key type 1) have coordinators too (issue 25)
    assert [(c.key, c.error_code.value, c.host, c.port) for c in txn.coordinators] == [
        ("tx", 0, host, int(port))
    ]


def test_fetch_v17_names_topics_by_id(conn: Connection) -> None:
    from kio.schema.fetch.v17.request import FetchPartition, FetchRequest, FetchTopic, ReplicaState
    from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic

    meta = conn.call(
        MetadataRequest(
            topics=(MetadataRequestTopic(topic_id=uuid.UUID(int=0), name=TOPIC),),
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
    )
    topic_id = meta.topics[0].topic_id

    def fetch(tid: uuid.UUID) -> Any:
        part = FetchPartition(
            partition=0,
            current_leader_epoch=-1,
            fetch_offset=3,
            last_fetched_epoch=-1,
            log_start_offset=-1,
            partition_max_bytes=1 << 20,
            replica_directory_id=uuid.UUID(int=0),
        )
        return conn.call(
            FetchRequest(
                cluster_id=None,
                replica_state=ReplicaState(replica_id=-1, replica_epoch=-1),
                max_wait=timedelta(milliseconds=100),
                min_bytes=1,
                max_bytes=1 << 20,
                isolation_level=0,
                session_id=0,
                session_epoch=-1,
                topics=(FetchTopic(topic_id=tid, partitions=(part,)),),
                forgotten_topics_data=(),
                rack_id="",
            )
        )

    (topic,) = fetch(topic_id).responses
    (part,) = topic.partitions
    assert topic.topic_id == topic_id and part.error_code.value == 0
    records = KafkaMemoryRecords(bytes(part.records))
    values = [r.value for batch in iter(records.next_batch, None) for r in batch]
    assert values == [b"v3", b"v4"]
    (missing,) = fetch(uuid.uuid4()).responses
    assert missing.partitions[0].error_code.value == 100  # UNKNOWN_TOPIC_ID
