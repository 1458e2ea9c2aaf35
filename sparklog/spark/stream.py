"""The streaming reader (``spark.readStream.format("sparklog")``).

Offsets in Spark's checkpoint are the truth: a batch is the offsets between two
checkpointed positions, and ``read()`` is a pure function of a range, so a
batch replayed after a failure returns the same records.  This object lives in
one long-running Python process on the driver per query, so it may keep state
between triggers (topic handles, the AvailableNow target, the time of the last
trigger); executors only ever see :class:`~sparklog.spark.plan.ReadTask`.

``reader.commit`` runs a batch late and ``stop`` may never run, so nothing that
must happen relies on them: the consumer group's offsets are recorded when the
next trigger starts from a position (which Spark only does once the batch that
ended there is committed) and again in ``commit``.

On pyspark < 4.2 Spark calls ``latestOffset()`` without the batch's start or a
read limit (no admission control; the rate-limit options are refused before a
reader is made, see :mod:`sparklog.spark.compat`): the end is then every
partition's high watermark, and the checks that need the start (vanished
partitions, the group's position) run in ``partitions(start, end)``.
"""

from __future__ import annotations

import logging
from typing import Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from sparklog.clock import now_ms
from sparklog.errors import DataLossError, SparkOptionError, UnknownTopicOrPartitionError
from sparklog.spark.compat import (
    HAS_ADMISSION_CONTROL,
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from sparklog.spark.offsets import (
    RootView,
    TopicPartition,
    check_start,
    decode_offsets,
    encode_offsets,
    resolve_positions,
    topic_ids_of,
)
from sparklog.spark.options import SourceOptions
from sparklog.spark.plan import (
    ReadRange,
    ReadTask,
    default_parallelism,
    layout_of,
    limit_by_bytes,
    limit_by_offsets,
    plan_tasks,
)
from sparklog.spark.read import read_task
from sparklog.spark.roots import cached_root
from sparklog.spark.schema import arrow_schema
from sparklog.storage import Topic

log = logging.getLogger(__name__)


class SparklogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader with Kafka's rate limits, AvailableNow and consumer-group offsets."""

    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        self._view: RootView | None = None
        self._initial: dict[str, Any] | None = None
        self._target: dict[TopicPartition, int] | None = None
        self._last_trigger_ms = 0
        self._latest: dict[TopicPartition, int] = {}
        self._group_committed: dict[TopicPartition, int] = {}

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_view"] = None
        return state

    @property
    def view(self) -> RootView:
        if self._view is None:
            root = cached_root(self.options.root, self.options.storage_options)
            self._view = RootView(
                root, self.options.subscription, read_committed=self.options.read_committed
            )
        return self._view

    # -- positions ---------------------------------------------------------
    def initialOffset(self) -> dict:
        """Where a query without checkpoint starts: option group's offsets, else startingOffsets.

        ``kafka.group.id`` never moves the start (Spark's Kafka source starts at
        startingOffsets whatever the group id); it only records progress.

        Spark may call this twice; it is resolved once and cached.
        """
        if self._initial is None:
            view = self.view
            infos = view.refresh_topics()
            partitions = view.partitions(infos)
            positions = resolve_positions(
                self.options.starting,
                view,
                partitions,
                which="starting",
                timestamp_strategy=self.options.timestamp_strategy,
            )
            if self.options.starting.kind == "offsets":
                for tp, offset in positions.items():
                    hwm = view.log(*tp, refresh=False).high_watermark
                    if offset > hwm:  # never read the offsets the query excluded instead
                        raise SparkOptionError(
                            f"option 'startingOffsets' gives offset {offset} for topic "
                            f"{tp[0]!r} partition {tp[1]}, beyond the end of its log (high "
                            f"watermark {hwm}); accepted: -2, -1 or an offset up to {hwm}"
                        )
            if self.options.group and self.options.group_resumes:  # not kafka.group.id
                committed = view.root.groups.fetch(self.options.group)
                for tp in partitions:
                    entry = committed.get(tp)
                    if entry is None or entry.offset < 0:
                        continue  # none, or a sentinel a Kafka tool committed (-2, -1)
                    if entry.topic_id and entry.topic_id != infos[tp[0]].topic_id:
                        continue  # offsets of an earlier topic of the same name
                    positions[tp] = entry.offset
            ids = {name: info.topic_id for name, info in infos.items()}
            self._initial = encode_offsets(positions, ids)
        return self._initial

    def getDefaultReadLimit(self) -> ReadLimit:
        opts = self.options
        if opts.max_offsets_per_trigger:
            return ReadMaxRows(opts.max_offsets_per_trigger)
        if opts.max_bytes_per_trigger:
            return ReadMaxBytes(opts.max_bytes_per_trigger)
        if opts.min_offsets_per_trigger:
            return ReadMinRows(opts.min_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        """Fix the target: the latest offsets now; later records wait for the next run."""
        view = self.view
        partitions = view.partitions(view.refresh_topics())
        self._target = {tp: hwm for tp, (_, hwm) in view.bounds(partitions).items()}

    def latestOffset(self, start: dict | None = None, limit: ReadLimit | None = None) -> dict:
        """The end of the next batch: the latest offsets, cut by the rate limits.

        pyspark < 4.2 passes neither ``start`` nor ``limit``: the end is then
        the latest offsets of every subscribed partition.
        """
        if start is None:
            return self._latest_without_start()
        opts = self.options
        begin = decode_offsets(start)
        self._commit_group(begin)
        view = self.view
        infos = view.refresh_topics()
        recorded = topic_ids_of(start)
        ids = {name: info.topic_id for name, info in infos.items()}
        begin = self._check_incarnations(begin, recorded, ids)
        # A topic gone for now keeps its recorded id, so its re-creation is still recognised.
        ids = {**{t: i for t, i in recorded.items() if t not in ids}, **ids}
        partitions = view.partitions(infos)
        bounds = view.bounds(partitions)
        self._latest = {tp: hwm for tp, (_, hwm) in bounds.items()}
        dropped = self._check_vanished(begin, bounds)
        ids = {t: i for t, i in ids.items() if t in infos or t not in {tp[0] for tp in dropped}}
        effective: dict[TopicPartition, int] = {}
        latest: dict[TopicPartition, int] = {}
        for tp, (log_start, hwm) in bounds.items():
            if self._target is not None and tp not in self._target and tp not in begin:
                continue  # appeared after AvailableNow fixed its target
            first = begin.get(tp, 0)  # a new partition is read from its beginning
            effective[tp] = check_start(
                tp, first, log_start, hwm, fail_on_data_loss=opts.fail_on_data_loss
            )
            cap = hwm if self._target is None else min(hwm, self._target.get(tp, hwm))
            latest[tp] = max(cap, effective[tp])
        ends = dict(latest)
        limited = self._target is not None or not isinstance(limit, ReadAllAvailable)
        if limited:
            backlog = sum(latest[tp] - effective[tp] for tp in latest)
            now = now_ms()
            if (
                self._target is None
                and opts.min_offsets_per_trigger
                and 0 < backlog < opts.min_offsets_per_trigger
                and now - self._last_trigger_ms < opts.max_trigger_delay_ms
            ):
                return start
            max_rows = opts.max_offsets_per_trigger
            if isinstance(limit, ReadMaxRows):
                max_rows = min(max_rows or limit.max_rows, limit.max_rows)
            if max_rows:
                ends = limit_by_offsets(effective, ends, max_rows)
            max_bytes = opts.max_bytes_per_trigger
            if isinstance(limit, ReadMaxBytes):
                max_bytes = min(max_bytes or limit.max_bytes, limit.max_bytes)
            if max_bytes:
                ranges = {tp: self._range(tp, effective[tp], ends[tp]) for tp in ends}
                ends = limit_by_bytes(ranges, max_bytes)
        for tp, offset in begin.items():
            if tp not in dropped:
                ends.setdefault(tp, offset)  # deleted partitions keep their position
        end = encode_offsets(ends, ids)
        if end != encode_offsets(begin, ids):
            self._last_trigger_ms = now_ms()
            return end
        return start

    def _latest_without_start(self) -> dict:
        """pyspark < 4.2: every subscribed partition's high watermark, with the topic ids."""
        view = self.view
        infos = view.refresh_topics()
        bounds = view.bounds(view.partitions(infos))
        self._latest = {tp: hwm for tp, (_, hwm) in bounds.items()}
        ids = {name: info.topic_id for name, info in infos.items()}
        return encode_offsets(self._latest, ids)

    def _check_vanished(
        self, begin: dict[TopicPartition, int], bounds: dict[TopicPartition, tuple[int, int]]
    ) -> set[TopicPartition]:
        """Positions of partitions no longer read: a data-loss error, or the ones to forget.

        A partition leaves the query because its topic was deleted, or because
        the query no longer subscribes to it (a restart with another
        ``subscribe``/``subscribePattern``/``assign``).  A deleted topic's
        unread records are lost (failOnDataLoss decides); its position is kept,
        so a re-creation is recognised.  An unsubscribed partition still exists:
        if records remain unread after the position that is reported as data
        loss (they will never be read by this query), otherwise it is forgotten.
        """
        dropped: set[TopicPartition] = set()
        gone = sorted(tp for tp in begin if tp not in bounds)
        for tp in gone:
            position = begin[tp]
            if self.options.subscription.covers(*tp):
                message = (
                    f"{tp[0]}-{tp[1]} no longer exists (topic deleted) while records from offset "
                    f"{position} were still to be read"
                )
            else:
                hwm = self._unsubscribed_end(tp)
                if hwm is None:
                    dropped.add(tp)  # deleted as well as unsubscribed: nothing to report
                    continue
                dropped.add(tp)
                if hwm <= position:
                    log.info(
                        "%s-%s is no longer subscribed (option %r); every record of it up to "
                        "offset %d was read",
                        tp[0],
                        tp[1],
                        self.options.subscription.kind,
                        position,
                    )
                    continue
                message = (
                    f"{tp[0]}-{tp[1]} is no longer subscribed (option "
                    f"{self.options.subscription.kind!r} changed since the checkpoint; the topic "
                    f"still exists) while its records at offsets {position}-{hwm - 1} were not "
                    "read yet; this query will never read them"
                )
            if self.options.fail_on_data_loss:
                raise DataLossError(f"{message}. Set failOnDataLoss=false to continue without it")
            if tp in dropped:  # once: it leaves the offsets (a deleted topic's position stays)
                log.warning("data loss: %s; continuing without it (failOnDataLoss=false)", message)
        return dropped

    def _unsubscribed_end(self, tp: TopicPartition) -> int | None:
        """The high watermark of a partition outside the subscription; None if it is gone."""
        try:
            info = self.view.root.describe_topic(tp[0])
        except UnknownTopicOrPartitionError:
            return None
        if tp[1] >= info.partitions:
            return None
        plog = Topic(self.view.root, info).partition(tp[1])
        plog.refresh()
        return int(plog.high_watermark)

    def _check_incarnations(
        self,
        begin: dict[TopicPartition, int],
        recorded: dict[str, str],
        current: dict[str, str],
    ) -> dict[TopicPartition, int]:
        """Positions of topics deleted and created again under the query: fail, or restart them.

        The offsets carry each topic's id, so a new topic of the same name is
        recognised even when it already holds as many records as the old
        position (Kafka's connector cannot tell).  failOnDataLoss=true fails;
        false reads the new topic from its log start.
        """
        replaced = sorted(
            name for name, old in recorded.items() if name in current and current[name] != old
        )
        if not replaced:
            return begin
        name = replaced[0]
        if self.options.fail_on_data_loss:
            raise DataLossError(
                f"topic {name!r} was deleted and created again while the query ran (topic id "
                f"{recorded[name]} is now {current[name]}): records of the old topic after "
                "the query's position were lost and the new topic's records would be read from "
                "the old topic's offsets. Set failOnDataLoss=false to continue with the new "
                "topic from its log start"
            )
        log.warning(
            "data loss: topics %s were deleted and created again; reading them from their log "
            "start (failOnDataLoss=false)",
            replaced,
        )
        return {tp: (0 if tp[0] in replaced else offset) for tp, offset in begin.items()}

    def reportLatestOffset(self) -> dict | None:
        return encode_offsets(self._latest) if self._latest else None  # Kafka's shape: no ids

    def _range(self, tp: TopicPartition, start: int, end: int) -> ReadRange:
        if end <= start:
            return ReadRange(tp[0], tp[1], start, start)
        plog = self.view.log(*tp, refresh=False)
        if plog.high_watermark < end:
            plog.refresh()
        bounds, cum = layout_of(plog.segments_between(start, end), start, end)
        return ReadRange(tp[0], tp[1], start, end, bounds, cum)

    # -- planning and reading ----------------------------------------------
    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        opts = self.options
        begin, finish = decode_offsets(start), decode_offsets(end)
        view = self.view
        if not HAS_ADMISSION_CONTROL:  # latestOffset() saw no start: its checks happen here
            self._commit_group(begin)
            self._check_vanished(begin, {tp: (0, 0) for tp in finish})
        end_ids = topic_ids_of(end)
        replaced = self._replaced_since(end_ids)
        start_ids = topic_ids_of(start)
        for tp in list(begin):
            if start_ids.get(tp[0], end_ids.get(tp[0])) != end_ids.get(tp[0], start_ids.get(tp[0])):
                begin[tp] = 0  # a new incarnation (failOnDataLoss=false): from its log start
        ranges: list[ReadRange] = []
        for tp, stop in sorted(finish.items()):
            if stop <= begin.get(tp, 0):
                continue  # nothing of it in this batch (a topic that left the query, too)
            if tp[0] in replaced:
                message = (
                    f"topic {tp[0]!r} was deleted and created again before offsets "
                    f"{begin.get(tp, 0)}-{stop - 1} of partition {tp[1]} were read"
                )
                if opts.fail_on_data_loss:
                    raise DataLossError(
                        f"{message}. Set failOnDataLoss=false to continue without them"
                    )
                log.warning("data loss: %s; skipped (failOnDataLoss=false)", message)
                continue
            try:
                plog = view.log(*tp, refresh=False)
            except UnknownTopicOrPartitionError:
                if opts.fail_on_data_loss:
                    raise DataLossError(
                        f"{tp[0]}-{tp[1]} was deleted before offsets {begin.get(tp, 0)}-"
                        f"{stop - 1} were read. Set failOnDataLoss=false to continue without it"
                    ) from None
                continue
            first = begin.get(tp, 0)
            if plog.high_watermark < stop or plog.log_start_offset > first:
                plog.refresh()
            first = check_start(
                tp,
                first,
                plog.log_start_offset,
                plog.high_watermark,
                fail_on_data_loss=opts.fail_on_data_loss,
            )
            if first < stop:
                ranges.append(self._range(tp, first, stop))
        tasks = plan_tasks(
            ranges,
            min_partitions=opts.min_partitions,
            cores=default_parallelism(),
            max_records=opts.max_records_per_partition,
        )
        topics = {r.topic for rs in tasks for r in rs}
        infos = {name: view.topic(name).info for name in sorted(topics)}
        return [
            ReadTask(
                index=i,
                root_url=opts.root,
                storage_options=opts.storage_options,
                topics=infos,
                ranges=rs,
                fail_on_data_loss=opts.fail_on_data_loss,
                read_committed=opts.read_committed,
            )
            for i, rs in enumerate(tasks)
        ]

    def _replaced_since(self, recorded: dict[str, str]) -> set[str]:
        """Topics whose current incarnation differs from the one ``recorded`` in an offset."""
        view = self.view
        replaced = set()
        for name, topic_id in recorded.items():
            try:
                current = view.topic(name).info.topic_id
                if current != topic_id:
                    view.refresh_topics()
                    current = view.topic(name).info.topic_id
            except UnknownTopicOrPartitionError:
                continue  # deleted: handled as a vanished partition
            if current != topic_id:
                replaced.add(name)
        return replaced

    def read(self, partition: InputPartition) -> Any:
        if not isinstance(partition, ReadTask):  # Spark's stand-in when nothing is planned
            return iter(())
        return read_task(partition, arrow_schema(self.schema))

    # -- group offsets -------------------------------------------------------
    def _commit_group(self, offsets: dict[TopicPartition, int]) -> None:
        """Record the group's position (for lag and for new queries without checkpoint)."""
        group = self.options.group
        if not group or not offsets or offsets == self._group_committed:
            return
        view = self.view
        topic_ids = {}
        for topic, _ in offsets:
            try:
                topic_ids[topic] = view.topic(topic).info.topic_id
            except UnknownTopicOrPartitionError:
                continue
        live = {tp: off for tp, off in offsets.items() if tp[0] in topic_ids}
        view.root.groups.commit(group, live, metadata="spark", topic_ids=topic_ids)
        self._group_committed = dict(offsets)

    def commit(self, end: dict) -> None:
        self._commit_group(decode_offsets(end))

    def stop(self) -> None:
        self._view = None
