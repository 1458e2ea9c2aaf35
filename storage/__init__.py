"""sparklog's log engine: partition logs of Arrow segment objects on object storage.

Usable on its own (embedded, brokerless), the way Delta Lake or pyiceberg are::

    from sparklog.storage import open_root
    root = open_root("/tmp/sparklog")
    root.create_topic("events", partitions=3)
    topic = root.topic("events")
    topic.append(0, make_batch([b"hello"]))
    topic.partition(0).read(0)
"""

from sparklog.storage.log import AppendResult, PartitionLog, ProducerBatch
from sparklog.storage.objectstore import ObjectStore
from sparklog.storage.records import RECORD_SCHEMA, make_batch, record_schema
from sparklog.storage.segments import Segment
from sparklog.storage.topics import LogRoot, Topic, TopicInfo, open_root, validate_topic_name

__all__ = [
    "RECORD_SCHEMA",
    "AppendResult",
    "LogRoot",
    "ObjectStore",
    "PartitionLog",
    "ProducerBatch",
    "Segment",
    "Topic",
    "TopicInfo",
    "make_batch",
    "open_root",
    "record_schema",
    "validate_topic_name",
]
