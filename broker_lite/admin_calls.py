"""The broker's metadata and admin calls: answered from the metadata log's image.

Metadata, DescribeCluster and topic listings come from memory (no storage
request); topic changes are appends to the cluster metadata log.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from sparklog import errors
from sparklog.broker_lite import topic_caps
from sparklog.broker_lite.broker_state import BrokerState
from sparklog.broker_lite.cluster import BrokerInfo
from sparklog.broker_lite.logs import fields
from sparklog.broker_lite.partition_state import PartitionState, storage_call
from sparklog.errors import InvalidRequestError
from sparklog.storage.config import TOPIC_CONFIG_KEYS
from sparklog.storage.maintenance import delete_records
from sparklog.storage.topic_info import TopicInfo, value_type_from_text, value_type_to_text

log = logging.getLogger("sparklog.broker_lite.broker")

#: shards per registered broker of a topic created without ``commit.shards`` by a broker
#: journalling its records (format 3: a shard costs a fold per ``fold_interval_ms``, not a
#: commit per flush; issue 36 item 3: a dead broker's shards spread over the survivors,
#: a joining broker takes a share of every topic)
SHARDS_PER_BROKER = 4


class AdminCalls:
    """Metadata from memory; topic creation, changes and deletion; DeleteRecords."""

    def __init__(self, state: BrokerState) -> None:
        self.state = state

    def describe_cluster(self) -> dict[str, Any]:
        assert self.state.cluster is not None
        return {
            "broker_id": self.state.config.broker_id,
            "brokers": [
                {
                    "broker_id": b.broker_id,
                    "location": b.location,
                    "renewed_ms": b.renewed_ms,
                    "kafka_address": b.kafka_address,
                }
                for b in sorted(self.state.cluster.live().values(), key=lambda b: b.broker_id)
            ],
        }

    def metadata(
        self, topics: Sequence[str] | None = None, *, sizes: bool = False
    ) -> dict[str, Any]:
        """Topics, partitions, leaders with locations, watermarks, configs: from memory.

        Topics come from the cluster metadata log's image, leaders from the live
        set; no storage request is made, so the answer costs O(partitions) CPU and
        survives a storage outage.  Watermarks are those this broker holds (the
        partitions it leads, as of its last commit or refresh); -1 where it holds
        none (the partition's leader knows: ``list_offsets``).  ``sizes`` (an
        explicit describe, never a client's routing) reads every partition's
        watermarks and stored bytes from the root instead.
        """
        assert self.state.cluster is not None
        names = list(topics) if topics is not None else self.state.root.list_topics()
        out: dict[str, Any] = {}
        damaged: dict[str, str] = {}
        held: dict[tuple[str, str], dict[int, PartitionState]] = {}
        with self.state.lock:
            for key, st in self.state.partitions.items():
                held.setdefault((key[0], key[1]), {})[key[2]] = st
        for name in names:
            if not isinstance(name, str):
                raise InvalidRequestError(f"topic name {name!r} is not a string")
            try:
                info = self.state.root.describe_topic(name)
            except errors.CorruptRecordError as exc:
                if topics is not None:
                    raise  # asked for by name: the caller learns why it cannot have it
                damaged[name] = str(exc)[:500]  # listing all topics: one bad one hides no other
                continue
            out[name] = {
                "name": name,
                "topic_id": info.topic_id,
                "partitions": self._partitions_metadata(
                    info, held.get((name, info.topic_id), {}), sizes
                ),
                "config": info.config,
                "replication_factor": info.replication_factor,
                "value_schema": (
                    value_type_to_text(info.value_type) if info.value_type is not None else None
                ),
            }
        return {**self.describe_cluster(), "topics": out, "damaged_topics": damaged}

    def _partitions_metadata(
        self, info: TopicInfo, held: Mapping[int, PartitionState], sizes: bool
    ) -> list[dict[str, Any]]:
        assert self.state.cluster is not None
        leaders: dict[int, BrokerInfo | None] = {}
        replicas: dict[int, list[int]] = {}  # per shard: the same for its partitions
        shards = info.shards
        out = []
        for p in range(info.partitions):
            shard = p % shards
            if shard not in leaders:
                leaders[shard] = self.state.cluster.shard_leader(info.name, shard)
                replicas[shard] = self.state.cluster.shard_replicas(
                    info.name, shard, info.replication_factor
                )
            leader = leaders[shard]
            if self.state.config.force_leader:
                leader_id, location = self.state.config.broker_id, self.state.cluster.location
            else:
                leader_id = leader.broker_id if leader else -1
                location = leader.location if leader else ""
            entry = {
                "partition": p,
                "leader_id": leader_id,
                "leader_location": location,
                "replicas": list(replicas[shard]),
            }
            st = held.get(p)
            if sizes:
                entry.update(self._stored_sizes(info.name, p))
            else:
                hwm, lso = (-1, -1) if st is None else st.log.watermarks_in_memory()
                entry.update(log_start_offset=lso, high_watermark=hwm)
            out.append(entry)
        return out

    def _stored_sizes(self, name: str, partition: int) -> dict[str, int]:
        """A partition's watermarks and stored bytes, read from the root if not fresh."""
        st = self.state.partition_state(self.state.topic(name), partition)
        with st.lock:
            storage_call(lambda: st.refresh(self.state.config.fetch_refresh_ms / 1000))
            return {
                "log_start_offset": st.log.log_start_offset,
                "high_watermark": st.log.high_watermark,
                "size_bytes": sum(s.size_bytes for s in st.log.segments()),
            }

    def led_partition_sizes(self, topics: Sequence[str] | None = None) -> dict[str, dict[int, int]]:
        """Stored bytes of each partition this broker leads (of ``topics``; None: all), from
        the segment index the leader holds in memory (loaded once if it never was): topic ->
        partition -> bytes.  Kafka's DescribeLogDirs answers the same per broker."""
        wanted = None if topics is None else set(topics)
        out: dict[str, dict[int, int]] = {}
        for name, partition in sorted(set(self.state.led)):
            if wanted is not None and name not in wanted:
                continue
            try:
                st = self.state.partition_state(self.state.topic(name), partition)
                with st.lock:
                    segments = storage_call(st.log.segments)
            except errors.SparklogError:
                continue  # deleted or damaged since leadership was computed
            out.setdefault(name, {})[partition] = sum(s.size_bytes for s in segments)
        return out

    def create_topic(
        self,
        name: str,
        partitions: int,
        config: Mapping[str, Any] | None = None,
        value_schema: str | None = None,
        replication_factor: int = 1,
        created_by: str | None = None,
    ) -> dict[str, Any]:
        """Create a topic; ``replication_factor`` is accepted from 1 to the live brokers (or
        -1, the default), stored and reported back: the object store keeps the data.
        ``created_by``: the principal asking, whose per-principal caps apply."""
        assert self.state.cluster is not None
        value_type = _schema_from_text(value_schema) if value_schema else None
        _log_unknown_keys(name, config)
        live = len(self.state.cluster.live())
        info = storage_call(
            lambda: self.state.root.create_topic(
                name,
                partitions,
                config,
                value_type,
                replication_factor=replication_factor,
                live_brokers=max(1, live),
                created_by=created_by,
                # the caps are checked in the commit, so racing creates cannot pass them
                admit=topic_caps.on_create(self.state.config, created_by, partitions),
                shards_per_broker=SHARDS_PER_BROKER if self.state.config.journal_records else 1,
            )
        )
        self.state.forget_topic(name)
        return {
            "name": info.name,
            "topic_id": info.topic_id,
            "partitions": info.partitions,
            "replication_factor": info.replication_factor,
        }

    def delete_topic(self, name: str) -> None:
        storage_call(lambda: self.state.root.delete_topic(name))
        self.state.forget_topic(name)

    def alter_topic_config(
        self,
        name: str,
        updates: Mapping[str, Any],
        remove: Sequence[str] = (),
        *,
        validate_only: bool = False,
        replace: bool = False,
    ) -> dict[str, Any]:
        """Change a topic's config; ``validate_only`` runs every check and changes nothing;
        ``replace``: the whole set (Kafka's AlterConfigs; the others return to defaults)."""
        _log_unknown_keys(name, {**updates, **dict.fromkeys(remove)})
        info = storage_call(
            lambda: self.state.root.alter_topic_config(
                name, updates, remove, dry_run=validate_only, replace=replace
            )
        )
        if not validate_only:
            self.state.reload_topic(name)
        return dict(info.config)

    def add_partitions(self, name: str, total: int, *, validate_only: bool = False) -> int:
        """Grow ``name`` to ``total`` partitions; they count against its creator's cap.
        ``validate_only`` runs every check and changes nothing."""
        info = storage_call(
            lambda: self.state.root.add_partitions(
                name, total, dry_run=validate_only, admit=topic_caps.on_growth(self.state.config)
            )
        )
        if not validate_only:
            self.state.reload_topic(name)
        return int(info.partitions)

    def delete_records(self, topic_name: str, partition: int, before_offset: int) -> int:
        """Kafka's DeleteRecords on a partition this broker leads: move the log start offset
        up to ``before_offset`` (-1 = the high watermark), removing the segments wholly below
        it (fenced by our leader epoch); return the new log start offset."""
        topic = self.state.topic(topic_name)
        st = self.state.partition_state(topic, partition)
        self.state.check_leader(topic_name, partition)
        with st.lock:
            start = storage_call(
                lambda: delete_records(st.log, before_offset, leader_epoch=st.epoch)
            )
        self.state.cache.drop(st.key)
        return int(start)

    def init_producer_id(self) -> tuple[int, int]:
        """A fresh producer id (random 62-bit, so brokers need not coordinate) and epoch 0."""
        return secrets.randbits(62) | 1, 0


def _log_unknown_keys(topic: str, config: Mapping[str, Any] | None) -> None:
    """A WARNING for each topic config name nobody defines (the request is refused)."""
    for key in config or {}:
        if key not in TOPIC_CONFIG_KEYS:
            log.warning(
                "topic config refused: unknown key", extra=fields(topic=topic, key=str(key))
            )


def _schema_from_text(text: str) -> pa.DataType:
    try:
        return value_type_from_text(text)
    except (ValueError, KeyError, pa.ArrowInvalid, TypeError) as exc:
        raise InvalidRequestError(
            f"value_schema is not accepted ({exc}); accepted: base64 of an Arrow IPC schema "
            "with one struct field named 'value'"
        ) from None
