"""Transaction-state writes the coordinator answers before or leaves for later (each a
step of the transactional id's log, journalled by its coordinator; none is a
metadata-log append).

* EndTxn answers once the markers and offsets are written; the Complete step
  is left to the broker's transactions pass (its tick), and a transaction the
  producer begins before then replaces the ended one's Prepare state at once:
  the next AddPartitionsToTxn neither waits for the record nor refuses with
  CONCURRENT_TRANSACTIONS.  A Prepare state this broker did not finish still
  refuses.
* AddPartitionsToTxn for partitions the broker leads answers once checked and
  appends its record in the background; a transactional batch for such a
  partition must wait for that append before it is accepted (KIP-890: no
  record is committed to a partition its transaction's state does not list),
  and a failed append fails those records instead.

Stand-ins (everything else is a real in-process broker on a local root): the
broker's own transactions pass is held off where a test needs the Prepare
state to stay (the test runs the pass itself), and the background append is
held back on an event (and made to fail as an unreachable store would), so a
batch surely arrives while the record is not yet in the log.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from sparklog.broker_lite.config import BrokerConfig
from sparklog.broker_lite.service import Broker
from sparklog.broker_lite.transactions.coordinator import TransactionCoordinator
from sparklog.errors import (
    ConcurrentTransactionsError,
    InvalidTxnStateError,
    StoreUnavailableError,
)


@pytest.fixture
def broker(tmp_path) -> Iterator[Broker]:
    made = Broker(BrokerConfig(root=f"file://{tmp_path}/root", cleaner_interval_ms=0))
    made.start("127.0.0.1:1")
    try:
        yield made
    finally:
        made.close()


def _producer(broker: Broker, partitions: int) -> tuple[TransactionCoordinator, int, int]:
    """(coordinator, producer id, epoch) of transactional id "tx", topic "t" created."""
    broker.create_topic("t", partitions)
    coordinator = broker.transactions
    producer = coordinator.init_producer("tx", 60_000)
    return coordinator, producer.producer_id, producer.producer_epoch


def test_the_next_transaction_begins_over_the_previous_prepare_state(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    tick = TransactionCoordinator.tick
    monkeypatch.setattr(TransactionCoordinator, "tick", lambda self, mine: None)
    coordinator, pid, epoch = _producer(broker, 1)
    coordinator.add_partitions("tx", pid, epoch, [("t", 0)])
    assert coordinator.verify(pid, epoch, "t", 0) == 1
    coordinator.end("tx", pid, epoch, commit=True)  # answers; the Complete record waits
    assert coordinator.state("tx")["state"] == "PrepareCommit"  # type: ignore[index]
    version = broker.root.metadata.image().version
    steps = broker.root.transactions.unfolded_steps("tx")
    # the next transaction, over the Prepare state: one step, no Complete before it
    assert coordinator.add_partitions("tx", pid, epoch, [("t", 0)]) == {("t", 0): None}
    assert coordinator.verify(pid, epoch, "t", 0) == 2  # (waits for the add's step)
    state = coordinator.state("tx")
    assert state is not None and state["state"] == "Ongoing" and state["n"] == 2
    assert broker.root.transactions.unfolded_steps("tx") == steps + 1
    assert broker.root.metadata.image().version == version  # no metadata-log append
    tick(coordinator, lambda tid: False)  # nothing left to complete: the record is replaced
    assert coordinator.state("tx") == state
    coordinator.end("tx", pid, epoch, commit=False)
    assert coordinator.state("tx")["state"] == "PrepareAbort"  # type: ignore[index]
    tick(coordinator, lambda tid: False)  # the pass writes what nothing replaced
    state = coordinator.state("tx")
    assert state is not None and state["state"] == "CompleteAbort" and state["n"] == 2


def test_the_next_transaction_begins_while_the_pass_writes_the_complete_record(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pass's Complete record and the producer's next transaction may race: the
    next AddPartitionsToTxn must not be refused while the record is being written
    (the benchmark saw CONCURRENT_TRANSACTIONS when the pass dropped its note first)."""
    tick = TransactionCoordinator.tick
    monkeypatch.setattr(TransactionCoordinator, "tick", lambda self, mine: None)
    coordinator, pid, epoch = _producer(broker, 1)
    coordinator.add_partitions("tx", pid, epoch, [("t", 0)])
    assert coordinator.verify(pid, epoch, "t", 0) == 1
    coordinator.end("tx", pid, epoch, commit=True)
    writing, release = threading.Event(), threading.Event()
    write_complete = TransactionCoordinator._write_complete

    def held_back(self: TransactionCoordinator, tid: str, current: dict[str, Any]) -> None:
        writing.set()
        assert release.wait(30)
        write_complete(self, tid, current)

    monkeypatch.setattr(TransactionCoordinator, "_write_complete", held_back)
    passing = threading.Thread(target=tick, args=(coordinator, lambda tid: False))
    passing.start()
    try:
        assert writing.wait(30)  # the pass is writing the Complete record
        assert coordinator.add_partitions("tx", pid, epoch, [("t", 0)]) == {("t", 0): None}
        assert coordinator.verify(pid, epoch, "t", 0) == 2
    finally:
        release.set()
        passing.join(30)
    state = coordinator.state("tx")  # the record, written after, found nothing to do
    assert state is not None and state["state"] == "Ongoing" and state["n"] == 2


def test_a_prepare_state_left_by_another_coordinator_is_still_refused(broker: Broker) -> None:
    """Only the markers this broker wrote let a transaction begin over a Prepare state."""
    coordinator, pid, epoch = _producer(broker, 1)
    coordinator.add_partitions("tx", pid, epoch, [("t", 0)])
    assert coordinator.verify(pid, epoch, "t", 0) == 1
    # the decision as a coordinator that died before its markers left it
    coordinator._change("tx", lambda now: {**now, "state": "PrepareCommit"})
    with pytest.raises(ConcurrentTransactionsError):
        coordinator.add_partitions("tx", pid, epoch, [("t", 0)])


def _hold_back_adds(
    monkeypatch: pytest.MonkeyPatch, fail: bool = False
) -> tuple[threading.Event, threading.Event]:
    """(appending, release): the background add signals ``appending`` and waits for
    ``release``; with ``fail`` it then fails as an unreachable store would."""
    appending = threading.Event()
    release = threading.Event()
    begin_or_extend = TransactionCoordinator._begin_or_extend

    def held_back(self: TransactionCoordinator, *args: Any, **kwargs: Any) -> Any:
        if threading.current_thread().name.startswith("txn-add"):
            appending.set()
            assert release.wait(30)
            if fail:
                raise StoreUnavailableError("the store did not answer (held back by the test)")
        return begin_or_extend(self, *args, **kwargs)

    monkeypatch.setattr(TransactionCoordinator, "_begin_or_extend", held_back)
    return appending, release


def test_a_batch_waits_for_its_partitions_add_record(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    coordinator, pid, epoch = _producer(broker, 2)
    appending, release = _hold_back_adds(monkeypatch)
    # answered while the record is still being appended
    assert coordinator.add_partitions("tx", pid, epoch, [("t", 0)]) == {("t", 0): None}
    assert appending.wait(30)
    assert coordinator.state("tx")["state"] == "Empty"  # type: ignore[index]
    numbers: list[int] = []
    verifying = threading.Thread(
        target=lambda: numbers.append(coordinator.verify(pid, epoch, "t", 0))
    )
    verifying.start()
    verifying.join(0.5)  # (a refusal or an answer would end it at once)
    assert verifying.is_alive(), "the batch was admitted before its partition's add record"
    release.set()
    verifying.join(30)
    state = coordinator.state("tx")
    assert state is not None and state["state"] == "Ongoing"
    assert state["partitions"] == [["t", 0]] and numbers == [state["n"]]
    # a partition that was never added is still refused
    with pytest.raises(InvalidTxnStateError):
        coordinator.verify(pid, epoch, "t", 1)


def test_a_failed_add_record_fails_the_batch_and_the_transaction_can_be_aborted(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    coordinator, pid, epoch = _producer(broker, 1)
    appending, release = _hold_back_adds(monkeypatch, fail=True)
    coordinator.add_partitions("tx", pid, epoch, [("t", 0)])
    assert appending.wait(30)
    release.set()
    with pytest.raises(StoreUnavailableError):
        coordinator.verify(pid, epoch, "t", 0)
    with pytest.raises(InvalidTxnStateError):  # the failure is told once; then the state
        coordinator.verify(pid, epoch, "t", 0)
    coordinator.end("tx", pid, epoch, commit=False)  # the client aborts: nothing to end
    assert coordinator.state("tx")["state"] == "Empty"  # type: ignore[index]


def test_the_cleaner_prunes_the_logs_of_the_ids_the_broker_coordinates(tmp_path) -> None:
    """An id's log gains a fold commit per fold interval while it is busy: the broker's
    cleaner pass prunes it as it prunes its groups' logs."""
    from sparklog.broker_lite.cleaner import Cleaner
    from sparklog.clock import now_ms

    made = Broker(
        BrokerConfig(root=f"file://{tmp_path}/root", cleaner_interval_ms=0, snapshot_interval=4)
    )
    made.start("127.0.0.1:1")
    try:
        coordinator, pid, epoch = _producer(made, 1)
        txns = made.root.transactions
        for _ in range(12):  # each transaction's steps folded: a commit of the id's log
            coordinator.add_partitions("tx", pid, epoch, [("t", 0)])
            coordinator.end("tx", pid, epoch, commit=False)
            txns.fold_due(0, everything=True)
        prefix = txns.log("tx")[0].prefix
        before = len(made.root.store.list_names(prefix))
        cleaner = Cleaner(made.upkeep, 60_000)
        cleaner.clock_ms = lambda: now_ms() + 24 * 3_600_000
        assert (
            cleaner.run_once()["pruned_files"]
            >= before - len(made.root.store.list_names(prefix))
            > 5
        )
        assert coordinator.state("tx", fresh=True)["n"] == 12  # type: ignore[index]
    finally:
        made.close()


def test_an_older_brokers_open_transaction_survives_a_call_that_changes_nothing(
    broker: Broker,
) -> None:
    """Upgrade: an id whose whole state an older broker wrote into the metadata log keeps
    it there until a change moves it into the id's log; a call that changes nothing (an
    AddOffsetsToTxn repeated) leaves the record as it is, the transaction open."""
    from sparklog.clock import now_ms

    broker.create_topic("t", 1)
    old_form = {
        "pid": 900_000,
        "epoch": 1,
        "state": "Ongoing",
        "n": 5,
        "timeout_ms": 60_000,
        "started_ms": now_ms(),
        "updated_ms": now_ms(),
        "partitions": [["t", 0]],
        "groups": {"g": []},
    }
    record = {"type": "transactional_id", "key": "tx-old", "value": old_form}
    broker.root.metadata.append(lambda image: [record])
    coordinator = broker.transactions
    coordinator.add_offsets("tx-old", 900_000, 1, "g")  # the group is in it already
    assert broker.root.metadata.refresh().transactional_ids["tx-old"] == old_form
    assert coordinator.verify(900_000, 1, "t", 0) == 5
    coordinator.end("tx-old", 900_000, 1, commit=True)  # a change: moved into the id's log
    registry = broker.root.metadata.refresh().transactional_ids["tx-old"]
    assert registry == {"pid": 900_000, "epoch": 1, "timeout_ms": 60_000}
    state = broker.root.transactions.state("tx-old")
    assert state is not None and (state["state"], state["n"]) in (
        ("PrepareCommit", 5),
        ("CompleteCommit", 5),
    )


def test_the_pass_reads_the_ids_it_coordinates_from_memory(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The transactions pass walks the registered ids this broker coordinates: an id
    whose log names this broker's journal is looked at in memory (no request); another
    (its state written by another process) is read, and with no transaction open not
    again before :data:`QUIET_RECHECK_S`."""
    from sparklog.storage import open_root
    from tests.support.counting_store import KINDS

    tick = TransactionCoordinator.tick
    monkeypatch.setattr(TransactionCoordinator, "tick", lambda self, mine: None)
    coordinator, pid, epoch = _producer(broker, 1)
    coordinator.add_partitions("tx", pid, epoch, [("t", 0)])
    coordinator.end("tx", pid, epoch, commit=True)
    elsewhere = open_root(broker.config.root)
    elsewhere.transactions.write(
        "tx-elsewhere",
        lambda state: {"pid": 77, "epoch": 0, "state": "CompleteAbort", "n": 3},
    )
    registered = {"pid": 77, "epoch": 0, "timeout_ms": 60_000}
    record = {"type": "transactional_id", "key": "tx-elsewhere", "value": registered}
    elsewhere.metadata.append(lambda image: [record])
    broker.root.metadata.refresh()
    reads: list[str] = []
    store = broker.root.store
    for name in KINDS:
        call = getattr(store, name)

        def counted(key: Any, *args: Any, _call: Any = call, **kwargs: Any) -> Any:
            if str(key).startswith("transactions/"):
                reads.append(str(key))
            return _call(key, *args, **kwargs)

        monkeypatch.setattr(store, name, counted)
    get_many = store.get_many

    def counted_many(keys: Any) -> Any:
        keys = list(keys)
        reads.extend(str(key) for key in keys if str(key).startswith("transactions/"))
        return get_many(keys)

    monkeypatch.setattr(store, "get_many", counted_many)
    tick(coordinator, lambda tid: True)  # writes tx's Complete step (which probes its log)
    assert any(key.startswith("transactions/tx-elsewhere/") for key in reads)
    reads.clear()
    for _ in range(3):
        tick(coordinator, lambda tid: True)
    assert reads == []  # tx from memory; tx-elsewhere quiet since the first pass
    assert coordinator.state("tx")["state"] == "CompleteCommit"  # type: ignore[index]
