"""sparklog: Kafka's model (topics, partitions, offsets, producers, groups) on object storage.

One address, two modes: a storage root URL (``/tmp/sl``, ``file://``, ``s3://``,
``memory://``) for embedded use with no server, or ``sparklog://host:port`` for
brokers::

    import sparklog
    with sparklog.Producer("/tmp/sl") as producer:
        producer.send("events", b"hello", key=b"user-1")
    consumer = sparklog.Consumer("/tmp/sl", group_id="g", auto_offset_reset="earliest")
    consumer.subscribe(["events"])
    records = consumer.poll_records(timeout_ms=1000)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sparklog.lazy_exports import lazy_exports

# Public names and the module that defines each. They are imported on first use (PEP 562), so
# ``import sparklog`` stays cheap and ``sparklog.storage`` can be imported without the clients.
_EXPORTS: dict[str, str] = {
    "Admin": "sparklog.client.admin",
    "BatchMetadata": "sparklog.client.types",
    "CommitFailedError": "sparklog.errors",
    "ConfigError": "sparklog.errors",
    "ConfigResource": "sparklog.client.types",
    "ConfigResourceType": "sparklog.client.types",
    "Consumer": "sparklog.client.consumer",
    "ConsumerRebalanceListener": "sparklog.client.types",
    "ConsumerRecord": "sparklog.client.types",
    "FencedError": "sparklog.errors",
    "FutureBatchMetadata": "sparklog.client.producer",
    "FutureRecordMetadata": "sparklog.client.producer",
    "GroupDescription": "sparklog.client.types",
    "GroupError": "sparklog.errors",
    "InvalidRecordError": "sparklog.errors",
    "KafkaTimeoutError": "sparklog.errors",
    "NewPartitions": "sparklog.client.types",
    "NewTopic": "sparklog.client.types",
    "OffsetAndMetadata": "sparklog.client.types",
    "OffsetAndTimestamp": "sparklog.client.types",
    "OffsetOutOfRangeError": "sparklog.errors",
    "OffsetReset": "sparklog.client.admin",
    "PartitionDescription": "sparklog.client.types",
    "PartitionLag": "sparklog.client.types",
    "Producer": "sparklog.client.producer",
    "RebalanceInProgressError": "sparklog.errors",
    "RecordMetadata": "sparklog.client.types",
    "SparklogError": "sparklog.errors",
    "TopicDescription": "sparklog.client.types",
    "TopicExistsError": "sparklog.errors",
    "TopicPartition": "sparklog.client.types",
    "UnavailableError": "sparklog.errors",
    "UnknownTopicError": "sparklog.errors",
}

if TYPE_CHECKING:
    from sparklog.client.admin import (
        Admin,
        OffsetReset,
    )
    from sparklog.client.consumer import (
        Consumer,
    )
    from sparklog.client.producer import (
        FutureBatchMetadata,
        FutureRecordMetadata,
        Producer,
    )
    from sparklog.client.types import (
        BatchMetadata,
        ConfigResource,
        ConfigResourceType,
        ConsumerRebalanceListener,
        ConsumerRecord,
        GroupDescription,
        NewPartitions,
        NewTopic,
        OffsetAndMetadata,
        OffsetAndTimestamp,
        PartitionDescription,
        PartitionLag,
        RecordMetadata,
        TopicDescription,
        TopicPartition,
    )
    from sparklog.errors import (
        CommitFailedError,
        ConfigError,
        FencedError,
        GroupError,
        InvalidRecordError,
        KafkaTimeoutError,
        OffsetOutOfRangeError,
        RebalanceInProgressError,
        SparklogError,
        TopicExistsError,
        UnavailableError,
        UnknownTopicError,
    )


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())

__all__ = [
    "Admin",
    "BatchMetadata",
    "CommitFailedError",
    "ConfigError",
    "ConfigResource",
    "ConfigResourceType",
    "Consumer",
    "ConsumerRebalanceListener",
    "ConsumerRecord",
    "FencedError",
    "FutureBatchMetadata",
    "FutureRecordMetadata",
    "GroupDescription",
    "GroupError",
    "InvalidRecordError",
    "KafkaTimeoutError",
    "NewPartitions",
    "NewTopic",
    "OffsetAndMetadata",
    "OffsetAndTimestamp",
    "OffsetOutOfRangeError",
    "OffsetReset",
    "PartitionDescription",
    "PartitionLag",
    "Producer",
    "RebalanceInProgressError",
    "RecordMetadata",
    "SparklogError",
    "TopicDescription",
    "TopicExistsError",
    "TopicPartition",
    "UnavailableError",
    "UnknownTopicError",
]
