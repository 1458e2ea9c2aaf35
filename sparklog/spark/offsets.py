"""Offsets as Spark checkpoints them, and where a subscription's partitions stand.

Offsets are Kafka's JSON, ``{"topic": {"0": 5, "1": 7}}`` (next offset to
read), with topics and partitions always in sorted order: Spark stores the JSON
verbatim and compares it as text, so equal positions must give equal text.
sparklog adds one entry Kafka cannot have, ``"@topicIds": {"topic": "<id>"}``
(``@`` is not allowed in topic names): the incarnation of each topic the
offsets belong to, so that a topic deleted and created again under a running
query is detected even when the new topic already holds as many records as the
old position.  Checkpoints without it (older versions) are still read.
:class:`RootView` answers, for one subscription, which topic-partitions exist
now and their log start and high watermark; it keeps topic and partition
handles between triggers so that a new look costs only the commits since the
last one.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from sparklog.errors import DataLossError, SparkOptionError, UnknownTopicOrPartitionError
from sparklog.spark.options import OffsetSpec, Subscription
from sparklog.storage import LogRoot, PartitionLog, Topic, TopicInfo
from sparklog.topic_partition import TopicPartition

log = logging.getLogger(__name__)

EARLIEST = -2
LATEST = -1


TOPIC_IDS_KEY = "@topicIds"


def encode_offsets(
    offsets: Mapping[TopicPartition, int], topic_ids: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """Kafka-style offsets JSON with stable (sorted) key order, plus the topics' ids."""
    out: dict[str, Any] = {}
    for tp in sorted(offsets):
        out.setdefault(tp.topic, {})[str(tp.partition)] = int(offsets[tp])
    ids = {t: topic_ids[t] for t in sorted(out) if topic_ids and topic_ids.get(t)}
    if ids:
        out[TOPIC_IDS_KEY] = ids
    return out


def decode_offsets(doc: Mapping[str, Any] | None) -> dict[TopicPartition, int]:
    out: dict[TopicPartition, int] = {}
    for topic, parts in (doc or {}).items():
        if topic == TOPIC_IDS_KEY:
            continue
        for partition, offset in parts.items():
            out[TopicPartition(topic, int(partition))] = int(offset)
    return out


def topic_ids_of(doc: Mapping[str, Any] | None) -> dict[str, str]:
    """The topic ids recorded in an offsets document (empty for older checkpoints)."""
    return dict((doc or {}).get(TOPIC_IDS_KEY) or {})


class RootView:
    """The topic-partitions a subscription covers right now, with their log bounds."""

    def __init__(
        self, root: LogRoot, subscription: Subscription, *, read_committed: bool = False
    ) -> None:
        self.root = root
        self.subscription = subscription
        #: read_committed: a partition ends at its last stable offset (Kafka transactions)
        self.read_committed = read_committed
        self._topics: dict[str, Topic] = {}

    def end_of(self, plog: PartitionLog) -> int:
        """Where a partition's readable records end: the high watermark, or the last
        stable offset for read_committed (an open transaction's records wait)."""
        if self.read_committed:
            return int(plog.state.last_stable_offset)
        return int(plog.high_watermark)

    # -- topics ------------------------------------------------------------
    def _topic_names(self) -> list[str]:
        sub = self.subscription
        if sub.pattern is not None:
            return sorted(t for t in self.root.list_topics() if sub.matches(t))
        if sub.assign:
            return sorted(t for t, _ in sub.assign)
        return sorted(sub.topics)

    def refresh_topics(self) -> dict[str, TopicInfo]:
        """Current metadata of every subscribed topic that exists (new incarnations too)."""
        infos: dict[str, TopicInfo] = {}
        for name in self._topic_names():
            try:
                info = self.root.describe_topic(name)
            except UnknownTopicOrPartitionError:
                self._topics.pop(name, None)
                continue
            handle = self._topics.get(name)
            if handle is None or handle.info.topic_id != info.topic_id:
                handle = Topic(self.root, info)
                self._topics[name] = handle
            else:
                handle.info = info
            infos[name] = info
        return infos

    def topic(self, name: str) -> Topic:
        """A topic's handle; also one outside the subscription (a batch planned before a
        restart changed ``subscribe`` is replayed as planned). UnknownTopicOrPartitionError if
        gone."""
        handle = self._topics.get(name)
        if handle is None:
            self.refresh_topics()
            handle = self._topics.get(name)
            if handle is None:
                handle = self._topics[name] = Topic(self.root, self.root.describe_topic(name))
        return handle

    def partitions(self, infos: Mapping[str, TopicInfo]) -> list[TopicPartition]:
        """The subscribed topic-partitions of ``infos``, sorted."""
        assigned = dict(self.subscription.assign)
        out: list[TopicPartition] = []
        for name, info in sorted(infos.items()):
            if name in assigned:
                missing = [p for p in assigned[name] if p >= info.partitions]
                if missing:
                    raise SparkOptionError(
                        f"option 'assign': topic {name!r} has no partition {missing[0]}; "
                        f"accepted: 0-{info.partitions - 1}"
                    )
                out.extend(TopicPartition(name, p) for p in assigned[name])
            else:
                out.extend(TopicPartition(name, p) for p in range(info.partitions))
        return out

    # -- partitions --------------------------------------------------------
    def log(self, topic: str, partition: int, *, refresh: bool = True) -> PartitionLog:
        plog = self.topic(topic).partition(partition)
        if refresh:
            plog.refresh()
        return plog

    def bounds(self, partitions: list[TopicPartition]) -> dict[TopicPartition, tuple[int, int]]:
        """(log start offset, high watermark) of each partition, freshly read."""
        out = {}
        for tp in partitions:
            plog = self.log(tp.topic, tp.partition)
            out[tp] = (plog.log_start_offset, self.end_of(plog))
        return out


def resolve_positions(
    spec: OffsetSpec,
    view: RootView,
    partitions: list[TopicPartition],
    *,
    which: str,
    timestamp_strategy: str = "error",
) -> dict[TopicPartition, int]:
    """Concrete offsets for a starting (``which='starting'``) or ending position."""
    if spec.kind in ("offsets", "timestamps"):
        given = spec.offsets if spec.kind == "offsets" else spec.timestamps
        option = f"{which}Offsets" if spec.kind == "offsets" else f"{which}OffsetsByTimestamp"
        named = {(t, p) for t, ps in given.items() for p in ps}
        wanted = set(partitions)
        if named != wanted:
            extra = sorted(named - wanted)
            missing = sorted(wanted - named)
            detail = (
                f"it names {extra[0][0]}-{extra[0][1]}, which is not subscribed or does not exist"
                if extra
                else f"it lacks {missing[0][0]}-{missing[0][1]}"
            )
            raise SparkOptionError(
                f"option {option!r} must give every subscribed topic-partition exactly once; "
                f"{detail}"
            )
    out: dict[TopicPartition, int] = {}
    for tp in partitions:
        plog = view.log(*tp)
        start, hwm = plog.log_start_offset, view.end_of(plog)
        if spec.kind == "earliest":
            out[tp] = start
        elif spec.kind == "latest":
            out[tp] = hwm
        elif spec.kind == "offsets":
            value = spec.offsets[tp[0]][tp[1]]
            out[tp] = start if value == EARLIEST else hwm if value == LATEST else value
            if which == "ending":
                out[tp] = min(out[tp], hwm)
        else:
            ts = spec.timestamp_ms if spec.kind == "timestamp" else spec.timestamps[tp[0]][tp[1]]
            offset = plog.offset_for_timestamp(ts)
            if which == "starting" and offset >= hwm and timestamp_strategy == "error":
                raise SparkOptionError(
                    f"no record of {tp[0]}-{tp[1]} has a timestamp at or after {ts} ms, so the "
                    "starting offset cannot be found; set startingOffsetsByTimestampStrategy="
                    "latest to start at the latest offset instead"
                )
            out[tp] = offset
    return out


def check_start(
    tp: TopicPartition,
    start: int,
    log_start: int,
    high_watermark: int,
    *,
    fail_on_data_loss: bool,
) -> int:
    """The offset to read from, given that retention or deletion may have removed ``start``.

    With failOnDataLoss=true a lost range fails the query with a message naming
    topic, partition and range; otherwise it is logged and reading continues at
    the log start.
    """
    topic, partition = tp
    if start < log_start:
        message = (
            f"records {start}-{log_start - 1} of {topic}-{partition} were removed (retention or "
            f"compaction) before they were read; the log now starts at {log_start}"
        )
    elif start > high_watermark:
        message = (
            f"offset {start} of {topic}-{partition} is beyond its high watermark "
            f"{high_watermark}: the partition's log was replaced (topic deleted and created "
            f"again, or its records removed), so records {log_start}-{start - 1} of the new log "
            "would be skipped"
        )
    else:
        return start
    if fail_on_data_loss:
        raise DataLossError(
            f"{message}. Set failOnDataLoss=false to continue at the log start instead"
        )
    log.warning("data loss: %s; continuing at %d (failOnDataLoss=false)", message, log_start)
    return log_start


def check_batch_range(tp: TopicPartition, start: int, end: int, high_watermark: int) -> None:
    """Kafka's check of a batch read's resolved range: a start after the end is an error.

    Whatever failOnDataLoss says: the start was given by the query, so reading
    anything else would return offsets the query excluded, and returning no
    rows would hide the mistake.
    """
    if start <= end:
        return
    topic, partition = tp
    reason = (
        f"the start is beyond the end of the log (high watermark {high_watermark})"
        if start > high_watermark
        else "the ending position resolves before the start"
    )
    raise SparkOptionError(
        f"the resolved start offset {start} is greater than the resolved end offset {end} for "
        f"topic {topic!r} partition {partition}: {reason}. Check startingOffsets/"
        "startingTimestamp against endingOffsets/endingTimestamp and the topic's offsets "
        "(sparklog topics describe)"
    )
