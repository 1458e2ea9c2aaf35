"""The broker's produce path: one batcher per broker, one object per flush, commits per shard.

Requests are checked for leadership once per shard and normalised once, gathered
by the broker's :class:`sparklog.broker_lite.produce.FlushBatcher` for ``linger_ms``,
written as one object (a topic's own when the flush holds one topic, one shared by
the topics otherwise: :mod:`sparklog.storage.shared_objects`) and committed shard by
shard under this broker's leader epoch.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import wait
from typing import Any

import pyarrow as pa

from sparklog.broker_lite.broker_state import BrokerState
from sparklog.broker_lite.logs import fields
from sparklog.broker_lite.partition_state import ShardState, storage_call
from sparklog.broker_lite.produce import (
    FlushBatcher,
    Latch,
    Outcome,
    ProduceItem,
    ProduceOutcome,
    ProduceRequest,
    Run,
    commit_pool,
    duplicate_outcome,
)
from sparklog.broker_lite.transactions.coordinator import TransactionCoordinator
from sparklog.errors import FencedError as LeaderEpochFenced
from sparklog.errors import (
    InvalidRecordError,
    InvalidRequestError,
    InvalidTxnStateError,
    NotLeaderOrFollowerError,
    OutOfOrderSequenceNumberError,
    ProducerFencedError,
    SparklogError,
)
from sparklog.storage import ProducerBatch, Topic
from sparklog.storage.journal import JournalSealedError
from sparklog.storage.shared_objects import write_shared_object
from sparklog.storage.topics import Normalized
from sparklog.storage.txn_markers import check_txn_append, ended_txn

log = logging.getLogger("sparklog.broker_lite.broker")
ACKS = ("0", "1", "all")


class ProducePath:
    """Produce requests: leadership checks, batching, writing and committing.

    ``transactions`` checks a transactional append against its transaction's state.
    """

    def __init__(self, state: BrokerState, transactions: TransactionCoordinator) -> None:
        self.state = state
        self.transactions = transactions
        #: the broker's one batcher, made by the first produce (none once stopping)
        self._batcher: FlushBatcher | None = None
        # a flush of many topics commits each shard it touched at once (threads made on demand)
        self._pool = commit_pool(32)

    def close(self) -> None:
        """Flush what is pending and stop: the broker stops (its stop was requested)."""
        with self.state.lock:
            batcher = self._batcher
        if batcher is not None:
            batcher.close()

    def shutdown_commits(self) -> None:
        """Wait for the commits of the last flushes (after :meth:`close`)."""
        self._pool.shutdown(wait=True)

    def produce(
        self,
        topic_name: str,
        items: Sequence[tuple[int, pa.RecordBatch | pa.Table]],
        *,
        acks: str = "all",
        producer_id: int | None = None,
        producer_epoch: int | None = None,
        base_sequence: int | None = None,
        compression: str | None = "none",
    ) -> list[ProduceOutcome]:
        """Validate, enqueue and (unless acks=0) wait for the commit of each item.

        The whole request is refused if any item is invalid (nothing enqueued);
        an idempotent request's sequences run on from ``base_sequence`` across
        its items, in order.
        """
        idempotent = producer_id is not None
        if idempotent and (producer_epoch is None or base_sequence is None):
            raise InvalidRequestError(
                "an idempotent produce needs producer_id, producer_epoch and base_sequence"
            )
        each = []
        sequence = base_sequence or 0
        for partition, data in items:
            producer = None
            if idempotent:
                assert producer_epoch is not None and producer_id is not None
                producer = (producer_id, producer_epoch, sequence)
                sequence += data.num_rows
            each.append(ProduceItem(partition, data, producer))
        outcomes = []
        for outcome in self.produce_each(
            topic_name, each, acks=acks, compression=compression, all_or_nothing=True
        ):
            if isinstance(outcome, BaseException):
                raise outcome
            outcomes.append(outcome)
        return outcomes

    def produce_each(
        self,
        topic_name: str,
        items: Sequence[ProduceItem],
        *,
        acks: str = "all",
        compression: str | None = "none",
        all_or_nothing: bool = False,
        on_queued: Callable[[], None] | None = None,
    ) -> list[ProduceOutcome | BaseException]:
        """Validate, enqueue and (unless acks=0) wait for each item: its outcome or its error.

        Leadership is checked once per shard and the records are normalised once
        per request (``Topic.normalize_many``), not once per partition: those
        fixed costs (milliseconds each) no longer grow with the partition count.
        ``all_or_nothing`` raises the first invalid item's error before anything
        is enqueued (the Flight protocol); otherwise each item fails alone (Kafka).
        ``on_queued`` is called once the items are in the topic's batcher, before
        the wait for their commit (the Kafka listener keeps a connection's
        requests in the order sent with it).
        """
        if acks not in ACKS:
            raise InvalidRequestError(f"acks={acks!r} is not accepted; accepted: 0, 1, all")
        topic = self.state.topic(topic_name)
        refused: dict[int, BaseException] = {}
        leads: dict[int, bool] = {}  # shard -> whether this broker leads it
        shards = topic.info.shards  # (``info.shard_of`` rebuilds the topic's config per call)
        for i, item in enumerate(items):
            try:
                self.state.partition_state(topic, item.partition)
                shard = item.partition % shards
                if shard not in leads:
                    leads[shard] = False
                    self.state.check_leader(topic_name, item.partition)
                    leads[shard] = True
                elif not leads[shard]:
                    self.state.check_leader(topic_name, item.partition)  # this partition's error
            except SparklogError as exc:
                if all_or_nothing:
                    raise
                refused[i] = exc
        valid = [i for i in range(len(items)) if i not in refused]
        try:
            normalized = dict(
                zip(valid, topic.normalize_many([items[i].data for i in valid]), strict=True)
            )
        except SparklogError:
            if all_or_nothing:
                raise
            normalized = {}
            for i in valid:  # the error path: find each item's own outcome
                try:
                    batches = topic.normalize(items[i].data)
                except SparklogError as one:
                    refused[i] = one
                    continue
                normalized[i] = Normalized(batches, sum(b.nbytes for b in batches))
        requests: dict[int, ProduceRequest] = {}
        latch = Latch(len(normalized))
        size_bytes = 0
        for i, (batches, size) in normalized.items():
            item = items[i]
            count = sum(b.num_rows for b in batches)
            size_bytes += size
            producer = None
            if item.producer is not None:
                producer = ProducerBatch(*item.producer, max(count, 1))
            requests[i] = ProduceRequest(
                item.partition,
                batches,
                count,
                size,
                producer,
                compression,
                item.txn,
                future=Outcome(latch),
            )
        limit = self.state.config.max_request_bytes
        if all_or_nothing and size_bytes > limit:
            raise InvalidRecordError(
                f"produce request of {size_bytes} bytes exceeds max_request_bytes={limit}; "
                "send smaller requests"
            )
        for i in [i for i, r in requests.items() if r.size_bytes > limit]:  # (Kafka: per item)
            refused[i] = InvalidRecordError(
                f"{topic_name}-{items[i].partition}: {requests[i].size_bytes} bytes of "
                f"records exceed max_request_bytes={limit}; send smaller requests"
            )
            requests.pop(i).future.set_exception(refused[i])  # counted off the latch
        pending = [requests[i] for i in sorted(requests)]
        if acks == "0":
            if pending:
                self._flush_batcher().submit(topic_name, pending)
            if on_queued is not None:
                on_queued()
            for r in pending:
                r.future.add_done_callback(_log_unacked_failure)
            return [
                refused[i] if i in refused else ProduceOutcome(-1, requests[i].record_count)
                for i in range(len(items))
            ]
        if pending:
            self.state.metrics.produce_waiting.inc()
            try:
                self._flush_batcher().submit(topic_name, pending)
                if on_queued is not None:
                    on_queued()
                latch.wait()
            finally:
                self.state.metrics.produce_waiting.dec()
        outcomes: list[ProduceOutcome | BaseException] = []
        records = produced_bytes = 0
        for i in range(len(items)):
            if i in refused:
                outcomes.append(refused[i])
                continue
            r = requests[i]
            failure = r.future.exception()
            if failure is not None:
                outcomes.append(failure)
                continue
            outcomes.append(r.future.result())
            records += r.record_count
            produced_bytes += r.size_bytes
        self.state.metrics.produce_records.labels(topic_name).inc(records)
        self.state.metrics.produce_bytes.labels(topic_name).inc(produced_bytes)
        return outcomes

    def _flush_batcher(self) -> FlushBatcher:
        with self.state.lock:
            if self._batcher is None:
                if self.state.stop_requested.is_set():
                    raise NotLeaderOrFollowerError("broker is shutting down", leader_location="")
                self._batcher = FlushBatcher(
                    self._flush, self.state.config.linger_ms, self.state.config.batch_bytes
                )
            return self._batcher

    def _flush(self, runs_by_topic: Mapping[str, list[Run]]) -> None:
        """Write ONE object for every run of the flush, then ONE commit per shard touched."""
        started = time.perf_counter()
        ready: dict[str, tuple[Topic, list[Run]]] = {}
        for topic_name, runs in runs_by_topic.items():
            try:
                topic = self.state.topic(topic_name)
            except SparklogError as exc:
                _fail(runs, exc)
                continue
            topic_ready = self._not_yet_committed(topic, runs)
            if topic_ready:
                ready[topic_name] = (topic, topic_ready)
        if not ready:
            return
        staged = self._write_object(ready)
        if staged is None:
            return
        self.state.metrics.root_objects.inc()
        self.state.metrics.root_requests.labels("object").inc()
        commits: list[tuple[Topic, list[Run]]] = []
        for topic_name, (topic, runs) in ready.items():
            by_shard: dict[int, list[Run]] = {}
            shards = topic.info.shards  # (``info.shard_of`` rebuilds the topic's config per call)
            for run in runs:
                if run.partition not in staged[topic_name]:  # only empty batches
                    st = self.state.partition_state(topic, run.partition)
                    for r in run.requests:
                        r.future.set_result(ProduceOutcome(st.log.high_watermark, 0))
                    continue
                by_shard.setdefault(run.partition % shards, []).append(run)
            commits.extend((topic, shard_runs) for shard_runs in by_shard.values())
        if self.state.journal is not None and self.state.config.journal_records:
            self._journal_shards(commits, staged)
        elif len(commits) == 1:  # one shard: commit on this thread, no hand-off
            topic, shard_runs = commits[0]
            self._commit_shard(topic, shard_runs, staged[topic.name])
        else:
            futures = [
                self._pool.submit(self._commit_shard, topic, shard_runs, staged[topic.name])
                for topic, shard_runs in commits
            ]
            wait(futures)
        self.state.metrics.flush_seconds.observe(time.perf_counter() - started)

    def _not_yet_committed(self, topic: Topic, runs: list[Run]) -> list[Run]:
        """The runs' requests an idempotent producer's state does not already hold
        (a retry's answered from the log instead)."""
        ready: list[Run] = []
        for run in runs:
            st = self.state.partition_state(topic, run.partition)
            keep = []
            with st.lock:
                if st.epoch is None:  # not yet leading: others may have committed meanwhile
                    try:
                        st.refresh()
                    except SparklogError as exc:
                        _fail([run], exc)
                        continue
                for r in run.requests:
                    if r.producer is not None:
                        try:
                            dup = duplicate_outcome(st.log, r.producer)
                        except SparklogError as exc:
                            r.future.set_exception(exc)
                            continue
                        if dup is not None:
                            r.future.set_result(dup)
                            continue
                    keep.append(r)
            if keep:
                ready.append(Run(run.partition, keep))
        return ready

    def _write_object(
        self, ready: Mapping[str, tuple[Topic, list[Run]]]
    ) -> dict[str, dict[int, Any]] | None:
        """Write the flush's one object: the topic's own for one topic, one shared by the
        topics for several; each topic's staged segments, or None (every run failed)."""

        def codec(runs: list[Run]) -> str:
            compression = runs[0].requests[0].compression
            # the request named no codec: the broker's setting applies
            return self.state.config.compression if compression is None else compression

        every = [run for _, runs in ready.values() for run in runs]
        try:
            if len(ready) == 1:
                ((name, (topic, runs)),) = ready.items()
                parts = {run.partition: run.batches for run in runs}
                return {name: topic.write(parts, compression=codec(runs), validated=True)}
            sections = [
                (topic, topic.section({run.partition: run.batches for run in runs}, codec(runs)))
                for topic, runs in ready.values()
            ]
            staged = write_shared_object(self.state.root.store, sections)
            return dict(zip(ready, staged, strict=True))
        except SparklogError as exc:
            _fail(every, exc)
        except Exception as exc:
            log.exception("object write failed", extra=fields(topics=sorted(ready)))
            _fail(every, SparklogError(f"object write failed: {exc}"))
        return None

    def _commit_shard(self, topic: Topic, runs: list[Run], staged: Mapping[int, Any]) -> None:
        """Commit the runs of one shard as one commit; resolve their requests."""
        states = {run.partition: self.state.partition_state(topic, run.partition) for run in runs}
        shard = states[runs[0].partition].shard
        try:
            with shard.lock:
                runs, results = self._append_as_leader(topic, shard, runs, staged)
        except SparklogError as exc:
            _fail(runs, exc)
            return
        except Exception as exc:
            log.exception("commit failed", extra=fields(topic=topic.name, shard=shard.key[2]))
            _fail(runs, SparklogError(f"commit failed: {exc}"))
            return
        self._resolve(topic, runs, states, results)

    def _resolve(
        self,
        topic: Topic,
        runs: list[Run],
        states: Mapping[int, Any],
        results: Mapping[int, Any],
    ) -> None:
        """Answer the runs of one shard's commit (or journal step) that landed."""
        for run in runs:
            result = results[run.partition]
            if not result.duplicate:
                # cached before the producers hear of the commit: a fetch made after an
                # acknowledgement finds the acknowledged records in the tail, not a part
                st = states[run.partition]
                self.state.cache.add(
                    st.key,
                    result.base_offset,
                    run.batches,
                    # the requests' sizes, known already (a slice's nbytes walks its buffers)
                    size_bytes=sum(r.size_bytes + 8 * r.record_count for r in run.requests),
                )
            offset = result.base_offset
            for r in run.requests:
                r.future.set_result(ProduceOutcome(offset, r.record_count, result.duplicate))
                offset += r.record_count
            if not result.duplicate:
                st = states[run.partition]
                with st.changed:
                    st.changed.notify_all()
        self.state.count_commit()
        fresh = [run.partition for run in runs if not results[run.partition].duplicate]
        for hook in self.state.commit_hooks if fresh else ():
            try:
                hook(topic.name, fresh)
            except Exception:  # a waiter's failure must not fail the producers' commit
                log.exception("commit hook failed", extra=fields(topic=topic.name))

    def fold_shards(self, fold_interval_ms: int) -> int:
        """Fold into their logs the journalled records of the shards whose oldest step
        waited ``fold_interval_ms`` (all of them at 0); the number of folds written."""
        writer = self.state.journal
        if writer is None:
            return 0
        due = set(writer.fold_due_keys(fold_interval_ms))
        with self.state.lock:
            shards = [s for s in self.state.shards.values() if s.log.journal_key in due]
        written = 0
        for shard in shards:
            try:
                with shard.lock:
                    written += shard.log.fold()
            except SparklogError as exc:  # the next pass (or the next leader) folds it
                where = fields(topic=shard.key[0], shard=shard.key[2], error=str(exc))
                log.warning("fold failed", extra=where)
        return written

    def _journal_shards(
        self, commits: list[tuple[Topic, list[Run]]], staged: Mapping[str, Mapping[int, Any]]
    ) -> None:
        """Format 3: every shard's runs of this flush as steps of ONE journal commit.

        Each shard's step is built against this leader's view with the shard's lock held
        (locks taken in key order) until the step is in the journal and applied; then the
        runs are answered.  A shard whose view refuses a run (an idempotent producer's
        sequence, an ended transaction) journals the others."""
        writer = self.state.journal
        assert writer is not None
        prepared: list[tuple[Topic, ShardState, list[Run], dict[int, Any], Any, Any]] = []
        locked: list[ShardState] = []
        order = sorted(
            commits,
            key=lambda c: self.state.partition_state(c[0], c[1][0].partition).shard.key,
        )
        try:
            for topic, runs in order:
                states = {r.partition: self.state.partition_state(topic, r.partition) for r in runs}
                shard = states[runs[0].partition].shard
                shard.lock.acquire()
                locked.append(shard)
                try:
                    runs, body, finish = self._stage_shard(topic, shard, runs, staged[topic.name])
                except SparklogError as exc:
                    _fail(runs, exc)
                    continue
                except Exception as exc:
                    log.exception("journal step failed", extra=fields(topic=topic.name))
                    _fail(runs, SparklogError(f"journal step failed: {exc}"))
                    continue
                if runs:
                    prepared.append((topic, shard, runs, states, body, finish))
            for attempt in range(2):
                steps = {s.log.journal_key: body for _, s, _, _, body, _ in prepared if body}
                try:
                    landed = writer.write_shards(steps) if steps else None
                except SparklogError as exc:
                    error: SparklogError = exc
                    if isinstance(exc, JournalSealedError):  # every shard leases again
                        error = NotLeaderOrFollowerError(str(exc), leader_location="")
                    for _, shard, runs, _, _, _ in prepared:
                        shard.epoch = None
                        _fail(runs, error)
                    return
                revoked = []
                for entry in prepared:
                    topic, shard, runs, states, body, finish = entry
                    commit = None
                    if body is not None and landed is not None:
                        if shard.log.journal_key in landed.revoked:  # by another writer
                            revoked.append(entry)
                            continue
                        try:
                            commit = shard.log.journalled(landed.ref, landed.version, body)
                        except JournalSealedError as exc:
                            shard.epoch = None
                            _fail(runs, NotLeaderOrFollowerError(str(exc), leader_location=""))
                            continue
                    self.state.count_commit()
                    self._resolve(topic, runs, states, finish(commit))
                # A brokerless commit (a marker another broker's transaction coordinator
                # wrote, the Spark sink) revoked these shards while the flush was on its way:
                # lease them again and journal their runs once more, built on the log as that
                # commit left it, instead of failing the producers' requests.
                prepared = []
                for topic, shard, runs, states, _, _ in revoked:
                    if attempt > 0:
                        shard.epoch = None
                        why = f"{topic.name} shard {shard.key[2]}: revoked by another writer"
                        _fail(runs, NotLeaderOrFollowerError(why, leader_location=""))
                        continue
                    try:
                        runs, body, finish = self._stage_shard(
                            topic, shard, runs, staged[topic.name]
                        )
                    except SparklogError as exc:
                        _fail(runs, exc)
                        continue
                    if runs:
                        prepared.append((topic, shard, runs, states, body, finish))
                if not prepared:
                    break
        finally:
            for shard in locked:
                shard.lock.release()
        self.state.metrics.root_requests.labels("commit").inc()

    def _stage_shard(
        self, topic: Topic, shard: ShardState, runs: list[Run], staged: Mapping[int, Any]
    ) -> tuple[list[Run], Any, Any]:
        """A shard's journal step for ``runs`` (leasing the shard first if needed): the runs
        kept, the step's body (None: nothing new) and what turns it into results."""
        for _ in range(2):
            try:
                body, finish = shard.log.stage_append(
                    {run.partition: [staged[run.partition]] for run in runs},
                    producers={run.partition: run.producer for run in runs if run.producer},
                    transactions={run.partition: run.txn for run in runs if run.txn is not None},
                )
                shard.epoch = shard.log.leader_epoch
                return runs, body, finish
            except (ProducerFencedError, OutOfOrderSequenceNumberError, InvalidTxnStateError):
                runs = self._drop_refused_runs(topic, runs)
                if not runs:
                    return runs, None, None
        raise NotLeaderOrFollowerError(
            f"{topic.name} shard {shard.key[2]}: a producer's state keeps changing; retry",
            leader_location="",
        )

    def _append_as_leader(
        self, topic: Topic, shard: ShardState, runs: list[Run], staged: Mapping[int, Any]
    ) -> tuple[list[Run], dict[int, Any]]:
        """Commit runs, bumping the shard's leader epoch first if we just became leader.

        A run that an idempotent producer's state now refuses (another writer
        moved the log since the pre-check) is failed alone; the others commit.
        """
        assert self.state.cluster is not None
        for _ in range(4):
            try:
                if shard.epoch is None:
                    shard.epoch = shard.log.bump_epoch()
                    self.state.metrics.root_requests.labels("commit").inc()
                    log.info(
                        "took leadership",
                        extra=fields(topic=topic.name, shard=shard.key[2], epoch=shard.epoch),
                    )
                started = time.perf_counter()
                results = shard.log.append(
                    {run.partition: [staged[run.partition]] for run in runs},
                    leader_epoch=shard.epoch,
                    producers={run.partition: run.producer for run in runs if run.producer},
                    transactions={run.partition: run.txn for run in runs if run.txn is not None},
                )
                self.state.metrics.commit_seconds.observe(time.perf_counter() - started)
                self.state.metrics.root_requests.labels("commit").inc()
                return runs, results
            except (ProducerFencedError, OutOfOrderSequenceNumberError, InvalidTxnStateError):
                runs = self._drop_refused_runs(topic, runs)
                if not runs:
                    return runs, {}
            except LeaderEpochFenced as exc:
                log.warning(
                    "fenced by a newer leader epoch",
                    extra=fields(
                        topic=topic.name,
                        shard=shard.key[2],
                        ours=shard.epoch,
                        theirs=shard.log.leader_epoch,
                        error=str(exc),
                    ),
                )
                shard.epoch = None
                for run in runs:
                    self.state.cache.drop(self.state.partition_state(topic, run.partition).key)
                if not self.state.config.force_leader:
                    storage_call(self.state.cluster.refresh)
                    for run in runs:
                        self.state.check_leader(topic.name, run.partition)
            except SparklogError:
                raise
        raise NotLeaderOrFollowerError(
            f"{topic.name} shard {shard.key[2]}: leadership is contested; retry",
            leader_location="",
        )

    def _drop_refused_runs(self, topic: Topic, runs: list[Run]) -> list[Run]:
        """Fail the runs the (refreshed) producer state refuses; keep the rest."""
        keep = []
        for run in runs:
            batch = run.producer
            if batch is None:
                keep.append(run)
                continue
            try:
                st = self.state.partition_state(topic, run.partition)
                st.log.duplicate_of(batch)
                if run.txn is not None:
                    self._check_txn_run(topic, run, batch, st.log.state.transactions)
                keep.append(run)
            except SparklogError as exc:
                _fail([run], exc)
        return keep

    def _check_txn_run(
        self, topic: Topic, run: Run, batch: ProducerBatch, txn: Mapping[str, Any]
    ) -> None:
        """Refuse a run of an ended transaction; a number taken from an image older than the
        producer's transaction is asked for again (the coordinator may be another broker)."""
        assert run.txn is not None
        where = f"{topic.name}-{run.partition}"
        ended = ended_txn(txn, batch.producer_id)
        if run.txn <= ended:
            number = self.transactions.verify(
                batch.producer_id, batch.producer_epoch, topic.name, run.partition, ended=ended
            )
            for request in run.requests:
                request.txn = number
        check_txn_append(txn, batch.producer_id, run.txn, where)


def _fail(runs: Sequence[Run], exc: BaseException) -> None:
    for run in runs:
        for r in run.requests:
            if not r.future.done():
                r.future.set_exception(exc)


def _log_unacked_failure(future: Outcome) -> None:
    exc = future.exception()
    if exc is not None:
        log.warning("acks=0 produce failed", extra=fields(error=str(exc)))
