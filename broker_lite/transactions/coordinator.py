"""The transaction coordinator: Kafka's transactional ids, each id's state in a log of its own.

Every state change a transaction must survive the coordinator's death with is
one change of the id's log (:mod:`sparklog.storage.transactions`,
``transactions/<id>/log``) holding the whole new state below: a step of the
broker's journal where this broker coordinates the id (FindCoordinator's
answer), riding its flushes and folded later; from any other broker a commit of
the id's log with its optimistic concurrency, after the journal's steps. So
any broker may serve any call and complete what another began::

    {"pid": producer id, "epoch": producer epoch, "state": one of STATES,
     "n": the transaction's number (one more for each transaction begun),
     "timeout_ms": transaction.timeout.ms, "started_ms": when the transaction began,
     "updated_ms": the last change, "partitions": [[topic, partition], ...],
     "groups": {group: [[topic, partition, offset, metadata], ...]}}

The cluster metadata log registers the ids only (``transactional_id`` records:
``pid``, ``epoch``, ``timeout_ms``), written after a change of the producer id or
epoch (InitProducerId, an abort's fencing): what the producer-id-to-id lookup,
ListTransactions and DescribeTransactions start from.  A record an older broker
wrote holds the whole state: it is the id's state until the id's next change
moves it into the log.

Ending a transaction is two changes: ``PrepareCommit``/``PrepareAbort`` (the
decision), then, once every partition has its marker (control record) and a
committed transaction's offsets are in their groups' logs,
``CompleteCommit``/``CompleteAbort``.  EndTxn answers once the markers and
offsets are written (what readers see is final then).  The Complete change is
left for later: the producer's next transaction, begun on the broker that
wrote the markers, replaces the Prepare state in the change that begins it, and
only a Prepare state nothing replaced gets its Complete change, at the broker's
next transactions pass (or before its InitProducerId, EndTxn or abort, or when
the broker stops).  Back-to-back transactions thus cost one step less each.  A
Prepare state this broker did not finish still refuses a new transaction
(CONCURRENT_TRANSACTIONS) until it is completed.

AddPartitionsToTxn for partitions this broker leads answers once the request
is checked against the state this broker holds, and writes its step in the
background: the partitions' records wait for that step
(:meth:`TransactionCoordinator.verify`) before they are queued, so no record is
committed to a partition its transaction's state does not list, and a step that
failed fails them with its error.  The step then runs while the Produce request
is on its way and being decoded, instead of before it.  Partitions led
elsewhere are added before the answer (their leader asks this broker).

A broker finding a Prepare state left behind (its coordinator died) finishes
it; an ``Ongoing`` transaction older than its timeout is aborted with the epoch
bumped, which fences its producer.  Markers and offset commits are idempotent,
so finishing twice is harmless.

Records of a transaction are accepted by a partition only if the partition was
added (AddPartitionsToTxn) to the producer's ongoing transaction, and carry the
transaction's number: a partition refuses a late write of a transaction that
has ended there (KIP-890's hanging and torn transactions).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from sparklog.broker_lite.logs import fields
from sparklog.broker_lite.transactions.host import TransactionHost
from sparklog.broker_lite.transactions.markers import end_transactions
from sparklog.clock import now_ms
from sparklog.errors import (
    ConcurrentTransactionsError,
    InvalidProducerEpochError,
    InvalidProducerIdMappingError,
    InvalidTransactionTimeoutError,
    InvalidTxnStateError,
    ProducerFencedError,
    SparklogError,
    TransactionalIdNotFoundError,
    UnknownTopicOrPartitionError,
)
from sparklog.protocol import actions
from sparklog.storage.cluster_metadata import MetadataImage, Record
from sparklog.storage.transactions import (
    TransactionStore,
    registered_state,
    registry_record,
    transaction_states,
)
from sparklog.storage.txn_markers import Marker
from sparklog.topic_partition import TopicPartition

log = logging.getLogger("sparklog.broker_lite.transactions")

EMPTY = "Empty"
ONGOING = "Ongoing"
PREPARE_COMMIT = "PrepareCommit"
PREPARE_ABORT = "PrepareAbort"
COMPLETE_COMMIT = "CompleteCommit"
COMPLETE_ABORT = "CompleteAbort"
STATES = (EMPTY, ONGOING, PREPARE_COMMIT, PREPARE_ABORT, COMPLETE_COMMIT, COMPLETE_ABORT)
#: Kafka's broker default (transaction.max.timeout.ms): 15 minutes
DEFAULT_TRANSACTION_MAX_TIMEOUT_MS = 15 * 60 * 1000
#: the largest producer epoch; past it a transactional id gets a new producer id
MAX_EPOCH = 32767
#: how long a Prepare state may wait for its coordinator before any broker finishes it
ORPHAN_GRACE_MS = 2_000
#: verified (producer, epoch, partition) answers kept (all dropped past it)
VERIFIED_KEPT = 65_536
#: how often the tick re-reads an id it coordinates that has no transaction open and
#: whose log another broker (or nobody) leases: the other ids' states are in memory
QUIET_RECHECK_S = 30.0


@dataclass(frozen=True)
class Producer:
    """What InitProducerId answers: the id and epoch a transactional producer uses."""

    producer_id: int
    producer_epoch: int


def _open_with(state: Mapping[str, Any], group: str, producer_id: int, epoch: int) -> bool:
    """Whether ``state`` is the producer's ongoing transaction and names ``group``."""
    return (
        state["state"] == ONGOING
        and group in state["groups"]
        and (int(state["pid"]), int(state["epoch"])) == (producer_id, epoch)
    )


def _record(tid: str, value: dict[str, Any] | None) -> Record:
    return {"type": "transactional_id", "key": tid, "value": value}


class TransactionCoordinator:
    """Transactional ids of a cluster; any broker can serve any of them (see module doc).

    ``broker`` gives the root (metadata log, groups), the shard logs (markers)
    and the live brokers; ``allocate`` hands out new producer ids.
    """

    def __init__(
        self,
        broker: TransactionHost,
        allocate: Callable[[], int],
        *,
        max_timeout_ms: int = DEFAULT_TRANSACTION_MAX_TIMEOUT_MS,
    ) -> None:
        self.broker = broker
        self.allocate = allocate
        self.max_timeout_ms = max_timeout_ms
        self._index_version = -1
        self._by_pid: dict[int, str] = {}
        self._lock = threading.Lock()
        # transactional id -> the number of its transaction whose markers and offsets this
        # broker wrote and whose Complete change is left for later (see the module doc)
        self._ended: dict[str, int] = {}
        # transactional id -> its AddPartitionsToTxn change being written in the background
        self._adding: dict[str, Future[Any]] = {}
        # (producer id, epoch, topic, partition) -> the number of the transaction the
        # partition was verified in (see :meth:`verify`)
        self._verified: dict[tuple[int, int, str, int], int] = {}
        #: verifications answered by the id's coordinator (for tests and metrics)
        self.asked = 0
        # transactional id -> monotonic time its state, last seen with no transaction
        # open and its log not leased to us, is read again by the tick
        self._quiet_until: dict[str, float] = {}
        self._adder = ThreadPoolExecutor(4, thread_name_prefix="txn-add")

    def close(self) -> None:
        """Write the changes in flight and the Complete changes left for later."""
        self._adder.shutdown(wait=True)
        self._complete_left_for_later()

    # -- the state: the ids' logs, the metadata log's registry --------------------
    @property
    def metadata(self) -> Any:
        return self.broker.root.metadata

    def image(self, fresh: bool = False) -> MetadataImage:
        return self.metadata.refresh_on_miss() if fresh else self.metadata.image()

    @property
    def transactions(self) -> TransactionStore:
        """The transactional ids' logs (their state; the metadata log registers the ids)."""
        return self.broker.root.transactions

    def state(self, tid: str, *, fresh: bool = False) -> dict[str, Any] | None:
        """``tid``'s state: from memory where its log is leased to our journal (unless
        ``fresh``), else its log and journal now (one probe), else what its registry
        record gives (an id an older broker wrote holds its state there)."""
        if not fresh:
            held = self.transactions.held_state(tid)
            if held is not None:
                return held
        found = self.transactions.state(tid)
        if found is not None:
            return found
        image = self.image(fresh)
        return registered_state(image.transactional_ids.get(tid))

    def state_for_leader(self, tid: str) -> dict[str, Any] | None:
        """``tid``'s state as a partition leader asks it (Flight ``transaction_state``):
        after this broker's AddPartitionsToTxn step in flight for it, if any, so that a
        leader never sees the transaction without partitions the client was told are in
        it."""
        self._await_added(tid, errors=False)
        return self.state(tid)

    def _change(self, tid: str, change: Any) -> dict[str, Any] | None:
        """Write ``change(current state) -> new state`` (None: no change) into ``tid``'s
        log (a journal step where this broker coordinates the id); the state after.

        An id's first state comes from its registry record when its log has none (an
        older broker's record: the change moves the state into the log).  The registry
        record is written after, when the producer id or epoch changed
        (InitProducerId, an abort's fencing) or the record is an older broker's.
        """
        after: list[dict[str, Any] | None] = [None]

        def build(current: dict[str, Any] | None) -> dict[str, Any] | None:
            if current is None:
                current = registered_state(self.image(fresh=True).transactional_ids.get(tid))
            new = change(dict(current) if current is not None else None)
            if new is None:
                after[0] = dict(current) if current is not None else None
                return None
            new = {**new, "updated_ms": now_ms()}
            after[0] = new
            return new

        written = self.transactions.write(tid, build)
        if written is not None:  # (a record an older broker wrote stays until a change)
            self._register(tid, written)
        return after[0]

    def _register(self, tid: str, state: dict[str, Any]) -> None:
        """Record ``tid``'s producer id and epoch in the registry if they are newer than
        its record there (or the record is an older broker's whole state)."""
        wanted = registry_record(state)

        def stale(record: dict[str, Any] | None) -> bool:
            if record is None or "state" in record:
                return True
            newer = (wanted["pid"], wanted["epoch"]) > (int(record["pid"]), int(record["epoch"]))
            return newer or (
                (wanted["pid"], wanted["epoch"]) == (int(record["pid"]), int(record["epoch"]))
                and wanted["timeout_ms"] != int(record.get("timeout_ms", -1))
            )

        if not stale(self.image().transactional_ids.get(tid)):
            return

        def build(image: MetadataImage) -> list[Record] | None:
            return [_record(tid, wanted)] if stale(image.transactional_ids.get(tid)) else None

        self.metadata.append(build)

    # -- checks -------------------------------------------------------------
    @staticmethod
    def _check_producer(
        tid: str, current: dict[str, Any] | None, producer_id: int, producer_epoch: int
    ) -> dict[str, Any]:
        if current is None:
            raise InvalidProducerIdMappingError(
                f"transactional id {tid!r} has no producer: call InitProducerId first"
            )
        if int(current["pid"]) != producer_id:
            raise InvalidProducerIdMappingError(
                f"transactional id {tid!r} belongs to producer {current['pid']}, not {producer_id}"
            )
        if producer_epoch < int(current["epoch"]):
            raise ProducerFencedError(
                f"producer {producer_id} epoch {producer_epoch} of transactional id {tid!r} is "
                f"fenced by epoch {current['epoch']} (a newer producer with this id started)"
            )
        if producer_epoch > int(current["epoch"]):
            raise InvalidProducerEpochError(
                f"producer {producer_id} epoch {producer_epoch} is ahead of the coordinator's "
                f"epoch {current['epoch']} for {tid!r}"
            )
        return current

    def _check_timeout(self, timeout_ms: int) -> None:
        if not 1 <= timeout_ms <= self.max_timeout_ms:
            raise InvalidTransactionTimeoutError(
                f"transaction.timeout.ms={timeout_ms}; accepted: 1 to the broker's "
                f"transaction_max_timeout_ms={self.max_timeout_ms}"
            )

    # -- InitProducerId -----------------------------------------------------------
    def init_producer(
        self,
        tid: str,
        timeout_ms: int,
        producer_id: int = -1,
        producer_epoch: int = -1,
    ) -> Producer:
        """A producer id and a new epoch for ``tid``; an open transaction is aborted first.

        ``producer_id``/``producer_epoch`` (KIP-360, -1 if not given) must be the
        current ones: an older epoch is fenced.
        """
        self._check_timeout(timeout_ms)
        if producer_id >= 0:
            # KIP-360: the caller names the producer id and epoch it holds; checked against
            # the state before any abort below bumps the epoch
            before = self.state(tid)
            if before is not None:
                if int(before["pid"]) != producer_id:
                    raise InvalidProducerIdMappingError(
                        f"transactional id {tid!r} belongs to producer {before['pid']}"
                    )
                if producer_epoch != int(before["epoch"]):
                    raise ProducerFencedError(
                        f"producer {producer_id} epoch {producer_epoch} of {tid!r} is fenced "
                        f"by epoch {before['epoch']}"
                    )
        self._await_pending(tid, errors=False)
        for _ in range(10):
            current = self.state(tid)
            if current is not None and current["state"] == ONGOING:
                self._begin_end(tid, current, commit=False, bump=True)
                current = self.state(tid)
            if current is not None and current["state"] in (PREPARE_COMMIT, PREPARE_ABORT):
                self.complete(tid)
                continue
            fresh_pid = -1
            if current is None or int(current["epoch"]) >= MAX_EPOCH - 1:
                fresh_pid = int(self.allocate())

            def change(now: dict[str, Any] | None, fresh_pid: int = fresh_pid) -> dict[str, Any]:
                if now is not None and now["state"] not in (EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT):
                    raise ConcurrentTransactionsError(
                        f"transactional id {tid!r} is ending a transaction; retry"
                    )
                if now is not None and producer_id >= 0 and int(now["pid"]) != producer_id:
                    raise InvalidProducerIdMappingError(
                        f"transactional id {tid!r} belongs to producer {now['pid']}"
                    )
                if now is None or int(now["epoch"]) >= MAX_EPOCH - 1:
                    if fresh_pid < 0:
                        raise ConcurrentTransactionsError(f"{tid!r} changed meanwhile; retry")
                    pid, epoch = fresh_pid, 0
                else:
                    pid, epoch = int(now["pid"]), int(now["epoch"]) + 1
                return {
                    "pid": pid,
                    "epoch": epoch,
                    "state": EMPTY,
                    "n": int(now["n"]) if now is not None else 0,
                    "timeout_ms": int(timeout_ms),
                    "started_ms": -1,
                    "partitions": [],
                    "groups": {},
                }

            try:
                after = self._change(tid, change)
            except ConcurrentTransactionsError:
                continue
            assert after is not None
            log.info(
                "transactional producer initialised",
                extra=fields(transactional_id=tid, pid=after["pid"], epoch=after["epoch"]),
            )
            return Producer(int(after["pid"]), int(after["epoch"]))
        raise ConcurrentTransactionsError(f"transactional id {tid!r} is busy; retry")

    # -- AddPartitionsToTxn / AddOffsetsToTxn / TxnOffsetCommit ---------------------
    def _begin_or_extend(
        self,
        tid: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Sequence[tuple[str, int]] = (),
        group: str | None = None,
    ) -> dict[str, Any]:
        """Begin a transaction (if none is ongoing) or extend it; the state after.

        A previous transaction whose markers and offsets this broker wrote is
        over even while its Complete change is pending: the new state replaces
        it (the Complete change then finds nothing to do).
        """

        def change(current: dict[str, Any] | None) -> dict[str, Any] | None:
            current = self._check_producer(tid, current, producer_id, producer_epoch)
            state = current["state"]
            self._check_can_begin(tid, current)
            if state != ONGOING:
                current = {
                    **current,
                    "state": ONGOING,
                    "n": int(current["n"]) + 1,
                    "started_ms": now_ms(),
                    "partitions": [],
                    "groups": {},
                }
                changed = True
            else:
                changed = False
            known = {(t, int(p)) for t, p in current["partitions"]}
            new = [(t, int(p)) for t, p in partitions if (t, int(p)) not in known]
            if new:
                current = {**current, "partitions": [*current["partitions"], *map(list, new)]}
                changed = True
            if group is not None and group not in current["groups"]:
                current = {**current, "groups": {**current["groups"], group: []}}
                changed = True
            return current if changed else None

        after = self._change(tid, change)
        assert after is not None
        return after

    def add_partitions(
        self, tid: str, producer_id: int, producer_epoch: int, partitions: Iterable[tuple[str, int]]
    ) -> dict[tuple[str, int], SparklogError | None]:
        """Add partitions to the producer's transaction: each partition's error or None."""
        self._await_added(tid)
        wanted = list(dict.fromkeys((str(t), int(p)) for t, p in partitions))
        errors: dict[tuple[str, int], SparklogError | None] = {}
        image = self.broker.root.metadata.image()
        valid = []
        for topic, p in wanted:
            doc = image.topics.get(topic)
            if doc is None or not 0 <= p < int(doc.get("partitions", 0)):
                errors[(topic, p)] = UnknownTopicOrPartitionError(f"{topic}-{p} does not exist")
            else:
                valid.append((topic, p))
        if errors:  # Kafka: the whole request fails; the others get OPERATION_NOT_ATTEMPTED
            return errors | {tp: None for tp in valid}
        cluster = self.broker.cluster
        if cluster is not None and all(cluster.is_leader(t, p) for t, p in valid):
            self._add_in_background(tid, producer_id, producer_epoch, valid)
        else:
            self._begin_or_extend(tid, producer_id, producer_epoch, valid)
        return {tp: None for tp in valid}

    def _add_in_background(
        self, tid: str, producer_id: int, producer_epoch: int, partitions: Sequence[tuple[str, int]]
    ) -> None:
        """Check the request against the state now, write its change in the background.

        The checks are those the step repeats (an answer here is what the
        step will do unless another broker changed ``tid`` meanwhile, and
        then the partitions' records are refused with that change's error).
        """
        current = self._check_producer(tid, self.state(tid), producer_id, producer_epoch)
        self._check_can_begin(tid, current)
        if current["state"] == ONGOING and all(
            [t, p] in current["partitions"] for t, p in partitions
        ):
            return  # added already (a retry)
        with self._lock:
            try:
                added = self._adder.submit(
                    self._begin_or_extend, tid, producer_id, producer_epoch, partitions
                )
            except RuntimeError:  # the broker is stopping: written here instead
                added = None
            if added is not None:
                self._adding[tid] = added
        if added is None:
            self._begin_or_extend(tid, producer_id, producer_epoch, partitions)
            return
        added.add_done_callback(lambda done: self._added(tid, done))

    def _added(self, tid: str, done: Future[Any]) -> None:
        """A background add ended: forgotten if it succeeded; a failure waits to be seen."""
        if done.exception() is None:
            with self._lock:
                if self._adding.get(tid) is done:
                    del self._adding[tid]
        else:
            log.warning(
                "adding partitions to a transaction failed",
                extra=fields(transactional_id=tid, error=str(done.exception())),
            )

    def _await_added(self, tid: str | None, *, errors: bool = True) -> None:
        """Wait for ``tid``'s background add; its error (once, if ``errors``) if it failed."""
        if tid is None:
            return
        with self._lock:
            pending = self._adding.get(tid)
        if pending is None:
            return
        try:
            if errors:
                pending.result()
            else:
                pending.exception()
        finally:
            with self._lock:
                if self._adding.get(tid) is pending:
                    del self._adding[tid]

    def add_offsets(self, tid: str, producer_id: int, producer_epoch: int, group: str) -> None:
        self._await_added(tid)
        self._begin_or_extend(tid, producer_id, producer_epoch, group=group)

    def txn_offset_commit(
        self,
        tid: str,
        group: str,
        producer_id: int,
        producer_epoch: int,
        offsets: Mapping[tuple[str, int], tuple[int, str]],
    ) -> None:
        """Hold ``offsets`` in the group's log for the producer's open transaction: they
        become the group's at its commit.  A journal step of the group's coordinator
        (Kafka keeps them in ``__consumer_offsets`` the same way), not a change of the
        id's log: the transaction's state already names the group (AddOffsetsToTxn)."""
        self._await_added(tid)
        current = self._open_with_group(tid, group, producer_id, producer_epoch)
        root = self.broker.root
        held = {
            TopicPartition(str(t), int(p)): (int(o), m or "") for (t, p), (o, m) in offsets.items()
        }
        topic_ids = self._topic_ids({tp.topic for tp in held})
        while True:
            txn = int(current["n"])
            root.groups.commit_transactional(
                group, producer_id, producer_epoch, txn, held, topic_ids=topic_ids
            )
            # the state read may have been behind (the producer's previous transaction
            # still open in it), or an abort (the timeout) may have ended this one between
            # the check and the step, its end finding nothing held: the id's log decides,
            # and a newer transaction's step replaces the one written
            after = self.state(tid, fresh=True)
            if after is not None and int(after["n"]) == txn and after["state"] == ONGOING:
                return
            if (
                after is not None
                and int(after["n"]) > txn
                and _open_with(after, group, producer_id, producer_epoch)
            ):
                current = after
                continue
            root.groups.end_transaction(group, producer_id, txn, commit=False)
            raise InvalidTxnStateError(
                f"transactional id {tid!r}: transaction {txn} ended while its offsets for "
                f"group {group!r} were written; they were dropped"
            )

    def _open_with_group(
        self, tid: str, group: str, producer_id: int, producer_epoch: int
    ) -> dict[str, Any]:
        """The producer's ongoing transaction that names ``group`` (AddOffsetsToTxn), as
        this broker holds it, or as the id's log has it if that is behind; else raise."""
        found = self.state(tid)
        if found is not None and _open_with(found, group, producer_id, producer_epoch):
            return found
        current = self._check_producer(
            tid, self.state(tid, fresh=True), producer_id, producer_epoch
        )
        if current["state"] != ONGOING or group not in current["groups"]:
            raise InvalidTxnStateError(
                f"transactional id {tid!r} has no ongoing transaction with group {group!r} "
                f"(state {current['state']}); call AddOffsetsToTxn first"
            )
        return current

    # -- produce verification ------------------------------------------------------
    def _transactional_id_of(self, image: MetadataImage, producer_id: int) -> str | None:
        with self._lock:
            if self._index_version != image.version:
                self._by_pid = {int(v["pid"]): k for k, v in image.transactional_ids.items()}
                self._index_version = image.version
            return self._by_pid.get(producer_id)

    def verify(
        self,
        producer_id: int,
        producer_epoch: int,
        topic: str,
        partition: int,
        *,
        ended: int = -1,
    ) -> int:
        """The number of the open transaction a transactional batch belongs to, or raise.

        The partition must have been added to the producer's ongoing
        transaction (KIP-890); an older epoch is a zombie's.  ``ended`` is the
        number of the producer's last transaction the partition has a marker
        for: a state still showing that one ongoing is older than the
        transaction (its coordinator may be another broker), so it is read
        again before anything is refused.

        A broker that does not coordinate the id keeps the answer per (producer,
        epoch, partition) until the partition has the marker of its transaction
        (``ended`` reaches it; the produce path asks again with it): a
        transaction's batches after its first are verified without a request.  The producer id's
        transactional id comes from the registry (the metadata image); the state
        from this broker's memory when it coordinates the id, else from the
        coordinator (:meth:`_state_for_verify`).
        """
        key = (producer_id, producer_epoch, topic, partition)
        for fresh in (False, True):
            image = self.image(fresh)
            tid = self._transactional_id_of(image, producer_id)
            if tid is None:
                continue
            if tid in self._adding:
                self._await_added(tid)  # its records wait for the add's step
            if not fresh and not self.transactions.coordinates(tid):
                with self._lock:
                    known = self._verified.get(key)
                if known is not None and known > ended:
                    return known
            state = self._state_for_verify(tid, fresh=fresh)
            if state is None or int(state["n"]) <= ended:
                continue
            if producer_epoch < int(state["epoch"]):
                self._refused(tid, topic, partition, "fenced by a newer epoch")
                raise InvalidProducerEpochError(
                    f"producer {producer_id} epoch {producer_epoch} is fenced by epoch "
                    f"{state['epoch']} of transactional id {tid!r}"
                )
            if (
                state["state"] == ONGOING
                and producer_epoch == int(state["epoch"])
                and [topic, partition] in state["partitions"]
            ):
                with self._lock:
                    if len(self._verified) >= VERIFIED_KEPT:
                        self._verified.clear()
                    self._verified[key] = int(state["n"])
                return int(state["n"])
        self._refused(tid, topic, partition, "not in an ongoing transaction of the producer")
        raise InvalidTxnStateError(
            f"producer {producer_id}: {topic}-{partition} is not in an ongoing transaction of "
            "this producer (AddPartitionsToTxn first)"
        )

    def _state_for_verify(self, tid: str, *, fresh: bool) -> dict[str, Any] | None:
        """``tid``'s state for a partition's verification: this broker's memory when it
        coordinates the id (unless ``fresh``), else the coordinator's answer (Flight
        ``transaction_state``, as markers go the other way), else (the coordinator
        cannot be reached or refused) the id's log and journal tail read here."""
        cluster = self.broker.cluster
        coordinator = cluster.transaction_coordinator(tid) if cluster is not None else None
        if (
            coordinator is None
            or coordinator.broker_id == self.broker.config.broker_id
            or not self.broker.peers.can_log_in
        ):
            return self.state(tid, fresh=fresh)
        try:
            answer = self.broker.peers.call(
                coordinator.location, actions.TRANSACTION_STATE, transactional_id=tid
            )
        except Exception as exc:  # unreachable, refused, stopping: read the id's log here
            log.info(
                "transaction state read from the id's log",
                extra=fields(
                    transactional_id=tid, coordinator=coordinator.broker_id, error=str(exc)
                ),
            )
            return self.state(tid, fresh=True)
        self.asked += 1
        return dict(answer) if answer is not None else None

    @staticmethod
    def _refused(tid: str | None, topic: str, partition: int, reason: str) -> None:
        """A transactional request refused on the newest state: one WARNING saying why."""
        log.warning(
            "transactional request refused",
            extra=fields(transactional_id=tid, topic=topic, partition=partition, reason=reason),
        )

    # -- EndTxn ---------------------------------------------------------------------
    def end(self, tid: str, producer_id: int, producer_epoch: int, commit: bool) -> None:
        """Commit or abort the producer's transaction: markers, offsets, then Complete."""
        self._await_pending(tid)
        current = self._check_producer(tid, self.state(tid), producer_id, producer_epoch)
        state = current["state"]
        wanted = PREPARE_COMMIT if commit else PREPARE_ABORT
        done = COMPLETE_COMMIT if commit else COMPLETE_ABORT
        if state == ONGOING:
            self._begin_end(tid, current, commit=commit, bump=False, complete_later=True)
            return
        if state == wanted:
            self.complete(tid)
            return
        if state == done or (state == EMPTY and not commit):
            return  # a retry of an EndTxn that completed (or an abort of nothing)
        raise InvalidTxnStateError(
            f"transactional id {tid!r} is {state}: cannot {'commit' if commit else 'abort'}"
        )

    def _begin_end(
        self,
        tid: str,
        seen: dict[str, Any],
        *,
        commit: bool,
        bump: bool,
        complete_later: bool = False,
    ) -> None:
        """Write the decision (Prepare*), then complete it; ``bump`` fences the producer.

        ``complete_later`` returns once the markers and offsets are written and
        leaves the Complete change to the background (EndTxn's answer).
        """
        wanted = PREPARE_COMMIT if commit else PREPARE_ABORT

        def change(current: dict[str, Any] | None) -> dict[str, Any] | None:
            if current is None or current["state"] != ONGOING:
                return None
            if int(current["pid"]) != int(seen["pid"]) or int(current["n"]) != int(seen["n"]):
                return None
            epoch = int(current["epoch"]) + (1 if bump else 0)
            return {**current, "state": wanted, "epoch": epoch}

        self._change(tid, change)
        self.complete(tid, later=complete_later)

    def _await_complete(self, tid: str) -> None:
        """Write ``tid``'s Complete change now if this broker left it for later.

        The note of it stays until a pass finds the Prepare state gone (see
        :meth:`_complete_left_for_later`): a transaction beginning meanwhile may
        still be building its record on the Prepare state, and must not be refused.
        """
        current = self.state(tid)
        if current is not None and self._ended_here(tid, current):
            self._write_complete(tid, current)

    def _complete_left_for_later(self) -> None:
        """Drop the notes whose Prepare state is gone (a note only ever matches its own
        transaction's Prepare state: numbers only grow), write the Complete changes of
        the others; a failure is left to the orphan sweep."""
        for tid, n in list(self._ended.items()):
            current = self.state(tid)
            if current is None or not self._ended_here(tid, current):
                with self._lock:
                    if self._ended.get(tid) == n:
                        del self._ended[tid]
                continue
            try:
                self._write_complete(tid, current)
            except SparklogError as exc:
                log.warning(
                    "writing a transaction's Complete change failed",
                    extra=fields(transactional_id=tid, error=str(exc)),
                )

    def _ended_here(self, tid: str, state: dict[str, Any]) -> bool:
        """Whether ``state`` is a Prepare state whose markers and offsets this broker wrote
        (only its Complete change is left): the next transaction may begin over it."""
        with self._lock:
            n = self._ended.get(tid)
        prepared = state["state"] in (PREPARE_COMMIT, PREPARE_ABORT)
        return n is not None and prepared and int(state["n"]) == n

    def _check_can_begin(self, tid: str, state: dict[str, Any]) -> None:
        """Refuse to begin or extend a transaction while another broker's end is pending."""
        if state["state"] in (PREPARE_COMMIT, PREPARE_ABORT) and not self._ended_here(tid, state):
            raise ConcurrentTransactionsError(
                f"transactional id {tid!r}: the previous transaction is still ending; retry"
            )

    def _await_pending(self, tid: str, *, errors: bool = True) -> None:
        """Wait for what this broker writes for ``tid`` in the background: add, end.

        A failed add raises its error here once (``errors``): the call after it
        is the one the client made believing the add had succeeded.
        """
        self._await_added(tid, errors=errors)
        self._await_complete(tid)

    def complete(self, tid: str, *, later: bool = False) -> None:
        """Finish a PrepareCommit/PrepareAbort: markers to every partition, offsets, Complete.

        ``later``: the Complete change is written in the background (see the module doc).
        """
        current = self.state(tid)
        if current is None or current["state"] not in (PREPARE_COMMIT, PREPARE_ABORT):
            return
        commit = current["state"] == PREPARE_COMMIT
        marker = Marker(int(current["pid"]), int(current["epoch"]), int(current["n"]), commit)
        by_topic: dict[str, list[int]] = {}
        for topic, p in current["partitions"]:
            by_topic.setdefault(topic, []).append(int(p))
        for topic, parts in by_topic.items():
            try:
                end_transactions(self.broker, topic, {p: marker for p in parts})
            except UnknownTopicOrPartitionError:
                continue  # deleted meanwhile: nothing left to mark
        for group, rows in current["groups"].items():
            if commit and rows:  # held in the state by a broker before groups held them
                self._commit_offsets(group, rows)
            self.broker.root.groups.end_transaction(
                group, int(current["pid"]), int(current["n"]), commit=commit
            )
        if later:
            with self._lock:
                self._ended[tid] = int(current["n"])
            return
        self._write_complete(tid, current)

    def _write_complete(self, tid: str, current: dict[str, Any]) -> None:
        commit = current["state"] == PREPARE_COMMIT

        def change(now: dict[str, Any] | None) -> dict[str, Any] | None:
            if now is None or now["state"] != current["state"] or now["n"] != current["n"]:
                return None
            if now["pid"] != current["pid"]:
                return None
            return {
                **now,
                "state": COMPLETE_COMMIT if commit else COMPLETE_ABORT,
                "partitions": [],
                "groups": {},
            }

        self._change(tid, change)
        log.info(
            "transaction ended",
            extra=fields(
                transactional_id=tid, committed=commit, partitions=len(current["partitions"])
            ),
        )

    def _commit_offsets(self, group: str, rows: Sequence[Sequence[Any]]) -> None:
        root = self.broker.root
        offsets = {TopicPartition(str(t), int(p)): int(o) for t, p, o, _m in rows}
        metadata = str(rows[-1][3] or "")
        topic_ids = self._topic_ids({str(t) for t, *_ in rows})
        # straight to the group's log (no member or generation: the producer is not one);
        # OffsetFetch reads the log, so the offsets are visible from here on
        root.groups.commit(group, offsets, metadata=metadata, topic_ids=topic_ids)

    def _topic_ids(self, topics: Iterable[str]) -> dict[str, str]:
        """Each topic's id now ('' for one that does not exist)."""
        found = {}
        for topic in topics:
            try:
                found[topic] = self.broker.root.describe_topic(topic).topic_id
            except SparklogError:
                found[topic] = ""
        return found

    # -- operators ------------------------------------------------------------------
    def abort(self, tid: str) -> None:
        """Abort ``tid``'s ongoing transaction now (``sparklog transactions abort``)."""
        self._await_pending(tid, errors=False)
        current = self.state(tid)
        if current is None:
            raise TransactionalIdNotFoundError(f"no transactional id {tid!r}")
        if current["state"] == ONGOING:
            self._begin_end(tid, current, commit=False, bump=True)
        else:
            self.complete(tid)

    def list(self) -> dict[str, dict[str, Any]]:
        """Every registered transactional id's state, as its log has it (any broker may be
        asked, and the ids' coordinators may be others: a probe of the metadata log and of
        each id's log, never a stale image)."""
        return transaction_states(self.image(fresh=True).transactional_ids, self.transactions)

    # -- the background pass ---------------------------------------------------------
    def _tick_state(self, tid: str) -> dict[str, Any] | None:
        """The state the tick looks at: from memory when ``tid``'s log is leased to our
        journal; else read, and for an id with no transaction open, read again only
        every :data:`QUIET_RECHECK_S` (None until then)."""
        held = self.transactions.held_state(tid)
        if held is not None:
            return held
        clock = time.monotonic()
        with self._lock:
            if self._quiet_until.get(tid, 0.0) > clock:
                return None
        state = self.state(tid, fresh=True)
        if state is not None and state["state"] in (EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT):
            with self._lock:
                self._quiet_until[tid] = clock + QUIET_RECHECK_S
        return state

    def tick(self, mine: Any) -> None:
        """Abort timed-out transactions and finish orphaned ones, of the ids ``mine(tid)``;
        write the Complete changes this broker left for later and nothing superseded."""
        self._complete_left_for_later()
        now = now_ms()
        for tid in list(self.image().transactional_ids):
            if not mine(tid):
                continue
            try:
                state = self._tick_state(tid)
                if state is None:
                    continue
                if state["state"] == ONGOING:
                    if now - int(state["started_ms"]) > int(state["timeout_ms"]):
                        log.info(
                            "transaction timed out: aborting",
                            extra=fields(transactional_id=tid, timeout_ms=state["timeout_ms"]),
                        )
                        self._begin_end(tid, state, commit=False, bump=True)
                elif (
                    state["state"] in (PREPARE_COMMIT, PREPARE_ABORT)
                    and now - int(state.get("updated_ms", 0)) > ORPHAN_GRACE_MS
                ):
                    self.complete(tid)
            except SparklogError as exc:
                log.warning(
                    "transaction upkeep failed", extra=fields(transactional_id=tid, error=str(exc))
                )
