"""A user's quota is shared by all its client ids, as Kafka resolves quota entities (#38.5).

Kafka meters a quota set on a user alone under ``(user, "")``: bob cannot
multiply his ``producer_byte_rate`` by opening connections with new client ids.
Over the real listener as bob: client id ``app-a`` sends 1.5x the quota (acks=0,
so its own answer is not delayed), then ``app-b`` sends half of it. Alone,
``app-b`` is within the quota; sharing bob's meter, its answer is throttled,
by at most Kafka's ``(sent - quota) / quota`` seconds (never a wall clock).
"""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Iterator

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.alter_client_quotas.v1.request import (
    AlterClientQuotasRequest,
    EntityData,
    EntryData,
    OpData,
)
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.static.primitive import f64, i16

from sparklog.security import users
from sparklog.storage.catalog import open_root
from tests.kafka.test_quotas import _call_as, _throttle_ms
from tests.kafka.test_security import _plain_login
from tests.kafka.test_wire import produce_request
from tests.kafka.wire import record_batch_bytes
from tests.support.brokers import Cluster

QUOTA = 100_000


@pytest.fixture
def cluster(tmp_path: pathlib.Path) -> Iterator[Cluster]:
    root = f"file://{tmp_path}/root"
    users.create(open_root(root, create=True).metadata, "bob", "SCRAM-SHA-256", "bob-pw")
    cluster = Cluster(tmp_path, root)
    cluster.start(0, kafka_security_protocol="SASL_PLAINTEXT")
    admin = AdminClient(
        {"bootstrap.servers": cluster.kafka_bootstrap, "security.protocol": "SASL_PLAINTEXT",
         "sasl.mechanism": "PLAIN", "sasl.username": "bob", "sasl.password": "bob-pw"}
    )  # fmt: skip
    admin.create_topics([NewTopic("metered", 1, 1)])["metered"].result(timeout=30)
    yield cluster
    cluster.stop_all()


def test_a_users_quota_is_shared_by_its_client_ids(cluster: Cluster) -> None:
    address = cluster.brokers[0].kafka_address
    a, b = _plain_login(address, "bob", "bob-pw"), _plain_login(address, "bob", "bob-pw")
    entry = EntryData(
        entity=(EntityData(entity_type="user", entity_name="bob"),),
        ops=(OpData(key="producer_byte_rate", value=f64(float(QUOTA)), remove=False),),
    )
    altered = a.call(AlterClientQuotasRequest(entries=(entry,), validate_only=False))
    assert altered.entries[0].error_code == 0
    big, small = record_batch_bytes([b"a" * 150_000]), record_batch_bytes([b"b" * 50_000])
    # app-a: 1.5x the quota without waiting for an answer (acks=0), then a request whose
    # answer says the produce was handled (a connection's answers leave in order)
    a.send_frame(
        a.encode(dataclasses.replace(produce_request("metered", big), acks=i16(0)), "app-a")
    )
    _call_as(a, ApiVersionsRequest(client_software_name="t", client_software_version="1"), "app-a")
    answer = _call_as(b, produce_request("metered", small), "app-b")
    assert answer.responses[0].partition_responses[0].error_code == 0
    throttled = _throttle_ms(answer)
    assert throttled > 0, "app-b was metered apart from bob's other client id"
    assert throttled <= (len(big) + len(small) - QUOTA) / QUOTA * 1000
    a.close()
    b.close()
