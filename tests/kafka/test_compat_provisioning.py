"""What provisioning tools and applications send around the data (issue 39, items 1-3).

Kafka Connect, Schema Registry, Streams, Strimzi and Terraform create topics with
a replication factor of 3 and topic configs outside sparklog's own; Kafka UI,
AKHQ and ``kafka-log-dirs.sh`` read partition sizes with DescribeLogDirs.  Each
is checked through a real client on one broker and on a three-broker cluster.
"""

from __future__ import annotations

import datetime
import uuid

from confluent_kafka import KafkaError, Producer, TopicCollection
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
)
from kafka.admin import KafkaAdminClient
from kio.schema.create_topics.v7.request import CreatableTopic, CreateTopicsRequest
from kio.schema.describe_cluster.v1.request import DescribeClusterRequest
from kio.schema.metadata.v1.request import MetadataRequest as MetadataV1
from kio.schema.metadata.v12.request import MetadataRequest as MetadataV12

from tests.kafka.wire import Connection
from tests.support.brokers import Cluster
from tests.support.waiting import wait_for

#: every topic config Kafka 4 defines (its LogConfig), each with a valid value other than
#: Kafka's default, as a provisioning tool would set it
KAFKA_TOPIC_CONFIGS = {
    "cleanup.policy": "compact,delete",
    "compression.gzip.level": "6",
    "compression.lz4.level": "10",
    "compression.type": "zstd",
    "compression.zstd.level": "5",
    "delete.retention.ms": "3600000",
    "file.delete.delay.ms": "1000",
    "flush.messages": "1000",
    "flush.ms": "1000",
    "follower.replication.throttled.replicas": "*",
    "index.interval.bytes": "8192",
    "leader.replication.throttled.replicas": "0:1,1:2",
    "local.retention.bytes": "1000000",
    "local.retention.ms": "3600000",
    "max.compaction.lag.ms": "86400000",
    "max.message.bytes": "2000000",
    "message.timestamp.after.max.ms": "60000",
    "message.timestamp.before.max.ms": "86400000",
    "message.timestamp.type": "LogAppendTime",
    "min.cleanable.dirty.ratio": "0.3",
    "min.compaction.lag.ms": "1000",
    "min.insync.replicas": "2",
    "preallocate": "true",
    "remote.log.copy.disable": "true",
    "remote.log.delete.on.disable": "true",
    "remote.storage.enable": "true",
    "retention.bytes": "10000000",
    "retention.ms": "3600000",
    "segment.bytes": "2097152",
    "segment.index.bytes": "1048576",
    "segment.jitter.ms": "100",
    "segment.ms": "3600000",
    "unclean.leader.election.enable": "true",
}
#: a value of the right type outside Kafka's range, for keys of each type
OUT_OF_RANGE = {
    "min.cleanable.dirty.ratio": "1.5",
    "min.insync.replicas": "0",
    "segment.ms": "0",
    "preallocate": "yes",
    "compression.gzip.level": "0",
    "local.retention.ms": "-3",
    "leader.replication.throttled.replicas": "zero:one",
    "index.interval.bytes": str(2**31),
}


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def created(admin: AdminClient, topic: NewTopic, validate_only: bool = False) -> Exception | None:
    """The topic's CreateTopics outcome: None, or the client's exception."""
    future = admin.create_topics([topic], validate_only=validate_only)[topic.topic]
    return future.exception(timeout=30)


def code_and_message(error: Exception | None) -> tuple[int, str]:
    assert error is not None, "the request was accepted"
    kafka_error = error.args[0]
    return kafka_error.code(), kafka_error.str()


def test_replication_factor_up_to_the_live_brokers(brokers: Cluster) -> None:
    live = len(brokers.brokers)
    admin = AdminClient({"bootstrap.servers": brokers.kafka_bootstrap})
    name = unique("replicated")
    assert created(admin, NewTopic(name, 3, live)) is None
    brokers.wait_listed(name)
    meta = admin.list_topics(name, timeout=30).topics[name]
    for partition in meta.partitions.values():
        # the leader, then the brokers that would take the partition over
        assert len(partition.replicas) == live and partition.replicas[0] == partition.leader
        assert sorted(partition.isrs) == sorted(partition.replicas)
    described = admin.describe_topics(TopicCollection([name]))[name].result(timeout=30)
    assert all(len(p.replicas) == live for p in described.partitions)

    default = unique("default-factor")
    assert created(admin, NewTopic(default, 1, -1)) is None
    brokers.wait_listed(default)
    assert len(admin.list_topics(default, timeout=30).topics[default].partitions[0].replicas) == 1

    for too_many in (live + 1, 0):
        for validate_only in (True, False):
            code, message = code_and_message(
                created(admin, NewTopic(unique("over"), 1, too_many), validate_only)
            )
            assert code == KafkaError.INVALID_REPLICATION_FACTOR, message
            assert f"replication factor {too_many} " in message
            assert f"accepted: 1 to {live}" in message and "-1" in message


def test_create_topics_answer_carries_the_factor(brokers: Cluster) -> None:
    """CreateTopics' answer (v5+) reports the factor the topic was created with."""
    live = len(brokers.brokers)
    conn = Connection(brokers.kafka_bootstrap)
    try:
        name = unique("answer")
        request = CreateTopicsRequest(
            topics=(
                CreatableTopic(
                    name=name,
                    num_partitions=1,
                    replication_factor=live,
                    assignments=(),
                    configs=(),
                ),
            ),
            timeout=datetime.timedelta(seconds=30),
            validate_only=False,
        )
        (answer,) = conn.call(request).topics
        assert (answer.error_code, answer.replication_factor) == (0, live)
    finally:
        conn.close()


def configs_of(admin: AdminClient, topic: str) -> dict[str, ConfigEntry]:
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    return admin.describe_configs([resource])[resource].result(timeout=30)


def test_every_kafka_topic_config_is_accepted_stored_and_described(brokers: Cluster) -> None:
    admin = AdminClient({"bootstrap.servers": brokers.kafka_bootstrap})
    name = unique("configured")
    assert created(admin, NewTopic(name, 1, 1, config=KAFKA_TOPIC_CONFIGS)) is None
    brokers.wait_listed(name)
    entries = configs_of(admin, name)
    for key, value in KAFKA_TOPIC_CONFIGS.items():
        assert entries[key].value == value, key
        assert entries[key].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value, key
        assert not entries[key].is_default, key

    plain = unique("plain")
    assert created(admin, NewTopic(plain, 1, 1)) is None
    brokers.wait_listed(plain)
    defaults = configs_of(admin, plain)
    for key, value in {
        "flush.messages": str(2**63 - 1),
        "min.insync.replicas": "1",
        "min.cleanable.dirty.ratio": "0.5",
        "unclean.leader.election.enable": "false",
        "message.timestamp.after.max.ms": "3600000",
        "local.retention.ms": "-2",
    }.items():
        assert defaults[key].value == value and defaults[key].is_default, key
        assert defaults[key].source == ConfigSource.DEFAULT_CONFIG.value, key

    change = ConfigResource(
        ConfigResource.Type.TOPIC,
        plain,
        incremental_configs=[
            ConfigEntry("segment.jitter.ms", "250", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    admin.incremental_alter_configs([change])[change].result(timeout=30)
    wait_for(
        lambda: configs_of(admin, plain)["segment.jitter.ms"].value == "250",
        what="segment.jitter.ms described back",
    )


def test_bad_topic_configs_are_refused_naming_key_and_range(brokers: Cluster) -> None:
    admin = AdminClient({"bootstrap.servers": brokers.kafka_bootstrap})
    for key, value in OUT_OF_RANGE.items():
        code, message = code_and_message(
            created(admin, NewTopic(unique("bad"), 1, 1, config={key: value}))
        )
        assert code == KafkaError.INVALID_CONFIG, message
        assert key in message and value in message and "accepted" in message, message

    code, message = code_and_message(
        created(
            admin,
            NewTopic(
                unique("lags"),
                1,
                1,
                config={"min.compaction.lag.ms": "5000", "max.compaction.lag.ms": "1000"},
            ),
        )
    )
    assert code == KafkaError.INVALID_CONFIG and "min.compaction.lag.ms" in message

    unknown = f"no.such.config.{uuid.uuid4().hex[:6]}"
    code, message = code_and_message(
        created(admin, NewTopic(unique("unknown"), 1, 1, config={unknown: "1"}))
    )
    assert code == KafkaError.INVALID_CONFIG and unknown in message

    def warned() -> bool:
        return any(
            line.get("level") == "WARNING" and line.get("key") == unknown
            for broker in brokers.brokers.values()
            for line in broker.log_lines()
        )

    wait_for(warned, timeout_s=30, what=f"a WARNING naming {unknown} in a broker's log")


def test_describe_log_dirs_sizes_from_the_leaders(brokers: Cluster) -> None:
    admin = AdminClient({"bootstrap.servers": brokers.kafka_bootstrap})
    name = unique("sized")
    assert created(admin, NewTopic(name, 3, 1)) is None
    brokers.wait_listed(name)
    producer = Producer({"bootstrap.servers": brokers.kafka_bootstrap, "linger.ms": 0})
    for partition in range(3):
        for i in range(20 * (partition + 1)):
            producer.produce(name, value=b"x" * 100 + str(i).encode(), partition=partition)
    assert producer.flush(30) == 0

    client = KafkaAdminClient(bootstrap_servers=brokers.kafka_bootstrap)
    try:

        def sizes() -> dict[int, list[int]]:
            found: dict[int, list[int]] = {}
            for answer in client.describe_log_dirs(topic_partitions=[name]):
                for result in answer["log_dirs"]:
                    assert result["error_code"] == 0, answer
                    for topic in result["topics"]:
                        assert topic["name"] == name, answer
                        for p in topic["partitions"]:
                            found.setdefault(p["partition_index"], []).append(p["partition_size"])
            return found

        def each_once() -> dict[int, list[int]] | None:
            found = sizes()
            once = sorted(found) == [0, 1, 2] and all(
                len(v) == 1 and v[0] > 0 for v in found.values()
            )
            return found if once else None

        # each partition reported once, by its leader, with its stored bytes
        found = wait_for(each_once, what=f"DescribeLogDirs to report {name}'s three partitions")
        assert found[0][0] < found[1][0] < found[2][0]
    finally:
        client.close()


def controller_ids(cluster: Cluster) -> set[int]:
    """The controller id every broker names, in Metadata v1 and v12 and DescribeCluster."""
    seen = set()
    for broker in cluster.brokers.values():
        assert broker.kafka_address is not None
        conn = Connection(broker.kafka_address)
        try:
            seen.add(int(conn.call(MetadataV1(topics=())).controller_id))
            v12 = MetadataV12(
                topics=(),
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=False,
            )
            seen.add(int(conn.call(v12).controller_id))
            seen.add(
                int(
                    conn.call(
                        DescribeClusterRequest(
                            include_cluster_authorized_operations=False, endpoint_type=1
                        )
                    ).controller_id
                )
            )
        finally:
            conn.close()
    return seen


def test_one_controller_id_in_every_api(brokers: Cluster) -> None:
    ids = controller_ids(brokers)
    assert len(ids) == 1 and ids.pop() in brokers.brokers


def test_docs_api_table_is_the_listeners() -> None:
    """docs/broker.md's table of Kafka 4's APIs says, for each, what ApiVersions says."""
    import pathlib

    from sparklog.broker_lite.kafka.versions import API_TABLE

    text = (pathlib.Path(__file__).parents[2] / "docs" / "broker.md").read_text()
    section = text.split("### Every API of a Kafka 4 broker", 1)[1].split("\n### ", 1)[0]
    rows = [line.split("|")[1:4] for line in section.splitlines() if line.startswith("| ")]
    answers = {int(key): answer.strip() for key, _name, answer in rows[1:]}
    for key, api in API_TABLE.items():
        versions = (
            f"{api.min_version}"
            if api.min_version == api.max_version
            else f"{api.min_version}-{api.max_version}"
        )
        assert answers.get(key) == f"served, versions {versions}", api.name
    refused = {k for k, answer in answers.items() if not answer.startswith("served")}
    assert refused.isdisjoint(API_TABLE)
    assert all(answers[k].startswith("refused: ") for k in refused)


def test_validate_only_partitions_and_configs_check_what_the_real_request_checks(
    brokers: Cluster,
) -> None:
    """CreatePartitions and AlterConfigs with validate_only refused nothing and changed
    nothing: a shrink or a bad config value was answered as accepted (issue 38 item 7)."""
    admin = AdminClient({"bootstrap.servers": brokers.kafka_bootstrap})
    name = unique("validated")
    assert created(admin, NewTopic(name, 2, 1)) is None
    brokers.wait_listed(name)

    def grow(total: int) -> Exception | None:
        future = admin.create_partitions([NewPartitions(name, total)], validate_only=True)
        return future[name].exception(timeout=30)

    code, message = code_and_message(grow(1))
    assert code == KafkaError.INVALID_PARTITIONS and "more than the current 2" in message
    assert grow(4) is None
    resource = ConfigResource(ConfigResource.Type.TOPIC, name, {"retention.ms": "-7"})
    bad = admin.alter_configs([resource], validate_only=True)[resource].exception(timeout=30)
    assert bad is not None and "retention.ms" in str(bad)
    good = ConfigResource(ConfigResource.Type.TOPIC, name, {"retention.ms": "3600000"})
    assert admin.alter_configs([good], validate_only=True)[good].exception(timeout=30) is None
    assert len(admin.list_topics(name, timeout=30).topics[name].partitions) == 2  # unchanged
    described = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, name)])
    (configs,) = [f.result(timeout=30) for f in described.values()]
    assert configs["retention.ms"].value != "3600000"
