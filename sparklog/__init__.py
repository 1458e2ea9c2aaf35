"""sparklog: Kafka's model (topics, partitions, offsets, producers, groups) on object storage.

One address, two modes: a storage root URL (``/tmp/sl``, ``file://``, ``s3://``,
``memory://``) for embedded use with no server, or ``sparklog://host:port`` for
brokers::

    import sparklog
    with sparklog.Producer("/tmp/sl") as producer:
        producer.send("events", b"hello", key=b"user-1")
    consumer = sparklog.Consumer("/tmp/sl", group_id="g", auto_offset_reset="earliest")
    consumer.subscribe(["events"])
    records = consumer.poll(timeout_ms=1000)
"""

from sparklog.admin import Admin, OffsetReset
from sparklog.consumer import Consumer
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
from sparklog.producer import FutureBatchMetadata, FutureRecordMetadata, Producer
from sparklog.types import (
    BatchMetadata,
    ConsumerRecord,
    GroupDescription,
    OffsetAndMetadata,
    PartitionDescription,
    PartitionLag,
    RecordMetadata,
    TopicDescription,
    TopicPartition,
)

__all__ = [
    "Admin",
    "BatchMetadata",
    "CommitFailedError",
    "ConfigError",
    "Consumer",
    "ConsumerRecord",
    "FencedError",
    "FutureBatchMetadata",
    "FutureRecordMetadata",
    "GroupDescription",
    "GroupError",
    "InvalidRecordError",
    "KafkaTimeoutError",
    "OffsetAndMetadata",
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
