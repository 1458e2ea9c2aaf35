"""EndTxn's Complete record, written in the background, and the producer's next call.

The Complete record is held back here (its writer waits on an event, the one
stand-in in this test; everything else is a real in-process broker on a local
root) so the next AddPartitionsToTxn surely arrives while the ended transaction
is still in PrepareCommit: it must wait for the record and begin the next
transaction, not refuse with CONCURRENT_TRANSACTIONS.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from sparklog.broker_lite.config import BrokerConfig
from sparklog.broker_lite.service import Broker
from sparklog.broker_lite.transactions.coordinator import TransactionCoordinator


@pytest.fixture
def broker(tmp_path) -> Iterator[Broker]:
    made = Broker(BrokerConfig(root=f"file://{tmp_path}/root", cleaner_interval_ms=0))
    made.start("127.0.0.1:1")
    try:
        yield made
    finally:
        made.close()


def test_the_next_transaction_waits_for_the_previous_complete_record(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    broker.create_topic("t", 1)
    coordinator = broker.transactions
    released = threading.Event()
    writing = threading.Event()
    write_complete = TransactionCoordinator._write_complete

    def held_back(self: TransactionCoordinator, tid: str, current: dict[str, Any]) -> None:
        writing.set()
        assert released.wait(30)
        write_complete(self, tid, current)

    monkeypatch.setattr(TransactionCoordinator, "_write_complete", held_back)
    producer = coordinator.init_producer("tx", 60_000)
    pid, epoch = producer.producer_id, producer.producer_epoch
    coordinator.add_partitions("tx", pid, epoch, [("t", 0)])
    coordinator.end("tx", pid, epoch, commit=True)  # answers before the Complete record
    assert writing.wait(30)
    assert coordinator.state("tx")["state"] == "PrepareCommit"  # type: ignore[index]
    added: list[Any] = []
    adding = threading.Thread(
        target=lambda: added.append(coordinator.add_partitions("tx", pid, epoch, [("t", 0)]))
    )
    adding.start()
    adding.join(0.5)  # (a refusal would end it at once)
    assert adding.is_alive(), "AddPartitionsToTxn did not wait for the Complete record"
    released.set()
    adding.join(30)
    assert added == [{("t", 0): None}]
    state = coordinator.state("tx")
    assert state is not None and state["state"] == "Ongoing" and state["n"] == 2
