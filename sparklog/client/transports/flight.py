"""Broker mode: a thin adapter of the Flight ``BrokerClient`` to the backend interface.

The client routes every call to the partition's leader and retries NOT_LEADER
and connection failures with a metadata refresh; this adapter only converts
shapes, fans a produce out to the partitions' leaders in parallel, and turns
broker errors into sparklog errors.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import pyarrow as pa

from sparklog.client.transports.base import (
    FetchResult,
    GroupCalls,
    ProduceResult,
    ProducerIdentity,
    TopicCalls,
    TopicLayout,
    TopicPartition,
)
from sparklog.client.transports.flight_client import BrokerClient, TopicMetadata
from sparklog.client.types import OffsetAndMetadata, PartitionDescription, TopicDescription
from sparklog.protocol import actions
from sparklog.protocol.actions import Action
from sparklog.storage.config import effective_config
from sparklog.storage.records import normalize, record_schema

METADATA_TTL_S = 5.0
R = TypeVar("R")


class BrokerBackend(TopicCalls, GroupCalls):
    """Producer/consumer/admin calls through brokers at ``host:port[,host:port]``."""

    def __init__(
        self, bootstrap: str, *, retry_timeout_ms: int = 30_000, security: Any = None
    ) -> None:
        self.address = f"sparklog://{bootstrap}"
        self.client = BrokerClient(bootstrap, retry_timeout_ms=retry_timeout_ms, security=security)
        self._group_api = self._topic_api = self.client
        self._pool: ThreadPoolExecutor | None = None
        self._meta: dict[str, tuple[TopicMetadata, float]] = {}

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False)
            self._pool = None
        self.client.close()

    def _metadata(self, name: str, *, fresh: bool = False, sizes: bool = False) -> TopicMetadata:
        cached = self._meta.get(name)
        if cached is None or fresh or time.monotonic() - cached[1] > METADATA_TTL_S:
            found = self.client.metadata([name], sizes=sizes)
            if name not in found:
                from sparklog.errors import UnknownTopicOrPartitionError

                raise UnknownTopicOrPartitionError(f"unknown topic {name!r}")
            cached = (found[name], time.monotonic())
            self._meta[name] = cached
        return cached[0]

    # -- topics ------------------------------------------------------------------
    def list_topics(self) -> list[str]:
        return self.client.call(actions.LIST_TOPICS)

    def describe_topic(self, name: str, *, sizes: bool = False) -> TopicDescription:
        # an explicit describe: the broker reads every partition's watermarks from the root
        meta = self._metadata(name, fresh=True, sizes=True)
        parts = [
            PartitionDescription(
                p.partition,
                f"{p.leader_id}@{p.leader_location}" if p.leader_location else None,
                p.log_start_offset,
                p.high_watermark,
                p.size_bytes if sizes else None,
            )
            for p in meta.partitions
        ]
        # metadata carries the topic's own settings; show every key with its default too
        return TopicDescription(
            name,
            meta.topic_id,
            parts,
            effective_config(meta.config),
            meta.value_type,
            meta.replication_factor,
        )

    def topic_layout(self, name: str) -> TopicLayout:
        meta = self._metadata(name, fresh=True)
        return TopicLayout.of(len(meta.partitions), effective_config(meta.config))

    def _forget_topic(self, name: str) -> None:
        self._meta.pop(name, None)

    # -- records -----------------------------------------------------------------
    def init_producer_id(self) -> tuple[int, int]:
        return self.client.call(actions.INIT_PRODUCER_ID)

    def produce(
        self,
        topic: str,
        parts: Mapping[int, Sequence[pa.RecordBatch | pa.Table]],
        *,
        acks: str = "all",
        producer: ProducerIdentity | None = None,
        compression: str | None = None,
    ) -> dict[int, ProduceResult]:
        schema = record_schema(self._metadata(topic).value_type)

        def one(p: int) -> tuple[int, ProduceResult]:
            batches = [b for piece in parts[p] for b in normalize(piece, schema)]
            table = pa.Table.from_batches(batches, schema=schema)
            result = self.client.produce(
                topic,
                p,
                table,
                acks=acks,
                producer_id=producer.producer_id if producer else None,
                producer_epoch=producer.producer_epoch if producer else None,
                base_sequence=producer.sequences[p] if producer else None,
                compression=compression,
            )
            return p, result

        todo = list(parts)
        if len(todo) <= 1:
            return dict(one(p) for p in todo)
        if self._pool is None:
            self._pool = ThreadPoolExecutor(8, thread_name_prefix="sparklog-produce")
        return dict(self._pool.map(one, todo))

    def fetch(
        self,
        topic: str,
        partition: int,
        offset: int,
        *,
        max_bytes: int,
        max_wait_ms: int,
        isolation_level: str = "read_uncommitted",
    ) -> FetchResult:
        r = self.client.fetch(
            topic,
            partition,
            offset,
            max_bytes=max_bytes,
            max_wait_ms=max_wait_ms,
            isolation_level=isolation_level,
        )
        return r

    def list_offsets(self, topic: str, partition: int, spec: str | int) -> int:
        return self.client.call(actions.LIST_OFFSETS, topic=topic, partition=partition, spec=spec)

    def delete_records(self, topic: str, partition: int, before_offset: int) -> int:
        return self.client.call(
            actions.DELETE_RECORDS, topic=topic, partition=partition, offset=before_offset
        )

    # -- any other action of the table: the brokers serve it ---------------------------
    def call(self, action: Action[R], /, **body: Any) -> R:
        return self.client.call(action, **body)

    # -- groups (coordinated by the brokers) ----------------------------------------
    def fetch_offsets(self, group: str) -> dict[TopicPartition, OffsetAndMetadata]:
        found = self.client.call(actions.FETCH_OFFSETS, group=group)
        return {tp: OffsetAndMetadata(o, m) for tp, (o, m) in found.items()}
