"""Mirroring from a Kafka-protocol cluster (a sparklog broker's Kafka listener, or Kafka).

Records are fetched with confluent-kafka (librdkafka; ``pip install
'sparklog[mirror]'``) from the destination's end of each partition and written
with their offsets: one object per partition and step, its segment carrying an
``offset`` column (as compaction's objects do), so holes in the source's offsets
(compaction, transaction markers) stay holes and every offset is the source's.
A source whose log start is past the destination's end (retention) is committed
with the range recorded as a gap.  The position is the destination's end,
committed with the data: restarts neither skip nor repeat.  A topic's copy is
committed in one call for all its shards, as the root copier's
(:func:`sparklog.mirror.copier.commit_copy`): the shards a destination broker's
journal leases are handed to it, one journal commit, and its lease stays.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from sparklog.errors import InvalidConfigurationError, SparklogError, UnknownTopicOrPartitionError
from sparklog.mirror.copier import (
    PartitionLag,
    StepReport,
    commit_copy,
    mirrored_topics,
    sync_group,
    write_with_offsets,
)
from sparklog.mirror.links import MirrorLink

if TYPE_CHECKING:
    from sparklog.storage import LogRoot, Segment, Topic, TopicInfo

#: A step fetches at most this many records per topic (all its shards, committed in one call).
STEP_MAX_RECORDS = 50_000
#: The source topic configs a mirror topic follows (where sparklog knows them).
FOLLOWED_CONFIGS = ("cleanup.policy", "retention.ms", "message.timestamp.type", "max.message.bytes")
POLL_TIMEOUT_S = 1.0


def _zero(topic_id: Any) -> bool:
    """Kafka's null topic id (a source without ids answers it)."""
    return str(topic_id) in ("AAAAAAAAAAAAAAAAAAAAAA", "00000000-0000-0000-0000-000000000000")


class KafkaSourceError(SparklogError, code="MIRROR_SOURCE"):
    """The Kafka-protocol source refused a fetch; the position is kept, the step retried."""


def _kafka() -> Any:
    try:
        import confluent_kafka
    except ImportError:  # pragma: no cover - an installation without the extra
        raise InvalidConfigurationError(
            "a kafka:// mirror source needs confluent-kafka: pip install 'sparklog[mirror]'"
        ) from None
    return confluent_kafka


class KafkaMirror:
    """One link's copier from a Kafka-protocol cluster into the destination root."""

    def __init__(self, dest: LogRoot, link: MirrorLink) -> None:
        kafka = _kafka()
        from confluent_kafka.admin import AdminClient

        self.dest = dest
        self.link = link
        #: mirror topic -> why it no longer follows its source (found by :meth:`lag`)
        self.stopped: dict[str, str] = {}
        common = {"bootstrap.servers": link.bootstrap_servers, **link.source_options}
        self.admin = AdminClient(common)
        self.consumer = kafka.Consumer(
            {
                **common,
                "group.id": f"sparklog-mirror-{link.name}",  # never commits: offsets are ours
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "isolation.level": "read_committed",
                "enable.partition.eof": True,
                # below the source's log start (its retention): from its log start, and the
                # offsets skipped are committed as a gap
                "auto.offset.reset": "earliest",
            }
        )

    def close(self) -> None:
        self.consumer.close()

    def source_topics(self) -> dict[str, int]:
        """Selected source topics and their partition counts."""
        metadata = self.admin.list_topics(timeout=10)
        return {
            name: len(t.partitions)
            for name, t in metadata.topics.items()
            if self.link.selects_topic(name) and t.error is None
        }

    def topic_ids(self, names: Iterable[str]) -> dict[str, str | None]:
        """Each source topic's id (Metadata v10+ / DescribeTopicPartitions): a topic deleted
        and re-created has a new one.  "" from a source without ids, None for a topic gone."""
        from confluent_kafka import TopicCollection

        wanted = sorted(names)
        if not wanted:
            return {}
        out: dict[str, str | None] = {}
        for name, future in self.admin.describe_topics(TopicCollection(wanted)).items():
            try:
                found = future.result(timeout=10)
            except Exception:  # gone since it was listed: no copy this step
                out[name] = None
                continue
            topic_id = found.topic_id
            out[name] = "" if topic_id is None or _zero(topic_id) else str(topic_id)
        return out

    def reincarnated(self, info: TopicInfo, source_id: str | None) -> str:
        """Why mirror topic ``info`` no longer follows its source (deleted and re-created:
        another topic id), or "" if it does."""
        mirrored = (info.mirror or {}).get("source_topic_id", "")
        if not mirrored or not source_id or mirrored == source_id:
            return ""
        source = (info.mirror or {}).get("source_topic", info.name)
        return (
            f"source topic {source!r} was deleted and re-created (topic id {source_id}, "
            f"mirrored id {mirrored}): mirroring of {info.name!r} stopped, its records and "
            "offsets kept as they were; delete it (or promote it) to mirror the new topic"
        )

    def _configs(self, topic: str) -> dict[str, Any]:
        from confluent_kafka.admin import ConfigResource

        resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
        try:
            found = self.admin.describe_configs([resource])[resource].result(timeout=10)
        except Exception:  # a source that does not answer DescribeConfigs: defaults
            return {}
        out: dict[str, Any] = {}
        for key in FOLLOWED_CONFIGS:
            entry = found.get(key)
            if entry is None or entry.value is None or entry.is_default:
                continue
            value: Any = entry.value
            out[key] = int(value) if key.endswith((".ms", ".bytes")) else value
        return out

    def _ensure_topic(
        self, name: str, partitions: int, source_id: str | None, report: StepReport
    ) -> Topic | None:
        dest_name = self.link.mirror_name(name)
        if source_id is None:
            return None  # deleted since it was listed: the next step sees what follows
        config = self._configs(name)
        try:
            info = self.dest.describe_topic(dest_name)
        except UnknownTopicOrPartitionError:
            info = self.dest.create_topic(
                dest_name,
                partitions=partitions,
                config=config,
                mirror={
                    "link": self.link.name,
                    "source": self.link.source,
                    "source_topic": name,
                    "source_topic_id": source_id,
                    "state": "mirroring",
                },
            )
            report.topics_created.append(dest_name)
        mirror = info.mirror or {}
        if mirror.get("link") != self.link.name:
            report.skipped[dest_name] = f"not a mirror topic of link {self.link.name!r}"
            return None
        if mirror.get("state") == "promoted":
            return None
        why = self.reincarnated(info, source_id)
        if why:
            report.skipped[dest_name] = why
            return None
        if source_id and not mirror.get("source_topic_id"):  # mirrored before ids: adopt
            info = self.dest.set_mirror(dest_name, {**mirror, "source_topic_id": source_id})
        if partitions > info.partitions:
            self.dest.add_partitions(dest_name, partitions)
        have = {k: v for k, v in info.config.items() if k in FOLLOWED_CONFIGS}
        if config != have:
            self.dest.alter_topic_config(
                dest_name, config, remove=[k for k in have if k not in config]
            )
        return self.dest.topic(dest_name)

    def step(self, *, groups: bool = True) -> StepReport:
        report = StepReport()
        topics = self.source_topics()
        ids = self.topic_ids(topics)
        for name, partitions in sorted(topics.items()):
            dst = self._ensure_topic(name, partitions, ids.get(name), report)
            if dst is None:
                continue
            self._copy_topic(name, dst, ids[name], report)
        if groups and self.link.groups:
            report.groups_synced = self.sync_groups()
        return report

    def lag(self) -> list[PartitionLag]:
        """Per partition lag (``mirror describe``): the source's end from ListOffsets, the
        age of the first record not yet mirrored from one fetch of it."""
        from confluent_kafka import TopicPartition

        mirrored = mirrored_topics(self.dest, self.link, self.source_topics())
        ids = self.topic_ids(mirrored)
        out: list[PartitionLag] = []
        self.stopped = {}
        for source, dst in sorted(mirrored.items()):
            why = self.reincarnated(dst.info, ids.get(source))
            if why:  # the source's watermarks are another topic's: no lag to show
                self.stopped[dst.name] = why
                continue
            for p in range(dst.partitions):
                tp = TopicPartition(source, p)
                _low, high = self.consumer.get_watermark_offsets(tp, timeout=10, cached=False)
                end = dst.partition(p).refresh().high_watermark
                lag_s = 0.0
                if high > end:
                    self.consumer.assign([TopicPartition(source, p, end)])
                    for msg in self.consumer.consume(num_messages=1, timeout=5):
                        if msg.error() is None:
                            lag_s = max(0.0, time.time() - msg.timestamp()[1] / 1000)
                    self.consumer.unassign()
                gaps = dst.partition(p).state.mirror_gaps
                out.append(PartitionLag(dst.name, p, high, end, lag_s, gaps))
        return out

    def sync_groups(self) -> int:
        """Copy the selected groups' committed offsets (ListGroups, OffsetFetch at the
        source) as :func:`sparklog.mirror.copier.sync_group` does."""
        from confluent_kafka import ConsumerGroupTopicPartitions

        listed = self.admin.list_consumer_groups().result(timeout=10)
        groups = sorted(g.group_id for g in listed.valid if self.link.selects_group(g.group_id))
        if not groups:
            return 0
        mirrored = mirrored_topics(self.dest, self.link, self.source_topics())
        changed = 0
        for group in groups:
            futures = self.admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])
            found = futures[group].result(timeout=10)
            committed = {
                (tp.topic, tp.partition): tp.offset
                for tp in found.topic_partitions or []
                if tp.error is None
            }
            changed += sync_group(self.dest, self.link, group, committed, mirrored)
        return changed

    def _copy_topic(
        self, source: str, dst: Topic, source_id: str | None, report: StepReport
    ) -> None:
        """Fetch what the source has past each destination partition's end (every shard
        of the topic at once, :data:`STEP_MAX_RECORDS` at most), write it as objects that
        keep the source's offsets, and commit them all in one call (:func:`commit_copy`:
        one journal commit of the leader for the shards it leases, as the root copier)."""
        import pyarrow as pa
        from confluent_kafka import TopicPartition

        ends: dict[int, int] = {}
        highs: dict[int, int] = {}
        for shard in range(dst.shards):
            state = dst.shard(shard).refresh()
            for p in range(shard, dst.partitions, dst.shards):
                end = state.parts[p].high_watermark if p in state.parts else 0
                _low, high = self.consumer.get_watermark_offsets(
                    TopicPartition(source, p), timeout=10, cached=False
                )
                report.lag.append(PartitionLag(dst.name, p, high, end, 0.0))
                if high > end:
                    ends[p], highs[p] = end, high
        if not ends:
            return
        self.consumer.assign([TopicPartition(source, p, max(ends[p], 0)) for p in sorted(ends)])
        rows: dict[int, list[Any]] = {p: [] for p in ends}
        done: set[int] = set()
        fetched = 0
        deadline = time.monotonic() + 30
        while len(done) < len(ends) and fetched < STEP_MAX_RECORDS and time.monotonic() < deadline:
            batch = self.consumer.consume(num_messages=10_000, timeout=POLL_TIMEOUT_S)
            if not batch:
                continue
            for msg in batch:
                p = msg.partition()
                if msg.error() is not None:
                    if msg.error().code() == -191:  # _PARTITION_EOF
                        done.add(p)
                        continue
                    raise KafkaSourceError(
                        f"mirror link {self.link.name!r}: fetching {source}-{p} from "
                        f"{self.link.bootstrap_servers}: {msg.error()}"
                    )
                rows[p].append(msg)
                fetched += 1
                if msg.offset() + 1 >= highs[p]:
                    done.add(p)
        self.consumer.unassign()
        planned: dict[int, list[Segment]] = {}
        schema = dst.info.record_schema
        for p, msgs in rows.items():
            if not msgs:
                continue
            table = pa.table(
                {
                    "offset": pa.array([m.offset() for m in msgs], pa.int64()),
                    "key": pa.array([m.key() for m in msgs], pa.binary()),
                    "value": pa.array([m.value() for m in msgs], pa.binary()),
                    "timestamp": pa.array([m.timestamp()[1] for m in msgs], pa.int64()).cast(
                        schema.field("timestamp").type
                    ),
                    "headers": pa.array(
                        # Kafka has no null header list: none is sparklog's null
                        [
                            [{"key": k, "value": v} for k, v in (m.headers() or [])] or None
                            for m in msgs
                        ],
                        schema.field("headers").type,
                    ),
                }
            )
            seg = write_with_offsets(dst, p, table)
            last = msgs[-1].offset() + 1
            first = msgs[0].offset()
            planned[p] = [replace(seg, base_offset=first, offset_span=last - first)]
        if not planned:
            return
        if self.topic_ids([source]).get(source) != source_id:
            # re-created while it was fetched: what was read may be the new topic's; nothing
            # is committed (the objects written are garbage) and the next step says why
            return
        commit_copy(
            self.dest,
            dst,
            planned,
            link=self.link,
            expected={p: ends[p] for p in planned},
            report=report,
        )
