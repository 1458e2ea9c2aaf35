"""Root-to-root mirroring: segment objects copied without decoding, offsets kept.

One :meth:`Mirror.step` brings every selected topic one step closer to its
source:

1. **Topics follow**: a source topic the link selects gets a mirror topic on
   the destination (same partitions, configs, ``commit.shards`` and value
   schema; provenance in its document, so producers are refused); partitions
   added and configs changed at the source follow.
2. **Data**: per topic, each partition's segments from its high watermark (the
   link's position: offsets are the source's, so the position *is* the
   destination's end) to the source's end are planned; their objects are
   copied under the same object keys (server-side on one S3 endpoint, else
   one read and one write) and verified (every segment's checksum on the bytes
   read; a server-side copy's entity tag against the source's), and the
   segments are committed with their source offsets by one commit per shard
   naming the link (:meth:`Topic.append_mirrored`), or, where a broker's
   journal leases the shards, by one journal commit of that broker for all of
   them (:func:`sparklog.client.handover.commit_mirrored`).  A process
   killed at any point leaves each shard's copy either uncommitted (its objects
   are re-copied, the same bytes at the same keys, or collected as garbage) or
   committed whole: never a duplicate, a hole or a reordering.
3. **Groups** (``--groups``): committed offsets of the selected source groups
   are written to the destination's group logs for mirrored partitions, capped
   at what is mirrored, unless the group has ever joined on the destination.

A source segment that straddles the destination's end (the source merged or
compacted segments after part of them was copied) cannot be copied as an
object: its records from the destination's end on are decoded and written as
a new object carrying their offsets (the only decode on this path).
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from sparklog.client import handover
from sparklog.clock import now_ms
from sparklog.errors import (
    CorruptRecordError,
    InvalidRequestError,
    UnknownTopicOrPartitionError,
)
from sparklog.mirror.links import (
    MirrorLink,
    MirrorLinkExistsError,
    get_link,
)

if TYPE_CHECKING:
    from sparklog.storage import LogRoot, Segment, Topic, TopicInfo

log = logging.getLogger("sparklog.mirror")

#: A step copies at most this many bytes of segments per partition (bounded memory and
#: a bounded amount of work lost to a kill).
STEP_MAX_BYTES = 64 << 20
#: Object keys this process copied (and verified) lately: not copied again for another
#: partition of the same object.
COPIED_KEYS_REMEMBERED = 4096
#: How often (at most) a running link syncs group offsets (MirrorMaker 2 syncs every 60 s).
GROUP_SYNC_INTERVAL_MS = 5_000
#: Objects copied at once (each is one or two requests that mostly wait on the network).
COPY_THREADS = 8


@dataclass
class PartitionLag:
    """How far one mirror partition is behind its source."""

    topic: str
    partition: int
    source_end: int
    mirror_end: int
    lag_seconds: float
    gaps: list[tuple[int, int]] = field(default_factory=list)

    @property
    def lag_records(self) -> int:
        return max(0, self.source_end - self.mirror_end)


@dataclass
class StepReport:
    """What one step did (and what it found)."""

    records: int = 0
    segments: int = 0
    objects_copied: int = 0
    objects_server_side: int = 0
    bytes_copied: int = 0
    topics_created: list[str] = field(default_factory=list)
    groups_synced: int = 0
    skipped: dict[str, str] = field(default_factory=dict)
    lag: list[PartitionLag] = field(default_factory=list)


def provenance(link: MirrorLink, source: TopicInfo) -> dict[str, Any]:
    return {
        "link": link.name,
        "source": link.source,
        "source_topic": source.name,
        "source_topic_id": source.topic_id,
        "state": "mirroring",
    }


def mirror_config(source: TopicInfo) -> dict[str, Any]:
    """The destination's config of a mirror topic: the source's, shards spelled out."""
    return {**source.config, "commit.shards": source.shards}


class Mirror:
    """One link's copier from a sparklog root into the destination root."""

    def __init__(self, dest: LogRoot, link: MirrorLink, source: LogRoot | None = None) -> None:
        from sparklog.storage import open_root

        self.dest = dest
        self.link = link
        self.source = source or open_root(link.source, link.source_options, create=False)
        self._topics: dict[str, tuple[Topic, Topic]] = {}
        self._copied: OrderedDict[str, None] = OrderedDict()
        self._pool: ThreadPoolExecutor | None = None

    def close(self) -> None:
        """Stop the copy threads (the runner replaces a copier when its link changes)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    # -- topics ---------------------------------------------------------------------------
    def source_topics(self) -> list[TopicInfo]:
        """The source topics this link copies: selected, and not themselves mirror topics
        (cycle detection by provenance: a topic is only ever copied from where it is
        written, so active/active links never copy a topic back)."""
        out = []
        for name in self.source.list_topics():
            if not self.link.selects_topic(name):
                continue
            info = self.source.describe_topic(name)
            if info.mirrored:
                continue
            out.append(info)
        return out

    def _ensure_topic(self, source: TopicInfo, report: StepReport) -> Topic | None:
        """The destination's mirror topic of ``source`` (created, grown, reconfigured)."""
        name = self.link.mirror_name(source.name)
        try:
            dest = self.dest.describe_topic(name)
        except UnknownTopicOrPartitionError:
            oldest = next(iter(source.value_types.values()), None)  # evolved below
            dest = self.dest.create_topic(
                name,
                partitions=source.partitions,
                config=mirror_config(source),
                value_type=oldest,
                mirror=provenance(self.link, source),
            )
            report.topics_created.append(name)
        mirror = dest.mirror or {}
        if mirror.get("link") != self.link.name:
            report.skipped[name] = (
                f"topic {name!r} exists on the destination and is not a mirror topic of link "
                f"{self.link.name!r}"
            )
            return None
        if mirror.get("state") == "promoted":
            return None
        if mirror.get("source_topic_id") != source.topic_id:
            report.skipped[name] = (
                f"source topic {source.name!r} was deleted and re-created (id "
                f"{source.topic_id}, mirrored id {mirror.get('source_topic_id')}); the mirror "
                "topic stays as it was: delete it to mirror the new topic"
            )
            return None
        if source.partitions > dest.partitions:
            dest = self.dest.add_partitions(name, source.partitions)
        # typed topics: every value schema the source's objects were written under, in
        # the order the source evolved, so copied objects' schema ids all resolve
        for sid, value_type in source.value_types.items():
            if sid not in dest.value_types:
                dest = self.dest.evolve_value_type(name, value_type)
        if source.value_type is not None and dest.value_schema_id != source.value_schema_id:
            dest = self.dest.evolve_value_type(name, source.value_type)
        wanted = {k: v for k, v in mirror_config(source).items() if k != "commit.shards"}
        have = {k: v for k, v in dest.config.items() if k != "commit.shards"}
        if wanted != have:
            dest = self.dest.alter_topic_config(
                name, wanted, remove=[k for k in have if k not in wanted]
            )
        return self.dest.topic(name)

    def _pair(self, source: TopicInfo, report: StepReport) -> tuple[Topic, Topic] | None:
        dest = self._ensure_topic(source, report)
        if dest is None:
            self._topics.pop(source.name, None)
            return None
        known = self._topics.get(source.name)
        if (
            known is None
            or known[0].info.topic_id != source.topic_id
            or known[1].info.topic_id != dest.info.topic_id
        ):
            known = (self.source.topic(source.name), dest)
            self._topics[source.name] = known
        else:
            known[0].reload()
            known[1].reload()
        return known

    # -- data -----------------------------------------------------------------------------
    def step(self, *, groups: bool = True) -> StepReport:
        """Copy what the source has that the destination lacks (bounded per partition)."""
        report = StepReport()
        for info in self.source_topics():
            pair = self._pair(info, report)
            if pair is None:
                continue
            self._copy_topic(*pair, report)
        if groups and self.link.groups:
            report.groups_synced = self.sync_groups()
        return report

    def _copy_topic(self, src: Topic, dst: Topic, report: StepReport) -> None:
        """Plan every shard's copy from its end, copy the objects, and commit them all in
        one call: a commit per shard directly, or one journal commit of the leader for
        every shard it leases when handed over (:func:`handover.commit_mirrored`)."""
        planned: dict[int, list[Segment]] = {}
        expected: dict[int, int] = {}
        for shard in range(dst.shards):
            dst_state = dst.shard(shard).refresh()
            src.shard(shard).refresh()
            for p in range(shard, src.partitions, src.shards):
                if p >= dst.partitions:
                    continue
                end = dst_state.parts[p].high_watermark if p in dst_state.parts else 0
                state = src.partition(p).state
                segments = self._plan(src, dst, p, end, state.high_watermark)
                lag_s = 0.0
                if segments:
                    planned[p], expected[p] = segments, end
                    lag_s = max(0.0, time.time() - segments[0].min_timestamp_ms / 1000)
                report.lag.append(PartitionLag(dst.name, p, state.high_watermark, end, lag_s))
        if not planned:
            return
        planned = self._copy_shared_segments(src, dst, planned)
        self._copy_objects(src, dst, planned, report)
        commit_copy(self.dest, dst, planned, link=self.link, expected=expected, report=report)

    def _plan(self, src: Topic, dst: Topic, p: int, end: int, source_end: int) -> list[Segment]:
        """Segments of ``[end, source_end)`` to copy, at most :data:`STEP_MAX_BYTES`."""
        if source_end <= end:
            return []
        out: list[Segment] = []
        size = 0
        for seg in src.partition(p).segments_between(end, source_end):
            if seg.base_offset < end:
                seg = self._rewrite_tail(src, dst, p, seg, end)
            out.append(seg)
            size += seg.size_bytes
            if size >= STEP_MAX_BYTES:
                break
        return out

    def _rewrite_tail(self, src: Topic, dst: Topic, p: int, seg: Segment, end: int) -> Segment:
        """A source segment straddling the destination's end: its records from ``end`` on,
        decoded and written as a new destination object that carries their offsets."""
        table = src.partition(p).read(end, seg.end_offset)
        new = write_with_offsets(dst, p, table)
        self._remember(new.object_key)
        return replace(new, base_offset=end, offset_span=seg.end_offset - end)

    def _remember(self, key: str) -> None:
        self._copied[key] = None
        self._copied.move_to_end(key)
        while len(self._copied) > COPIED_KEYS_REMEMBERED:
            self._copied.popitem(last=False)

    def _copy_shared_segments(
        self, src: Topic, dst: Topic, planned: Mapping[int, list[Segment]]
    ) -> dict[int, list[Segment]]:
        """Segments in objects the source shares with other topics (one broker flush of
        several topics): their byte ranges copied into one destination object, never the
        other topics' records; the plan naming that object instead."""
        from sparklog.storage.shared_objects import copy_segments_out

        shared = [seg for segments in planned.values() for seg in segments if _shared(seg)]
        if not shared:
            return dict(planned)
        copied = dict(
            zip(map(id, shared), copy_segments_out(src.store, dst.store, shared), strict=True)
        )
        for seg in copied.values():
            self._remember(seg.object_key)
        return {
            p: [copied.get(id(seg), seg) for seg in segments] for p, segments in planned.items()
        }

    def _copy_objects(
        self, src: Topic, dst: Topic, planned: Mapping[int, list[Segment]], report: StepReport
    ) -> None:
        """Copy every object the planned segments live in (once each, :data:`COPY_THREADS`
        at a time), each verified (see :meth:`_copy_one`)."""
        by_key: dict[str, list[Segment]] = {}
        for segments in planned.values():
            for seg in segments:
                if seg.object_key not in self._copied:
                    by_key.setdefault(seg.object_key, []).append(seg)
        if not by_key:
            return
        if self._pool is None:
            self._pool = ThreadPoolExecutor(COPY_THREADS, thread_name_prefix="sparklog-mirror")
        done = [
            (key, self._pool.submit(self._copy_one, src, dst, key, segments))
            for key, segments in by_key.items()
        ]
        for key, future in done:
            how, size = future.result()
            if how != "present":
                report.objects_copied += 1
                report.objects_server_side += how == "server"
                report.bytes_copied += size
            self._remember(key)

    def _copy_one(
        self, src: Topic, dst: Topic, key: str, segments: list[Segment]
    ) -> tuple[str, int]:
        """One object: ("present", 0) if an earlier (killed) run copied it (its segments
        are read back and checked), ("server", 0) if copied server-side (the copy's
        entity tag must be the source's), ("bytes", size) if read, checked segment by
        segment and written by this process."""
        if dst.store.exists(key):
            _verify(dst.store.get_buffer(key), segments, f"{dst.store.url}/{key}")
            return "present", 0
        if dst.store.same_endpoint(src.store):
            dst.store.copy_from(src.store, key, key)
            # the copy is the source's bytes if the entity tags (MD5s) agree: two HEADs,
            # no bytes read back; without tags, the segments are read back and checked
            theirs, ours = src.store.etag(key), dst.store.etag(key)
            if theirs is None or ours is None:
                _verify(dst.store.get_buffer(key), segments, f"{dst.store.url}/{key}")
            elif theirs != ours:
                raise CorruptRecordError(
                    f"object {dst.store.url}/{key} copied from {src.store.url}/{key} has "
                    f"entity tag {ours}, not {theirs}; nothing committed"
                )
            return "server", 0
        data = src.store.get_buffer(key)
        _verify(data, segments, f"{src.store.url}/{key}")
        dst.store.put(key, data.to_pybytes())
        return "bytes", data.size

    # -- groups ---------------------------------------------------------------------------
    def sync_groups(self) -> int:
        """Copy the selected groups' committed offsets of mirrored partitions; return how
        many groups changed (see :func:`sync_group`)."""
        mirrored = mirrored_topics(self.dest, self.link, [i.name for i in self.source_topics()])
        changed = 0
        for group in self.source.groups.list_groups():
            if not self.link.selects_group(group):
                continue
            committed = {
                (tp.topic, tp.partition): c.offset
                for tp, c in self.source.groups.fetch(group).items()
            }
            changed += sync_group(self.dest, self.link, group, committed, mirrored)
        return changed


def commit_copy(
    dest: LogRoot,
    dst: Topic,
    planned: Mapping[int, list[Segment]],
    *,
    link: MirrorLink,
    expected: Mapping[int, int],
    report: StepReport,
) -> None:
    """Commit one topic's copy, every shard of it in ONE call (the copier of roots and of
    Kafka-protocol sources alike): :func:`handover.commit_mirrored` hands the shards a
    broker's journal leases to that broker (one journal commit for all of them, no
    revoke of its lease) and commits the others directly, each partition landing only
    while its end is still ``expected``; the records and segments that landed (not
    duplicates) are counted in ``report`` and its lag entries moved to the new ends."""
    results = handover.commit_mirrored(dest, dst, planned, link=link.name, expected=expected)
    for p, result in results.items():
        if not result.duplicate:
            report.records += sum(s.record_count for s in planned[p])
            report.segments += len(planned[p])
    for lag in report.lag:
        if lag.topic == dst.name and lag.partition in results:
            lag.mirror_end = planned[lag.partition][-1].end_offset
            lag.lag_seconds = 0.0 if lag.lag_records == 0 else lag.lag_seconds


def mirrored_topics(dest: LogRoot, link: MirrorLink, sources: Iterable[str]) -> dict[str, Topic]:
    """Source topic name -> its destination mirror topic, for topics the link still fills."""
    out: dict[str, Topic] = {}
    for source in sources:
        try:
            info = dest.describe_topic(link.mirror_name(source))
        except UnknownTopicOrPartitionError:
            continue
        if info.mirrored and (info.mirror or {}).get("link") == link.name:
            out[source] = dest.topic(info.name)  # (promoted topics: no more)
    return out


def sync_group(
    dest: LogRoot,
    link: MirrorLink,
    group: str,
    committed: Mapping[tuple[str, int], int],
    mirrored: Mapping[str, Topic],
) -> bool:
    """Write one source group's committed offsets (source topic names) to the destination.

    Only for partitions of topics the link still mirrors, capped at the mirror's end
    (a group never starts past the data it finds), and only while the group never
    joined on the destination (its log has no generation): once it has, it is active
    there and its own commits rule.  True if anything was written.
    """
    from sparklog.topic_partition import TopicPartition

    if dest.groups.generation(group) >= 0:
        return False
    offsets: dict[tuple[str, int], int] = {}
    for (source, partition), offset in committed.items():
        topic = mirrored.get(source)
        if topic is None or partition >= topic.partitions or offset < 0:
            continue
        end = topic.partition(partition).refresh().high_watermark
        offsets[(topic.name, partition)] = min(offset, end)
    if not offsets:
        return False
    mine = dest.groups.fetch(group)
    before = {(tp.topic, tp.partition): c.offset for tp, c in mine.items()}
    if all(before.get(k) == v for k, v in offsets.items()):
        return False
    dest.groups.commit(
        group,
        {TopicPartition(t, p): o for (t, p), o in offsets.items()},
        metadata=f"mirror:{link.name}",
    )
    return True


def _shared(segment: Segment) -> bool:
    return segment.object_key.startswith("/")


def write_with_offsets(dst: Topic, partition: int, table: Any) -> Segment:
    """Records (a table with an ``offset`` column) written as one staged destination
    object that keeps their offsets (as compaction's objects do); base offset: the first."""
    import pyarrow as pa

    from sparklog.storage.maintenance import rebatch
    from sparklog.storage.records import OFFSET_FIELD
    from sparklog.storage.segments import write_object

    schema = pa.schema([OFFSET_FIELD, *dst.info.record_schema])
    staged = write_object(
        dst.store,
        {partition: rebatch(table.select(schema.names).cast(schema))},
        schema,
        schema_id=dst.info.value_schema_id,
        has_offsets=True,
    )[partition]
    return replace(staged, base_offset=int(table.column("offset")[0].as_py()))


def _verify(data: Any, segments: Iterable[Segment], where: str) -> None:
    """Every segment's bytes in ``data`` (a whole object) match its checksum."""
    from sparklog.storage.segments import checksum_of

    for seg in segments:
        piece = data.slice(seg.byte_start, seg.size_bytes)
        if piece.size != seg.size_bytes or checksum_of(piece) != seg.checksum:
            raise CorruptRecordError(
                f"object {where} bytes {seg.byte_start}-{seg.byte_end} fail their checksum "
                "while mirroring; nothing committed"
            )


def lag(dest: LogRoot, link: MirrorLink) -> list[PartitionLag]:
    """Per partition lag of ``link``'s mirror topics (reads both roots; copies nothing)."""
    mirror = Mirror(dest, link)
    out: list[PartitionLag] = []
    for info in mirror.source_topics():
        name = link.mirror_name(info.name)
        try:
            dst = dest.topic(name)
        except UnknownTopicOrPartitionError:
            continue
        if (dst.info.mirror or {}).get("link") != link.name:
            continue
        src = mirror.source.topic(info.name)
        for p in range(src.partitions):
            source_log = src.partition(p).refresh()
            mine = dst.partition(p).refresh() if p < dst.partitions else None
            end = mine.high_watermark if mine is not None else 0
            lag_s = 0.0
            if end < source_log.high_watermark:
                later = src.partition(p).segments_between(end, source_log.high_watermark)
                if later:
                    lag_s = max(0.0, time.time() - later[0].min_timestamp_ms / 1000)
            gaps = mine.mirror_gaps if mine is not None else []
            out.append(PartitionLag(name, p, source_log.high_watermark, end, lag_s, gaps))
    return out


def promote(dest: LogRoot, topic: str) -> TopicInfo:
    """Stop mirroring ``topic`` and make it writable at its next offset (failover)."""
    info = dest.describe_topic(topic)
    if info.mirror is None:
        raise InvalidRequestError(f"topic {topic!r} is not a mirror topic; nothing to promote")
    if not info.mirrored:
        return info  # promoted before: nothing changes
    handle = dest.topic(topic)
    ends = {str(p): handle.partition(p).refresh().high_watermark for p in range(info.partitions)}
    return dest.set_mirror(
        topic,
        # where the mirror's copy ended: what failing back must truncate the old primary to
        {**info.mirror, "state": "promoted", "promoted_ms": now_ms(), "promoted_ends": ends},
    )


def reverse(
    dest: LogRoot,
    link_name: str,
    *,
    name: str = "",
    source_options: Mapping[str, Any] | None = None,
) -> tuple[MirrorLink, list[str]]:
    """Fail back: on ``link_name``'s source (the old primary, a root) create the reverse
    link, whose source is ``dest``, with the same topic and group patterns; return it
    and the old primary's topics that became its mirror topics.

    Each topic the link promoted on ``dest`` becomes, at the old primary, a mirror topic
    of the reverse link continuing from ``promoted_ends`` (the copy's ends at the
    promotion): only what ``dest`` wrote since is copied back, with its offsets.  If the
    old primary has records past those ends (written there and never mirrored), nothing
    changes and the error names each partition and its offsets: they would be lost (no
    truncation: docs/architecture.md).  ``source_options``: the reverse link's options
    for reading ``dest``.
    """
    from sparklog.errors import InvalidConfigurationError
    from sparklog.mirror.links import create_link
    from sparklog.storage import open_root

    link = get_link(dest, link_name)
    if link.kafka_source or link.prefix:
        raise InvalidConfigurationError(
            f"mirror reverse {link_name}: the link "
            + ("copies from a Kafka-protocol cluster" if link.kafka_source else "has a --prefix")
            + "; accepted: a link from a sparklog root without a prefix (a prefixed link's "
            "topics are written on both sides already: mirror back with a prefixed link)"
        )
    back_name = name or f"{link_name}-back"
    old = open_root(link.source, link.source_options, create=False)
    promoted = []
    for topic in dest.list_topics():
        info = dest.describe_topic(topic)
        mirror = info.mirror or {}
        if mirror.get("link") == link.name and mirror.get("state") == "promoted":
            promoted.append(info)
    if not promoted:
        raise InvalidRequestError(
            f"mirror reverse {link_name}: no topic of link {link_name!r} is promoted here; "
            "promote them first (sparklog mirror promote TOPIC)"
        )
    unmirrored: list[str] = []
    turned: list[TopicInfo] = []
    for info in promoted:
        mirror = info.mirror or {}
        try:
            theirs = old.describe_topic(mirror["source_topic"])
        except UnknownTopicOrPartitionError:
            continue  # gone at the old primary: the reverse link creates it
        if (theirs.mirror or {}).get("link") == back_name:
            continue  # reversed before
        if theirs.mirrored or theirs.topic_id != mirror.get("source_topic_id"):
            unmirrored.append(
                f"{theirs.name} (a mirror topic there)"
                if theirs.mirrored
                else f"{theirs.name} (re-created there since it was mirrored)"
            )
            continue
        handle = old.topic(theirs.name)
        ends = mirror.get("promoted_ends") or {}
        for p in range(theirs.partitions):
            end = handle.partition(p).refresh().high_watermark
            copied = int(ends.get(str(p), 0))
            if end > copied:
                unmirrored.append(f"{theirs.name}-{p} offsets {copied}-{end - 1}")
        turned.append(info)
    if unmirrored:
        raise InvalidRequestError(
            f"mirror reverse {link_name}: {old.url} has records that were never mirrored "
            f"here (past the ends the promotion recorded): {', '.join(unmirrored)}; nothing "
            "changed. Copy or drop them there (or delete the topic there: the reverse link "
            "then copies it whole)"
        )
    back = MirrorLink(
        name=back_name,
        source=dest.url,
        topics=link.topics,
        groups=link.groups,
        source_options=dict(source_options or {}),
    )
    for info in turned:  # read-only at the old primary from here on, filled from dest
        old.set_mirror((info.mirror or {})["source_topic"], provenance(back, info))
    try:
        back = create_link(
            old,
            back.name,
            source=back.source,
            topics=back.topics,
            groups=back.groups,
            source_options=back.source_options,
            created_ms=now_ms(),
        )
    except MirrorLinkExistsError:
        if get_link(old, back.name).source != back.source:
            raise
    return back, [(i.mirror or {})["source_topic"] for i in turned]
