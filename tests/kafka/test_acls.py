"""ACLs on the Kafka listener (``authorizer = "acl"``) with confluent-kafka and kafka-python.

Three users on one SASL_PLAINTEXT broker: ``admin`` (a super user), ``alice``
(write, read and describe on topics prefixed ``team-a.``, read on group
``team-a-app``) and ``mallory`` (no ACL).  What mallory tried in issue 23
(list, read, write, delete topics, reset or delete another team's group,
change configs) each gets Kafka's authorisation error; alice does her job.
"""

from __future__ import annotations

import pathlib
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ConfigResource,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from sparklog.security import acls, users
from sparklog.storage.catalog import open_root
from tests.support.brokers import Cluster
from tests.support.waiting import wait_for

PASSWORDS = {"admin": "admin-pw", "alice": "alice-pw", "mallory": "mallory-pw"}


def auth(user: str) -> dict[str, Any]:
    return {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": user,
        "sasl.password": PASSWORDS[user],
    }


@pytest.fixture
def acl_cluster(tmp_path: pathlib.Path) -> Iterator[Cluster]:
    root = f"file://{tmp_path}/root"
    metadata = open_root(root, create=True).metadata
    for user, password in PASSWORDS.items():
        users.create(metadata, user, "SCRAM-SHA-256", password)
    acls.create(
        metadata,
        [
            acls.binding("TOPIC", "team-a.", "User:alice", op, pattern_type="PREFIXED")
            for op in ("WRITE", "READ", "DESCRIBE")
        ]
        + [acls.binding("GROUP", "team-a-app", "User:alice", "READ")],
    )
    cluster = Cluster(tmp_path, root)
    cluster.start(
        0,
        kafka_security_protocol="SASL_PLAINTEXT",
        authorizer="acl",
        super_users="User:admin",
        auto_create_topics_enable=False,
    )
    admin = AdminClient({"bootstrap.servers": cluster.kafka_bootstrap, **auth("admin")})
    for name in ("team-a.events", "payroll"):
        admin.create_topics([NewTopic(name, 1, 1)])[name].result(timeout=30)
    producer = Producer({"bootstrap.servers": cluster.kafka_bootstrap, **auth("admin")})
    producer.produce("payroll", b"salary")
    assert producer.flush(30) == 0
    yield cluster
    cluster.stop_all()


def kafka_python_admin(bootstrap: str, user: str | None) -> Any:
    from kafka import KafkaAdminClient

    options: dict[str, Any] = {}
    if user is not None:
        options = {
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "SCRAM-SHA-256",
            "sasl_plain_username": user,
            "sasl_plain_password": PASSWORDS[user],
        }
    return KafkaAdminClient(bootstrap_servers=bootstrap, **options)


def _any_acl() -> Any:
    from kafka.admin import (
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        ResourcePatternFilter,
    )
    from kafka.admin import ResourceType as KpResourceType

    return ACLFilter(
        principal=None,
        host="*",
        operation=ACLOperation.ANY,
        permission_type=ACLPermissionType.ANY,
        resource_pattern=ResourcePatternFilter(
            KpResourceType.ANY, None, ACLResourcePatternType.ANY
        ),
    )


ANY_ACL = _any_acl()


def admin_as(cluster: Cluster, user: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": cluster.kafka_bootstrap, **auth(user)})


def error_code(future: Any) -> Any:
    with pytest.raises(KafkaException) as raised:
        future.result(timeout=30)
    return raised.value.args[0].code()


def produce_error(cluster: Cluster, user: str, topic: str) -> Any:
    producer = Producer(
        {"bootstrap.servers": cluster.kafka_bootstrap, "message.timeout.ms": 10_000, **auth(user)}
    )
    outcome: list[Any] = []
    producer.produce(topic, b"x", on_delivery=lambda err, msg: outcome.append(err))
    producer.flush(30)
    assert outcome, "no delivery report"
    return outcome[0]


def test_metadata_hides_topics_a_principal_may_not_describe(acl_cluster: Cluster) -> None:
    assert set(admin_as(acl_cluster, "admin").list_topics(timeout=30).topics) >= {
        "payroll",
        "team-a.events",
    }
    assert set(admin_as(acl_cluster, "alice").list_topics(timeout=30).topics) == {"team-a.events"}
    assert set(admin_as(acl_cluster, "mallory").list_topics(timeout=30).topics) == set()
    named = admin_as(acl_cluster, "mallory").list_topics("payroll", timeout=30)
    assert named.topics["payroll"].error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_write_and_read_need_their_acls(acl_cluster: Cluster) -> None:
    assert produce_error(acl_cluster, "alice", "team-a.events") is None
    denied = produce_error(acl_cluster, "alice", "payroll")
    assert denied is not None and denied.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    denied = produce_error(acl_cluster, "mallory", "team-a.events")
    assert denied is not None and denied.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED

    def first_error(user: str, topic: str, group: str) -> Any:
        consumer = Consumer(
            {
                "bootstrap.servers": acl_cluster.kafka_bootstrap,
                "group.id": group,
                "auto.offset.reset": "earliest",
                **auth(user),
            }
        )
        consumer.subscribe([topic])
        deadline = time.monotonic() + 30
        try:
            while time.monotonic() < deadline:
                msg = consumer.poll(0.5)
                if msg is None:
                    continue
                return msg.error().code() if msg.error() else msg.value()
        finally:
            consumer.close()
        return None

    assert first_error("alice", "team-a.events", "team-a-app") == b"x"
    assert first_error("alice", "team-a.events", "other-app") == (
        KafkaError.GROUP_AUTHORIZATION_FAILED
    )
    assert first_error("mallory", "payroll", "mallory-app") in (
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.GROUP_AUTHORIZATION_FAILED,
    )


def test_admin_calls_answer_kafkas_authorisation_codes(acl_cluster: Cluster) -> None:
    mallory = admin_as(acl_cluster, "mallory")
    assert error_code(mallory.delete_topics(["payroll"])["payroll"]) == (
        KafkaError.TOPIC_AUTHORIZATION_FAILED
    )
    assert error_code(mallory.create_topics([NewTopic("mine", 1, 1)])["mine"]) == (
        KafkaError.TOPIC_AUTHORIZATION_FAILED
    )
    resource = ConfigResource(ConfigResource.Type.TOPIC, "payroll", {"retention.ms": "1"})
    assert error_code(mallory.alter_configs([resource])[resource]) == (
        KafkaError.TOPIC_AUTHORIZATION_FAILED
    )
    assert error_code(mallory.delete_consumer_groups(["team-a-app"])["team-a-app"]) == (
        KafkaError.GROUP_AUTHORIZATION_FAILED
    )
    from kafka.errors import ClusterAuthorizationFailedError

    with pytest.raises(ClusterAuthorizationFailedError):  # librdkafka drops this error
        kafka_python_admin(acl_cluster.kafka_bootstrap, "mallory").describe_acls(ANY_ACL)
    assert "payroll" in admin_as(acl_cluster, "admin").list_topics(timeout=30).topics


def test_acls_are_managed_through_the_listener(acl_cluster: Cluster) -> None:
    admin = admin_as(acl_cluster, "admin")
    grant = AclBinding(
        ResourceType.TOPIC,
        "payroll",
        ResourcePatternType.LITERAL,
        "User:mallory",
        "*",
        AclOperation.WRITE,
        AclPermissionType.ALLOW,
    )
    for future in admin.create_acls([grant]).values():
        future.result(timeout=30)
    assert produce_error(acl_cluster, "mallory", "payroll") is None
    everything = AclBindingFilter(
        ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
        AclOperation.ANY, AclPermissionType.ANY,
    )  # fmt: skip
    described = admin.describe_acls(everything).result(timeout=30)
    assert grant in described and len(described) == 5
    # a DENY wins over the ALLOW
    deny = AclBinding(
        ResourceType.TOPIC,
        "pay",
        ResourcePatternType.PREFIXED,
        "User:*",
        "*",
        AclOperation.ALL,
        AclPermissionType.DENY,
    )
    for future in admin.create_acls([deny]).values():
        future.result(timeout=30)
    denied = produce_error(acl_cluster, "mallory", "payroll")
    assert denied is not None and denied.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    mallory_filter = AclBindingFilter(
        ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
        AclOperation.ANY, AclPermissionType.ANY,
    )  # fmt: skip
    deleted = admin.delete_acls([mallory_filter])[mallory_filter].result(timeout=30)
    assert grant in deleted and deny in deleted
    assert admin.describe_acls(everything).result(timeout=30) == []


def test_acls_written_on_the_root_reach_the_running_broker(acl_cluster: Cluster) -> None:
    """``sparklog acls add`` on the root: the broker follows the metadata log."""
    from tests.kafka.test_security import sparklog_cli

    added = sparklog_cli(
        "-a", acl_cluster.root, "acls", "add", "--allow-principal", "User:mallory",
        "--operation", "Describe", "--topic", "payroll",
    )  # fmt: skip
    assert added.returncode == 0, added.stderr

    def visible() -> bool:
        return "payroll" in admin_as(acl_cluster, "mallory").list_topics(timeout=30).topics

    wait_for(visible, timeout_s=30, what="payroll described by mallory")
    listed = sparklog_cli(
        "-a", acl_cluster.root, "-o", "json", "acls", "list", "--topic", "payroll"
    )
    assert '"User:mallory"' in listed.stdout


def test_without_an_authorizer_the_acl_apis_answer_security_disabled(brokers: Cluster) -> None:
    from kafka.errors import SecurityDisabledError

    with pytest.raises(SecurityDisabledError):  # librdkafka drops DescribeAcls' error
        kafka_python_admin(brokers.kafka_bootstrap, None).describe_acls(ANY_ACL)
    admin = AdminClient({"bootstrap.servers": brokers.kafka_bootstrap})
    grant = AclBinding(
        ResourceType.TOPIC, "t", ResourcePatternType.LITERAL, "User:a", "*",
        AclOperation.READ, AclPermissionType.ALLOW,
    )  # fmt: skip
    assert error_code(admin.create_acls([grant])[grant]) == KafkaError.SECURITY_DISABLED


def test_allow_everyone_if_no_acl_found(tmp_path: pathlib.Path) -> None:
    cluster = Cluster(tmp_path, f"file://{tmp_path}/root")
    try:
        cluster.start(0, authorizer="acl", allow_everyone_if_no_acl_found=True)
        metadata = open_root(cluster.root).metadata
        acls.create(metadata, [acls.binding("TOPIC", "closed", "User:someone", "READ")])
        open_topic = Producer({"bootstrap.servers": cluster.kafka_bootstrap})
        errors: list[Any] = []
        open_topic.produce("open", b"x", on_delivery=lambda err, msg: errors.append(err))
        open_topic.flush(30)
        assert errors == [None]

        def closed() -> bool:
            producer = Producer(
                {"bootstrap.servers": cluster.kafka_bootstrap, "message.timeout.ms": 5000}
            )
            seen: list[Any] = []
            producer.produce("closed", b"x", on_delivery=lambda err, msg: seen.append(err))
            producer.flush(30)
            return bool(seen and seen[0] is not None)

        wait_for(closed, timeout_s=30, what="the ACL on 'closed' applied")
    finally:
        cluster.stop_all()


def test_kafka_python_gets_the_authorisation_error(acl_cluster: Cluster) -> None:
    from kafka import KafkaProducer
    from kafka.errors import TopicAuthorizationFailedError

    producer = KafkaProducer(
        bootstrap_servers=acl_cluster.kafka_bootstrap,
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="SCRAM-SHA-256",
        sasl_plain_username="mallory",
        sasl_plain_password=PASSWORDS["mallory"],
        max_block_ms=10_000,
    )
    try:
        with pytest.raises(TopicAuthorizationFailedError):
            producer.send("payroll", b"x").get(timeout=30)
    finally:
        producer.close()
