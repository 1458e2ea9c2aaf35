"""sparklog's log engine: partition logs of Arrow segment objects on object storage.

Usable on its own (embedded, brokerless), the way Delta Lake or pyiceberg are::

    from sparklog.storage import open_root
    root = open_root("/tmp/sparklog")
    root.create_topic("events", partitions=3)
    topic = root.topic("events")
    topic.append(0, make_batch([b"hello"]))
    topic.partition(0).read(0)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sparklog.lazy_exports import lazy_exports

# Public names and the module that defines each, imported on first use (PEP 562, as
# ``sparklog`` does): the catalog (open_root, LogRoot) loads no pyarrow, numpy or fsspec, so a
# metadata command on a local root never pays for the record model and the logs.
_EXPORTS: dict[str, str] = {
    "RECORD_SCHEMA": "sparklog.storage.records",
    "AppendResult": "sparklog.storage.log",
    "LogRoot": "sparklog.storage.catalog",
    "ObjectStore": "sparklog.storage.objectstore",
    "PartitionLog": "sparklog.storage.log",
    "ProducerBatch": "sparklog.storage.log",
    "Segment": "sparklog.storage.segments",
    "Topic": "sparklog.storage.topics",
    "TopicInfo": "sparklog.storage.topic_info",
    "make_batch": "sparklog.storage.records",
    "open_root": "sparklog.storage.catalog",
    "record_schema": "sparklog.storage.records",
    "validate_topic_name": "sparklog.storage.catalog",
}

if TYPE_CHECKING:
    from sparklog.storage.catalog import LogRoot, open_root, validate_topic_name
    from sparklog.storage.log import AppendResult, PartitionLog, ProducerBatch
    from sparklog.storage.objectstore import ObjectStore
    from sparklog.storage.records import RECORD_SCHEMA, make_batch, record_schema
    from sparklog.storage.segments import Segment
    from sparklog.storage.topic_info import TopicInfo
    from sparklog.storage.topics import Topic


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())

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
