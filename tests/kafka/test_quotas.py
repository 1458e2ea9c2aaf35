"""Client quotas: AlterClientQuotas/DescribeClientQuotas, ``sparklog quotas``, and throttling.

Throttling is asserted through the ``throttle_time_ms`` the broker reports and
the bytes it accepted, never through wall-clock: Kafka's throttle time for
``B`` bytes against a quota ``Q`` over a window of at least one second is at
most ``(B - Q) / Q`` seconds.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from kio.index import load_response_schema
from kio.schema.alter_client_quotas.v1.request import (
    AlterClientQuotasRequest,
    EntityData,
    EntryData,
    OpData,
)
from kio.schema.describe_client_quotas.v1.request import (
    ComponentData,
    DescribeClientQuotasRequest,
)
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader

from tests.kafka.test_security import sparklog_cli
from tests.kafka.test_wire import produce_request
from tests.kafka.wire import Connection, record_batch_bytes
from tests.support.brokers import Cluster

QUOTA_BYTES_PER_S = 100_000


def _call_as(conn: Connection, request: Any, client_id: str) -> Any:
    conn.send_frame(conn.encode(request, client_id=client_id))
    frame = conn.read_frame()
    assert frame is not None
    cls = load_response_schema(request.__api_key__, request.__version__)
    _header, offset = entity_reader(cls.__header_schema__)(frame, 0)
    return entity_reader(cls)(frame, offset)[0]


def _throttle_ms(response: Any) -> int:
    return int(response.throttle_time / timedelta(milliseconds=1))


def test_produce_is_throttled_past_the_client_ids_quota(one_broker: Cluster) -> None:
    from tests.kafka.test_roundtrip import create_topic

    create_topic(one_broker.kafka_bootstrap, "metered", 1)
    conn = Connection(one_broker.brokers[0].kafka_address)
    altered = conn.call(
        AlterClientQuotasRequest(
            entries=(
                EntryData(
                    entity=(EntityData(entity_type="client-id", entity_name="limited"),),
                    ops=(OpData(key="producer_byte_rate", value=QUOTA_BYTES_PER_S, remove=False),),
                ),
            ),
            validate_only=False,
        )
    )
    assert altered.entries[0].error_code == ErrorCode.none
    described = conn.call(
        DescribeClientQuotasRequest(
            components=(ComponentData(entity_type="client-id", match_type=0, match="limited"),),
            strict=False,
        )
    )
    assert [(v.key, v.value) for v in described.entries[0].values] == [
        ("producer_byte_rate", QUOTA_BYTES_PER_S)
    ]
    batch = record_batch_bytes([b"x" * 49_000])
    first = _call_as(conn, produce_request("metered", batch), "limited")
    assert _throttle_ms(first) == 0  # within the quota
    sent = len(batch)
    throttled = 0
    for _ in range(40):
        response = _call_as(conn, produce_request("metered", batch), "limited")
        assert response.responses[0].partition_responses[0].error_code == ErrorCode.none
        sent += len(batch)
        throttled = _throttle_ms(response)
        if throttled:
            break
    assert throttled > 0
    assert throttled <= (sent - QUOTA_BYTES_PER_S) / QUOTA_BYTES_PER_S * 1000
    # another client id has no quota: never throttled
    for _ in range(5):
        assert _throttle_ms(_call_as(conn, produce_request("metered", batch), "free")) == 0
    conn.close()
    listed = sparklog_cli("-a", one_broker.root, "-o", "json", "quotas", "describe")
    assert json.loads(listed.stdout) == [
        {"entity": {"client-id": "limited"}, "quotas": {"producer_byte_rate": 100000.0}}
    ]


def test_quotas_cli_on_a_root(tmp_path) -> None:
    root = f"file://{tmp_path}/root"
    made = sparklog_cli(
        "-a", root, "quotas", "alter", "--user", "alice",
        "--add-config", "producer_byte_rate=1048576,request_percentage=50",
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    made = sparklog_cli(
        "-a", root, "quotas", "alter", "--user", "alice", "--delete-config", "request_percentage"
    )
    assert made.returncode == 0, made.stderr
    bad = sparklog_cli("-a", root, "quotas", "alter", "--user", "a", "--add-config", "speed=1")
    assert bad.returncode != 0 and "producer_byte_rate" in bad.stderr
    listed = sparklog_cli("-a", root, "-o", "json", "quotas", "describe", "--user", "alice")
    assert json.loads(listed.stdout) == [
        {"entity": {"user": "alice"}, "quotas": {"producer_byte_rate": 1048576.0}}
    ]
