"""The APIs the Kafka listener implements, with exactly the versions it implements.

ApiVersions advertises this table as is.  Ranges are those the handlers were
written for: kio's versions, and below them the old versions of
:mod:`~sparklog.broker_lite.kafka.legacy` (Kafka 3.9's floors, which kio's Kafka 4
schemas dropped), up to Kafka 3.9's ceilings where the handlers serve them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kio.schema.api_versions.v0.response import ApiVersion as ApiVersionV0
from kio.schema.api_versions.v0.response import ApiVersionsResponse as ApiVersionsResponseV0

from sparklog.broker_lite.kafka import (
    acl_apis,
    admin,
    consumer_group_apis,
    coordinators,
    fetch,
    groups,
    leader_epochs,
    limits,
    log_dirs,
    metadata,
    offsets,
    produce,
    quotas,
    sasl,
    transactions,
)
from sparklog.broker_lite.kafka.context import Handler
from sparklog.broker_lite.kafka.messages import make, nested
from sparklog.errors import UnsupportedVersionError

if TYPE_CHECKING:
    from sparklog.broker_lite.kafka.api_types import ApiVersionsRequest, ApiVersionsResponse
    from sparklog.broker_lite.kafka.context import HandlerContext


@dataclass(frozen=True)
class Api:
    key: int
    name: str
    min_version: int
    max_version: int
    handler: Handler


def api_versions(ctx: HandlerContext, request: ApiVersionsRequest) -> ApiVersionsResponse:
    """ApiVersions: every API in the table with its version range."""
    cls = _response_cls(ctx.api_version)
    entry = nested(cls, "ApiVersion")
    keys = tuple(
        make(entry, api_key=a.key, min_version=a.min_version, max_version=a.max_version)
        for a in API_TABLE.values()
    )
    return make(cls, error_code=0, api_keys=keys, throttle_time=0)


def api_versions_fallback(listener: Any) -> Any:
    """KIP-511: a newer ApiVersions than we know gets v0 with UNSUPPORTED_VERSION + ranges."""
    keys = tuple(
        make(ApiVersionV0, api_key=a.key, min_version=a.min_version, max_version=a.max_version)
        for a in API_TABLE.values()
    )
    return make(ApiVersionsResponseV0, error_code=UnsupportedVersionError.errno, api_keys=keys)


def _response_cls(version: int) -> type:
    from kio.index import load_response_schema

    return load_response_schema(18, version)


_APIS = [
    Api(0, "Produce", 0, 11, limits.bounded_produce(produce.handle_produce)),
    Api(1, "Fetch", 0, 17, fetch.handle_fetch),
    Api(2, "ListOffsets", 0, 9, offsets.handle_list_offsets),
    Api(3, "Metadata", 0, 12, metadata.handle_metadata),
    Api(8, "OffsetCommit", 0, 9, offsets.handle_offset_commit),
    Api(9, "OffsetFetch", 0, 9, offsets.handle_offset_fetch),
    Api(10, "FindCoordinator", 0, 5, coordinators.handle_find_coordinator),
    Api(11, "JoinGroup", 0, 9, groups.handle_join_group),
    Api(12, "Heartbeat", 0, 4, groups.handle_heartbeat),
    Api(13, "LeaveGroup", 0, 5, groups.handle_leave_group),
    Api(14, "SyncGroup", 0, 5, groups.handle_sync_group),
    Api(15, "DescribeGroups", 0, 5, groups.handle_describe_groups),
    Api(16, "ListGroups", 0, 5, groups.handle_list_groups),
    Api(17, "SaslHandshake", 0, 1, sasl.handle_sasl_handshake),
    Api(18, "ApiVersions", 0, 3, api_versions),
    Api(19, "CreateTopics", 0, 7, admin.handle_create_topics),
    Api(20, "DeleteTopics", 0, 6, admin.handle_delete_topics),
    Api(21, "DeleteRecords", 0, 2, admin.handle_delete_records),
    Api(22, "InitProducerId", 0, 5, produce.handle_init_producer_id),
    Api(23, "OffsetForLeaderEpoch", 0, 4, leader_epochs.handle_offset_for_leader_epoch),
    Api(24, "AddPartitionsToTxn", 0, 3, transactions.handle_add_partitions_to_txn),
    Api(25, "AddOffsetsToTxn", 0, 3, transactions.handle_add_offsets_to_txn),
    Api(26, "EndTxn", 0, 3, transactions.handle_end_txn),
    Api(28, "TxnOffsetCommit", 0, 3, transactions.handle_txn_offset_commit),
    Api(29, "DescribeAcls", 0, 3, acl_apis.handle_describe_acls),
    Api(30, "CreateAcls", 1, 3, acl_apis.handle_create_acls),
    Api(31, "DeleteAcls", 1, 3, acl_apis.handle_delete_acls),
    Api(32, "DescribeConfigs", 0, 4, admin.handle_describe_configs),
    Api(33, "AlterConfigs", 0, 2, admin.handle_alter_configs),
    Api(35, "DescribeLogDirs", 1, 4, log_dirs.handle_describe_log_dirs),
    Api(36, "SaslAuthenticate", 0, 2, sasl.handle_sasl_authenticate),
    Api(37, "CreatePartitions", 0, 3, admin.handle_create_partitions),
    Api(42, "DeleteGroups", 0, 2, groups.handle_delete_groups),
    Api(
        44,
        "IncrementalAlterConfigs",
        0,
        1,
        admin.handle_incremental_alter_configs,
    ),
    Api(47, "OffsetDelete", 0, 0, admin.handle_offset_delete),
    Api(48, "DescribeClientQuotas", 0, 1, quotas.handle_describe_client_quotas),
    Api(49, "AlterClientQuotas", 0, 1, quotas.handle_alter_client_quotas),
    Api(
        50,
        "DescribeUserScramCredentials",
        0,
        0,
        sasl.handle_describe_user_scram_credentials,
    ),
    Api(51, "AlterUserScramCredentials", 0, 0, sasl.handle_alter_user_scram_credentials),
    Api(60, "DescribeCluster", 0, 1, metadata.handle_describe_cluster),
    Api(61, "DescribeProducers", 0, 0, transactions.handle_describe_producers),
    Api(65, "DescribeTransactions", 0, 0, transactions.handle_describe_transactions),
    Api(66, "ListTransactions", 0, 1, transactions.handle_list_transactions),
    Api(68, "ConsumerGroupHeartbeat", 0, 1, consumer_group_apis.handle_consumer_group_heartbeat),
    Api(69, "ConsumerGroupDescribe", 0, 1, consumer_group_apis.handle_consumer_group_describe),
]
API_TABLE: dict[int, Api] = {a.key: a for a in _APIS}
