"""The Consumer: subscribe or assign, poll records or Arrow batches, commit positions.

Without ``group_id`` a consumer reads and changes nothing any group sees.
With ``group_id`` and ``subscribe`` it is a member of a consumer group
(partitions shared among members, rebalanced as they come and go); with
``assign`` it may still commit to the group, as Kafka's standalone consumers do.

``Consumer`` is a façade split by role as kafka-python's ``KafkaConsumer`` is:
``SubscriptionState`` (``subscription_state.py``) holds what it reads and where,
``Fetcher`` (``fetcher.py``) fetches through the backend and advances positions,
``GroupMembership`` (``membership.py``) joins, heartbeats and leaves the group.
Commits and auto-commit stay here: they need the delivered positions (which
records iteration has handed out) and the membership's generation, both known
only to the façade.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pyarrow as pa

from sparklog.client.config import CONSUMER_OPTIONS, client_settings, parse_config
from sparklog.client.fetcher import Fetcher
from sparklog.client.membership import GroupMembership
from sparklog.client.security import KEYS as SECURITY_KEYS
from sparklog.client.subscription_state import Listener, SubscriptionState
from sparklog.client.transports import Backend, open_backend
from sparklog.client.types import (
    ConsumerRebalanceListener,
    ConsumerRecord,
    OffsetAndMetadata,
    OffsetAndTimestamp,
    TopicPartition,
)
from sparklog.errors import (
    IllegalStateError,
    InvalidConfigurationError,
    SparklogError,
    UnknownTopicOrPartitionError,
)

log = logging.getLogger(__name__)

_IDLE_BACKOFF_S = (0.005, 0.1)


_TOPIC_NAME = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
CommitCallback = Callable[[dict[TopicPartition, OffsetAndMetadata], Any], Any]


def _is_address(value: Any) -> bool:
    """A first positional argument that cannot be a topic name is the address (or config)."""
    if isinstance(value, Mapping):
        return True
    return isinstance(value, str) and not _TOPIC_NAME.match(value)


def _is_one_tp(value: Any) -> bool:
    return isinstance(value, TopicPartition) or (
        isinstance(value, tuple)
        and len(value) == 2
        and isinstance(value[0], str)
        and isinstance(value[1], int)
    )


def _as_tp(value: Any) -> TopicPartition:
    if isinstance(value, TopicPartition):
        return value
    try:
        topic, partition = value
        return TopicPartition(str(topic), int(partition))
    except (TypeError, ValueError):
        raise InvalidConfigurationError(
            f"{value!r} is not a TopicPartition; accepted: (topic, partition)"
        ) from None


class Consumer:
    """Read records from topics, kafka-python's way or sparklog's.

    ``Consumer("t1", "t2", bootstrap_servers="host:9092", group_id="g")`` subscribes
    at once (kafka-python's ``KafkaConsumer(*topics, **config)``);
    ``Consumer("file:///tmp/sl", group_id="g")`` takes the address first (a first
    argument that cannot be a topic name is the address, or a confluent-kafka-style
    config dict).  The address is a storage root (embedded) or brokers.

    Config (Kafka's meanings): auto_offset_reset, enable_auto_commit,
    auto_commit_interval_ms, session_timeout_ms, heartbeat_interval_ms,
    rebalance_timeout_ms (alias max_poll_interval_ms), max_poll_records,
    fetch_max_bytes, fetch_max_wait_ms, partition_assignment_strategy,
    metadata_max_age_ms, client_id, storage_options, key_deserializer,
    value_deserializer, consumer_timeout_ms.
    """

    def __init__(
        self,
        *topics: Any,
        address: str | None = None,
        group_id: str | None = None,
        backend: Backend | None = None,
        **config: Any,
    ) -> None:
        names = list(topics)
        first = names.pop(0) if names and _is_address(names[0]) else None
        if first is not None and address is not None:
            raise InvalidConfigurationError(
                "the address is given twice (first argument and address=)"
            )
        given_address = first if first is not None else address
        address, given = client_settings("consumer", given_address, config)
        for key in ("group_id", "group.id"):
            found = given.pop(key, None)
            group_id = found if group_id is None else group_id
        self.config = parse_config("consumer", CONSUMER_OPTIONS, given)
        self.group_id = group_id
        self._backend = backend or open_backend(
            address,
            self.config["storage_options"],
            retry_timeout_ms=self.config["retry_timeout_ms"],
            security={k: self.config[k] for k in SECURITY_KEYS},
            create=False,  # reading never creates a root
        )
        self._owns_backend = backend is None
        self._subscriptions = SubscriptionState(self.config["auto_offset_reset"])
        #: records polled for iteration (``__next__``), not yet handed to the application
        self._delivering: deque[ConsumerRecord] = deque()
        self._next_autocommit_s = time.monotonic() + self.config["auto_commit_interval_ms"] / 1000
        self._closed = False
        self._committer: ThreadPoolExecutor | None = None
        self._counts = {
            "records-consumed-total": 0,
            "bytes-consumed-total": 0,
            "fetch-total": 0,
            "poll-total": 0,
            "commit-total": 0,
            "rebalance-total": 0,
        }
        self._counts_lock = threading.Lock()
        self._fetcher = Fetcher(
            self._backend,
            self._subscriptions,
            group_id=group_id,
            fetch_max_bytes=self.config["fetch_max_bytes"],
            fetch_max_wait_ms=self.config["fetch_max_wait_ms"],
            isolation_level=self.config["isolation_level"],
            key_deserializer=self.config["key_deserializer"],
            value_deserializer=self.config["value_deserializer"],
            count=self._count,
        )
        self._membership: GroupMembership | None = None
        if group_id is not None:
            self._membership = GroupMembership(
                self._backend,
                group_id,
                strategy=self.config["partition_assignment_strategy"],
                session_timeout_ms=self.config["session_timeout_ms"],
                rebalance_timeout_ms=self.config["rebalance_timeout_ms"],
                heartbeat_interval_ms=self.config["heartbeat_interval_ms"],
            )
        if names:
            self.subscribe(names)

    # -- subscriptions ----------------------------------------------------------------
    def subscribe(
        self,
        topics: str | Sequence[str] | re.Pattern[str] = (),
        pattern: str | re.Pattern[str] | None = None,
        listener: ConsumerRebalanceListener | None = None,
        *,
        on_assign: Listener | None = None,
        on_revoke: Listener | None = None,
    ) -> None:
        """Subscribe to topics, or to a ``pattern`` (a regex matched against whole names).

        A compiled regex or a string starting ``^`` given as ``topics`` is a pattern
        too.  ``listener`` (a ConsumerRebalanceListener) or ``on_assign``/``on_revoke``
        are told of assignment changes.
        """
        state = self._subscriptions
        if state.user_assigned:
            raise InvalidConfigurationError("subscribe() after assign(): call unsubscribe() first")
        if pattern is not None and topics:
            raise InvalidConfigurationError("subscribe takes topics or pattern=, not both")
        if pattern is None and (
            isinstance(topics, re.Pattern) or (isinstance(topics, str) and topics.startswith("^"))
        ):
            pattern = topics
        if pattern is not None:
            try:
                compiled = re.compile(pattern) if isinstance(pattern, str) else pattern
            except re.error as exc:
                raise InvalidConfigurationError(f"bad topic pattern {pattern!r}: {exc}") from None
            state.subscribe_pattern(compiled)
            self._match_pattern()
        else:
            names = [topics] if isinstance(topics, str) else list(topics)  # type: ignore[arg-type]
            if not names or not all(isinstance(n, str) and n for n in names):
                raise InvalidConfigurationError(
                    f"subscribe takes topic names or a pattern, not {topics!r}"
                )
            state.subscribe_topics(names)
        if listener is not None:
            if not isinstance(listener, ConsumerRebalanceListener):
                raise InvalidConfigurationError(
                    f"listener {listener!r} is not accepted; accepted: a ConsumerRebalanceListener"
                )
            on_assign = on_assign or listener.on_partitions_assigned
            on_revoke = on_revoke or listener.on_partitions_revoked
        state.set_listeners(on_assign, on_revoke)
        if self._membership is not None:
            self._membership.rejoin_needed = True
        else:
            self._set_assignment(self._all_partitions(state.topics))

    def _match_pattern(self) -> bool:
        """Match the subscribed pattern against the topics now; True if the matches changed."""
        state = self._subscriptions
        assert state.pattern is not None
        pattern = state.pattern
        state.pattern_checked_s = time.monotonic()  # a failed listing waits for the next check
        matched = [t for t in self._backend.list_topics() if pattern.fullmatch(t)]
        return state.update_pattern_matches(matched)

    def _all_partitions(self, topics: Iterable[str]) -> list[TopicPartition]:
        out: list[TopicPartition] = []
        for topic in topics:
            count = self._backend.topic_layout(topic)[0]
            out.extend(TopicPartition(topic, p) for p in range(count))
        return out

    def subscription(self) -> list[str]:
        return list(self._subscriptions.topics)

    def unsubscribe(self) -> None:
        self._revoke()
        if self._membership is not None:
            self._membership.leave()
        self._subscriptions.unsubscribe()
        self._set_assignment([])

    def assign(self, partitions: Iterable[TopicPartition | tuple[str, int]]) -> None:
        """Read exactly these partitions (no group membership)."""
        if self._subscriptions.topics:
            raise InvalidConfigurationError("assign() after subscribe(): call unsubscribe() first")
        tps = [_as_tp(p) for p in partitions]
        for tp in tps:
            count = self._backend.topic_layout(tp.topic)[0]
            if not 0 <= tp.partition < count:
                raise UnknownTopicOrPartitionError(
                    f"topic {tp.topic!r} has no partition {tp.partition}; accepted: 0-{count - 1}"
                )
        self._subscriptions.user_assigned = True
        self._set_assignment(tps)

    def assignment(self) -> set[TopicPartition]:
        return set(self._subscriptions.assigned_partitions())

    def _set_assignment(self, tps: Sequence[TopicPartition]) -> None:
        """Assign ``tps``; what is buffered or queued for other partitions is dropped."""
        keep = self._subscriptions.set_assignment(tps)
        self._fetcher.keep_only(keep)
        self._delivering = deque(r for r in self._delivering if r.topic_partition in keep)

    # -- group coordination ------------------------------------------------------------
    def _revoke(self) -> None:
        """Give the assignment up: commit what was delivered (auto-commit), tell the listener.

        The commit carries the generation the partitions were assigned in, which
        the coordinator still accepts while the group prepares the rebalance; so
        the next owner starts after the records this member already delivered.
        """
        state = self._subscriptions
        revoked = state.assigned_partitions()
        if not revoked or self._membership is None or state.user_assigned:
            return
        if self.config["enable_auto_commit"] and self._membership.generation >= 0:
            self._commit_quietly()
        if state.on_revoke is not None:
            state.on_revoke(revoked)
        self._set_assignment([])
        state.clear_positions()

    def _ensure_group(self) -> None:
        membership = self._membership
        state = self._subscriptions
        if membership is None or state.user_assigned or not state.has_subscription():
            return
        interval_s = self.config["metadata_max_age_ms"] / 1000
        pattern_stale = time.monotonic() - state.pattern_checked_s > interval_s
        if state.pattern is not None and pattern_stale and self._match_pattern():
            membership.rejoin_needed = True
        if not membership.rejoin_needed:
            return
        self._revoke()
        self._count("rebalance-total")
        assigned = membership.join(state.topics)
        self._set_assignment([TopicPartition(t, p) for t, p in assigned])
        state.clear_positions()
        if state.on_assign is not None:
            state.on_assign(state.assigned_partitions())

    # -- positions -----------------------------------------------------------------
    def position(self, partition: TopicPartition | tuple[str, int]) -> int:
        tp = _as_tp(partition)
        self._subscriptions.require_assigned(tp)
        self._fetcher.update_positions()
        return self._delivered()[tp]

    def seek(self, partition: TopicPartition | tuple[str, int], offset: int) -> None:
        tp = _as_tp(partition)
        self._subscriptions.require_assigned(tp)
        if not isinstance(offset, int) or offset < 0:
            raise InvalidConfigurationError(
                f"seek offset {offset!r} is not accepted; accepted: integers >= 0"
            )
        self._subscriptions.seek(tp, offset)
        self._fetcher.discard(tp)
        self._delivering = deque(r for r in self._delivering if r.topic_partition != tp)

    def seek_to_beginning(self, *partitions: TopicPartition | tuple[str, int]) -> None:
        chosen = [_as_tp(p) for p in partitions] or self._subscriptions.assigned_partitions()
        for tp in chosen:
            self.seek(tp, self._fetcher.list_offset(tp, "earliest"))

    def seek_to_end(self, *partitions: TopicPartition | tuple[str, int]) -> None:
        chosen = [_as_tp(p) for p in partitions] or self._subscriptions.assigned_partitions()
        for tp in chosen:
            self.seek(tp, self._fetcher.list_offset(tp, "latest"))

    def offsets_for_times(
        self, timestamps: Mapping[TopicPartition | tuple[str, int], int]
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """Per partition, the earliest record whose timestamp is >= the given ms (its offset
        and timestamp), or None if there is none yet."""
        out: dict[TopicPartition, OffsetAndTimestamp | None] = {}
        for key, ts in timestamps.items():
            tp = _as_tp(key)
            if isinstance(ts, bool) or not isinstance(ts, int) or ts < 0:
                raise InvalidConfigurationError(
                    f"timestamp {ts!r} for {tp} is not accepted; accepted: ms >= 0"
                )
            out[tp] = self._fetcher.offset_for_time(tp, ts)
        return out

    def beginning_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: self._fetcher.list_offset(tp, "earliest") for tp in map(_as_tp, partitions)}

    def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: self._fetcher.list_offset(tp, "latest") for tp in map(_as_tp, partitions)}

    def pause(self, *partitions: TopicPartition | tuple[str, int]) -> None:
        self._subscriptions.pause(_as_tp(p) for p in partitions)

    def resume(self, *partitions: TopicPartition | tuple[str, int]) -> None:
        self._subscriptions.resume(_as_tp(p) for p in partitions)

    def paused(self) -> set[TopicPartition]:
        return self._subscriptions.paused_partitions()

    # -- commits ---------------------------------------------------------------------
    def _delivered(self) -> dict[TopicPartition, int]:
        """Positions after the records handed to the application (not those still queued
        for iteration): what a commit without offsets stores."""
        out = self._subscriptions.positions()
        for record in reversed(self._delivering):
            out[record.topic_partition] = record.offset
        return out

    def _chosen(
        self,
        offsets: Mapping[TopicPartition | tuple[str, int], OffsetAndMetadata | int] | None,
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        if self.group_id is None:
            raise InvalidConfigurationError("commit() needs a group_id")
        if offsets is None:
            return {tp: OffsetAndMetadata(o) for tp, o in self._delivered().items()}
        chosen = {}
        for key, value in offsets.items():
            tp = _as_tp(key)
            chosen[tp] = (
                value if isinstance(value, OffsetAndMetadata) else OffsetAndMetadata(int(value))
            )
        return chosen

    def commit(
        self,
        offsets: Mapping[TopicPartition | tuple[str, int], OffsetAndMetadata | int] | None = None,
    ) -> None:
        """Commit ``offsets`` (next offset to read), or every assigned partition's position."""
        self._commit_now(self._chosen(offsets))

    def _commit_now(self, chosen: Mapping[TopicPartition, OffsetAndMetadata]) -> None:
        if not chosen:
            return
        assert self.group_id is not None
        by_tp = dict(chosen)
        if self._membership is not None and not self._subscriptions.user_assigned:
            self._membership.commit(by_tp)
        else:
            self._backend.commit_offsets(self.group_id, -1, "", by_tp)
        self._count("commit-total")

    def commit_async(
        self,
        offsets: Mapping[TopicPartition | tuple[str, int], OffsetAndMetadata | int] | None = None,
        callback: CommitCallback | None = None,
    ) -> Future[None]:
        """Commit in the background; ``callback(offsets, error_or_None)`` when done.

        The offsets are taken now; commits run one at a time, in call order.
        """
        chosen = self._chosen(offsets)
        if self._committer is None:
            self._committer = ThreadPoolExecutor(1, thread_name_prefix="sparklog-commit")

        def run() -> None:
            error: BaseException | None = None
            try:
                self._commit_now(chosen)
            except SparklogError as exc:
                error = exc
            if callback is not None:
                callback(dict(chosen), error)
            if error is not None:
                raise error

        return self._committer.submit(run)

    def _commit_quietly(self) -> None:
        try:
            self.commit()
        except SparklogError as exc:
            log.warning("auto-commit to group %s failed: %s", self.group_id, exc)

    def committed(self, partition: Any, metadata: bool = False) -> Any:
        """The group's committed offset of ``partition`` (int, or None if none is committed).

        ``metadata=True`` returns the OffsetAndMetadata.  Given a list of partitions,
        a dict of partition -> OffsetAndMetadata (or None).
        """
        if self.group_id is None:
            raise InvalidConfigurationError("committed() needs a group_id")
        found = self._backend.fetch_offsets(self.group_id)
        if _is_one_tp(partition):
            tp = _as_tp(partition)
            om = found.get(tp)
            if metadata or om is None:
                return om
            return om.offset
        return {tp: found.get(tp) for tp in map(_as_tp, partition)}

    # -- polling ------------------------------------------------------------------------
    def poll_batches(
        self, timeout_ms: int = 0, max_records: int | None = None
    ) -> list[pa.RecordBatch]:
        """Arrow batches (columns topic, partition, offset, key, value, timestamp, headers)."""
        limit = max_records or self.config["max_poll_records"]
        if self._closed:
            raise IllegalStateError("consumer is closed")
        self._count("poll-total")
        deadline = time.monotonic() + max(timeout_ms, 0) / 1000
        idle_s = _IDLE_BACKOFF_S[0]
        while True:
            self._ensure_group()
            self._maybe_autocommit()
            out = self._fetcher.take(limit)
            if out or time.monotonic() >= deadline:
                return out
            time.sleep(min(idle_s, max(deadline - time.monotonic(), 0)))
            idle_s = min(idle_s * 2, _IDLE_BACKOFF_S[1])

    def poll_records(
        self, timeout_ms: int = 0, max_records: int | None = None
    ) -> list[ConsumerRecord]:
        """Records as one flat list, at most ``max_records``, waiting up to timeout_ms."""
        records: list[ConsumerRecord] = []
        for batch in self.poll_batches(timeout_ms, max_records):
            records.extend(self._fetcher.records(batch))
        with self._counts_lock:
            self._counts["records-consumed-total"] += len(records)
        return records

    def poll(
        self, timeout_ms: int = 0, max_records: int | None = None, update_offsets: bool = True
    ) -> dict[TopicPartition, list[ConsumerRecord]]:
        """kafka-python's poll: ``{TopicPartition: [records]}``, at most ``max_records``.

        Waits up to ``timeout_ms`` for the first records.  ``update_offsets`` is
        accepted for kafka-python's signature; positions always advance.
        """
        out: dict[TopicPartition, list[ConsumerRecord]] = {}
        for record in self.poll_records(timeout_ms, max_records):
            out.setdefault(record.topic_partition, []).append(record)
        return out

    def __iter__(self) -> Consumer:
        return self

    def __next__(self) -> ConsumerRecord:
        """The next record; StopIteration after ``consumer_timeout_ms`` without one.

        The clock starts once the group (if any) is joined: a rebalance is not idleness.
        """
        if self._delivering:
            return self._delivering.popleft()
        if self._closed:
            raise StopIteration
        self._ensure_group()
        limit_ms = self.config["consumer_timeout_ms"]
        deadline = None if limit_ms is None else time.monotonic() + limit_ms / 1000
        while True:
            wait_ms = 1000
            if deadline is not None:
                wait_ms = int(max(min(deadline - time.monotonic(), 1.0), 0) * 1000)
            self._delivering.extend(self.poll_records(timeout_ms=wait_ms))
            if self._delivering:
                return self._delivering.popleft()
            if deadline is not None and time.monotonic() >= deadline:
                raise StopIteration

    def _maybe_autocommit(self) -> None:
        if (
            self.group_id is not None
            and self.config["enable_auto_commit"]
            and time.monotonic() >= self._next_autocommit_s
        ):
            self._next_autocommit_s = (
                time.monotonic() + self.config["auto_commit_interval_ms"] / 1000
            )
            membership = self._membership
            if membership is None or self._subscriptions.user_assigned or membership.active:
                self._commit_quietly()

    def _count(self, name: str, amount: int = 1) -> None:
        with self._counts_lock:
            self._counts[name] += amount

    # -- misc --------------------------------------------------------------------------
    def list_topics(self) -> list[str]:
        return self._backend.list_topics()

    def topics(self) -> set[str]:
        """Every topic at the address (kafka-python's name)."""
        return set(self._backend.list_topics())

    def partitions_for_topic(self, topic: str) -> set[int]:
        """The topic's partition numbers (kafka-python returns a set too)."""
        return set(range(self._backend.topic_layout(topic)[0]))

    def highwater(self, partition: TopicPartition | tuple[str, int]) -> int | None:
        """The high watermark last seen by a fetch of an assigned partition (None before one)."""
        tp = _as_tp(partition)
        self._subscriptions.require_assigned(tp)
        return self._subscriptions.highwater(tp)

    def metrics(self, raw: bool = False) -> dict[str, dict[str, float]]:
        """Counters of this consumer (records, bytes, fetches, polls, commits, rebalances)."""
        with self._counts_lock:
            counts = {k: float(v) for k, v in self._counts.items()}
        return {"consumer-metrics": counts}

    def close(self, autocommit: bool = True, timeout_ms: int | None = None) -> None:
        """Commit what was delivered (if auto-commit is on), revoke, leave the group."""
        if self._closed:
            return
        try:
            if self._committer is not None:
                self._committer.shutdown(wait=True)
            try:
                if self._membership is not None and not self._subscriptions.user_assigned:
                    if not autocommit:
                        self._on_revoke_only()
                    else:
                        self._revoke()  # auto-commit, then the revoke callback (as Kafka does)
                elif autocommit and self.group_id and self.config["enable_auto_commit"]:
                    self._commit_quietly()
            finally:  # a failing listener must not keep this member in the group
                if self._membership is not None:
                    self._membership.leave()
        finally:
            self._closed = True
            if self._owns_backend:
                self._backend.close()

    def _on_revoke_only(self) -> None:
        state = self._subscriptions
        revoked = state.assigned_partitions()
        if revoked and state.on_revoke is not None:
            state.on_revoke(revoked)
        self._set_assignment([])

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
