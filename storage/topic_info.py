"""A topic's metadata at one version (:class:`TopicInfo`) and the text form of value schemas.

Shared by the catalog (:mod:`sparklog.storage.catalog`, which keeps these documents in the
cluster metadata log) and a topic's data handle (:mod:`sparklog.storage.topics`, which reads
them), so that neither imports the other for its types.  Like the catalog, this module loads
no pyarrow: the functions that parse or build value types import it.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sparklog.errors import CorruptRecordError
from sparklog.storage.config import effective_config

if TYPE_CHECKING:
    import pyarrow as pa

#: The storage formats this code reads and writes (docs/architecture.md, "Storage format 2").
STORAGE_FORMAT = 2
KNOWN_FORMATS = (2,)


def schema_to_text(schema: pa.Schema) -> str:
    """An Arrow schema as text: base64 of its IPC form (topic documents, the broker's wire)."""
    return base64.b64encode(schema.serialize().to_pybytes()).decode()


def schema_from_text(text: str) -> pa.Schema:
    """The schema :func:`schema_to_text` wrote."""
    import pyarrow as pa

    return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(text)))


def value_type_to_text(value_type: pa.DataType) -> str:
    """A topic's value type as text: the schema of one field named ``value``."""
    import pyarrow as pa

    return schema_to_text(pa.schema([("value", value_type)]))


def value_type_from_text(text: str) -> pa.DataType:
    """The value type :func:`value_type_to_text` wrote."""
    return schema_from_text(text).field("value").type


def schema_id_of(value_type: pa.DataType) -> str:
    return hashlib.sha256(value_type_to_text(value_type).encode()).hexdigest()[:16]


def _damaged_doc_errors() -> tuple[type[BaseException], ...]:
    """What parsing a damaged topic document raises: Arrow's errors only if Arrow is loaded.

    A document with no value schemas never loads pyarrow, so it cannot raise its errors.
    """
    found: tuple[type[BaseException], ...] = (KeyError, TypeError, ValueError, AttributeError)
    arrow = sys.modules.get("pyarrow")
    return (*found, arrow.ArrowException) if arrow is not None else found


@dataclass(frozen=True)
class TopicInfo:
    """A topic's metadata at one version."""

    name: str
    topic_id: str
    partitions: int
    config: dict[str, Any]
    version: int
    created_ms: int
    value_type: pa.DataType | None = None
    value_schema_id: str = ""
    value_types: dict[str, pa.DataType] = field(default_factory=dict)
    #: a mirror topic's provenance (None: an ordinary topic): ``link``, ``source``
    #: (the source cluster's address), ``source_topic``, ``state`` ("mirroring", or
    #: "promoted": writable, no longer copied) and the link's ``origins`` chain
    mirror: dict[str, Any] | None = None
    #: the replication factor the topic was created with: accepted for Kafka compatibility
    #: and reported back (the data is stored once, on the object store)
    replication_factor: int = 1

    @property
    def mirrored(self) -> bool:
        """True while a mirror link fills the topic: producers are refused."""
        return self.mirror is not None and self.mirror.get("state") != "promoted"

    @functools.cached_property
    def effective_config(self) -> dict[str, Any]:
        """Every topic config key with its value (computed once: the produce path asked
        it per partition, 2 % of a 1,024-partition request's CPU); read it, never edit it."""
        return effective_config(self.config)

    @functools.cached_property
    def shards(self) -> int:
        """How many shard logs the partitions share (``commit.shards``, fixed at creation;
        computed once: the effective config is a dict of every key, and Metadata asked it
        per partition)."""
        return int(self.effective_config["commit.shards"])

    def shard_of(self, partition: int) -> int:
        return partition % self.shards

    @property
    def record_schema(self) -> pa.Schema:
        from sparklog.storage.records import record_schema

        return record_schema(self.value_type)

    def to_doc(self) -> dict[str, Any]:
        return {
            "format": STORAGE_FORMAT,
            "name": self.name,
            "id": self.topic_id,
            "partitions": self.partitions,
            "config": self.config,
            "created_ms": self.created_ms,
            "value_schema_id": self.value_schema_id,
            "value_schemas": {k: value_type_to_text(t) for k, t in self.value_types.items()},
            **({"mirror": self.mirror} if self.mirror is not None else {}),
            **(
                {"replication_factor": self.replication_factor}
                if self.replication_factor != 1
                else {}
            ),
        }

    @classmethod
    def from_doc(cls, version: int, doc: Mapping[str, Any]) -> TopicInfo:
        """The topic described by metadata version ``version``; CorruptRecordError if damaged."""
        try:
            return cls._from_doc(version, doc)
        except _damaged_doc_errors() as exc:
            name = doc.get("name", "?") if isinstance(doc, Mapping) else "?"
            raise CorruptRecordError(
                f"metadata version {version} of topic {str(name)[:100]!r} is damaged "
                f"({type(exc).__name__}: {str(exc)[:200]})"
            ) from None

    @classmethod
    def _from_doc(cls, version: int, doc: Mapping[str, Any]) -> TopicInfo:
        shapes = (("name", str), ("id", str), ("partitions", int), ("config", dict))
        for key, kind in shapes:
            if not isinstance(doc[key], kind) or isinstance(doc[key], bool):
                raise TypeError(f"{key} is a {type(doc[key]).__name__}, not a {kind.__name__}")
        if doc["partitions"] < 1:
            raise ValueError(f"partitions is {doc['partitions']}")
        types = {k: value_type_from_text(v) for k, v in doc.get("value_schemas", {}).items()}
        sid = doc.get("value_schema_id", "")
        return cls(
            name=doc["name"],
            topic_id=doc["id"],
            partitions=doc["partitions"],
            config=dict(doc["config"]),
            version=version,
            created_ms=doc["created_ms"],
            value_type=types.get(sid) if sid else None,
            value_schema_id=sid,
            value_types=types,
            mirror=dict(doc["mirror"]) if isinstance(doc.get("mirror"), Mapping) else None,
            replication_factor=int(doc.get("replication_factor", 1)),
        )
