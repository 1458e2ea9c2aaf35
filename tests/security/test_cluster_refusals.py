"""Refused cluster changes answer one CLUSTER_AUTHORIZATION_FAILED per item, as Kafka (#38.10).

CreateAcls, DeleteAcls and AlterClientQuotas answer a list of results, one per
creation, filter or entity; Kafka's ``getErrorResponse`` fills it with the
error when the caller may not alter the cluster. An empty list reads as "done"
to a client counting results, so bob (no ACL on the cluster) must get one
refusal per item, over the real listener.
"""

from __future__ import annotations

import pathlib
from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)
from kio.schema.alter_client_quotas.v1.request import (
    AlterClientQuotasRequest,
    EntityData,
    EntryData,
    OpData,
)
from kio.schema.create_acls.v3.request import AclCreation, CreateAclsRequest
from kio.schema.delete_acls.v3.request import DeleteAclsFilter, DeleteAclsRequest
from kio.static.primitive import f64, i8

from sparklog.security import users
from sparklog.storage.catalog import open_root
from tests.kafka.test_security import _plain_login
from tests.support.brokers import Cluster

CLUSTER_DENIED = 31
TOPIC, LITERAL, ALLOW, READ = 2, 3, 3, 3


@pytest.fixture
def cluster(tmp_path: pathlib.Path) -> Iterator[Cluster]:
    root = f"file://{tmp_path}/root"
    metadata = open_root(root, create=True).metadata
    users.create(metadata, "admin", "SCRAM-SHA-256", "admin-pw")
    users.create(metadata, "bob", "SCRAM-SHA-256", "bob-pw")
    cluster = Cluster(tmp_path, root)
    cluster.start(
        0, kafka_security_protocol="SASL_PLAINTEXT", authorizer="acl", super_users="User:admin"
    )
    yield cluster
    cluster.stop_all()


def _creation(topic: str) -> AclCreation:
    return AclCreation(
        resource_type=i8(TOPIC), resource_name=topic, resource_pattern_type=i8(LITERAL),
        principal="User:bob", host="*", operation=i8(READ), permission_type=i8(ALLOW),
    )  # fmt: skip


def test_each_refused_item_gets_its_own_refusal(cluster: Cluster) -> None:
    conn = _plain_login(cluster.brokers[0].kafka_address, "bob", "bob-pw")
    created = conn.call(CreateAclsRequest(creations=(_creation("a"), _creation("b"))))
    assert [r.error_code for r in created.results] == [CLUSTER_DENIED] * 2
    deleted = conn.call(
        DeleteAclsRequest(
            filters=tuple(
                DeleteAclsFilter(
                    resource_type_filter=i8(TOPIC),
                    resource_name_filter=name,
                    pattern_type_filter=i8(LITERAL),
                    principal_filter=None,
                    host_filter=None,
                    operation=i8(READ),
                    permission_type=i8(ALLOW),
                )
                for name in ("a", "b", "c")
            )
        )
    )
    assert [r.error_code for r in deleted.filter_results] == [CLUSTER_DENIED] * 3
    assert all(r.matching_acls == () for r in deleted.filter_results)
    entries = tuple(
        EntryData(
            entity=(EntityData(entity_type="user", entity_name=user),),
            ops=(OpData(key="producer_byte_rate", value=f64(1e9), remove=False),),
        )
        for user in ("bob", "alice")
    )
    altered = conn.call(AlterClientQuotasRequest(entries=entries, validate_only=False))
    assert [(e.error_code, [x.entity_name for x in e.entity]) for e in altered.entries] == [
        (CLUSTER_DENIED, ["bob"]),
        (CLUSTER_DENIED, ["alice"]),
    ]
    conn.close()
    # nothing changed: the super user sees no ACL and no quota
    admin = _plain_login(cluster.brokers[0].kafka_address, "admin", "admin-pw")
    again = admin.call(CreateAclsRequest(creations=(_creation("a"),)))
    assert [r.error_code for r in again.results] == [0]
    admin.close()


def test_confluent_kafka_sees_a_refusal_for_each_binding(cluster: Cluster) -> None:
    admin = AdminClient(
        {
            "bootstrap.servers": cluster.kafka_bootstrap,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": "bob",
            "sasl.password": "bob-pw",
        }
    )
    bindings = [
        AclBinding(ResourceType.TOPIC, name, ResourcePatternType.LITERAL, "User:bob", "*",
                   AclOperation.READ, AclPermissionType.ALLOW)
        for name in ("a", "b")
    ]  # fmt: skip
    futures = admin.create_acls(bindings)
    assert len(futures) == 2
    for future in futures.values():
        with pytest.raises(KafkaException) as raised:
            future.result(timeout=30)
        assert raised.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
