"""Transactions under broker SIGKILLs on three brokers, checked as a history (issue 36 item 6).

A confluent-kafka transactional producer runs transactions that each write one
record to every partition of a six-partition topic (so every transaction spans
partitions led by all three brokers, and its coordinator is usually not their
leader); every fourth is aborted on purpose after its records are written.  Each
transaction's invocation and completion are recorded: committed (the commit
returned), aborted (the abort returned) or unknown (the client gave up).  While
it runs, a read_committed consumer records what it reads, and a broker (in turn
each of the three) is SIGKILLed and restarted ``KILLS`` times.

The history is then checked, Jepsen-style, against what the partitions hold:

* **lost writes**: a committed transaction whose records are missing;
* **duplicates**: a record stored (or read) twice;
* **aborted reads**: a record of an aborted transaction seen by a read_committed
  reader, during the run or after it;
* **atomicity**: a transaction whose outcome is unknown is all there or not at all;
* **reads of open transactions**: everything the concurrent reader saw belongs
  to a transaction that was committed or is, in the end, all there;
* **last stable offset going back**: the concurrent reader's offsets per
  partition only grow (read_committed never hands out a record it later retracts).

With one writer, transactions are totally ordered and write-read edges only run
from earlier to later ones, so a G1c cycle would need a reader to see a later
transaction's record and miss an earlier committed one in the same partition:
checked as "per partition, the committed values read are in transaction order".
``SPARKLOG_TXN_CHAOS_KILLS`` runs the long form (bench/ and nightly runs).
"""

from __future__ import annotations

import os
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.brokers import Cluster

KILLS = int(os.environ.get("SPARKLOG_TXN_CHAOS_KILLS", "3"))
TRANSACTIONS_PER_KILL = 8
TOPIC = "history"
PARTITIONS = 6
#: librdkafka's "end of partition" event code
PARTITION_EOF = -191


@dataclass
class History:
    """What the writer was told about each transaction, and what a reader saw."""

    outcome: dict[int, str] = field(default_factory=dict)  # txn -> committed/aborted/unknown
    read: list[tuple[int, int, bytes]] = field(default_factory=list)  # (partition, offset, value)


def _values(txn: int) -> list[bytes]:
    return [b"%d/%d" % (txn, p) for p in range(PARTITIONS)]


def _txn_of(value: bytes) -> int:
    return int(value.split(b"/")[0])


def _new_producer(bootstrap: str) -> Producer:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": "history-writer",
            "transaction.timeout.ms": 10_000,
            "message.timeout.ms": 10_000,
        }
    )
    producer.init_transactions(60)
    return producer


def _run_transaction(producer: Producer, txn: int, history: History) -> Producer | None:
    """One transaction; its outcome noted. Returns None when the producer must be replaced."""
    abort = txn % 4 == 3
    try:
        producer.begin_transaction()
        for p, value in enumerate(_values(txn)):
            producer.produce(TOPIC, value=value, partition=p)
        if abort:
            producer.flush(30)
            producer.abort_transaction(30)
            history.outcome[txn] = "aborted"
        else:
            producer.commit_transaction(30)
            history.outcome[txn] = "committed"
        return producer
    except KafkaException as exc:
        error = exc.args[0]
        if error.txn_requires_abort():
            try:
                producer.abort_transaction(30)
                history.outcome[txn] = "aborted"
                return producer
            except KafkaException:
                pass
        history.outcome[txn] = "unknown"
        return None if error.fatal() or not error.retriable() else producer


def _reader(bootstrap: str, history: History, stop: threading.Event) -> None:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "history-reader",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    try:
        while not stop.is_set():
            message = consumer.poll(0.2)
            if message is None or message.error():
                continue
            history.read.append((message.partition(), message.offset(), message.value()))
    finally:
        consumer.close()


def _read_committed_to_end(bootstrap: str) -> dict[int, list[bytes]]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "history-final",
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    found: dict[int, list[bytes]] = defaultdict(list)
    ended: set[int] = set()
    deadline = time.monotonic() + 120
    try:
        while len(ended) < PARTITIONS and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error():
                if message.error().code() == PARTITION_EOF:
                    ended.add(message.partition())
                continue
            found[message.partition()].append(message.value())
    finally:
        consumer.close()
    assert len(ended) == PARTITIONS, "did not reach the end of every partition"
    return found


def check(history: History, stored: dict[int, list[bytes]]) -> list[str]:
    """Every anomaly the history shows (empty: none)."""
    problems = []
    by_txn: dict[int, list[int]] = defaultdict(list)
    for p, values in stored.items():
        for value in values:
            by_txn[_txn_of(value)].append(p)
        if len(values) != len(set(values)):
            problems.append(f"partition {p} stores a record twice")
        txns = [_txn_of(v) for v in values]
        if txns != sorted(txns):
            problems.append(f"partition {p}: transactions out of order (G1c): {txns}")
    for txn, outcome in sorted(history.outcome.items()):
        present = sorted(by_txn.get(txn, []))
        if outcome == "committed" and present != list(range(PARTITIONS)):
            problems.append(f"committed transaction {txn} lost records: holds {present}")
        if outcome == "aborted" and present:
            problems.append(f"aborted transaction {txn} is visible in {present}")
        if outcome == "unknown" and present not in ([], list(range(PARTITIONS))):
            problems.append(f"transaction {txn} is torn: only in {present}")
    visible = {t for t, ps in by_txn.items() if ps}
    seen_offsets: dict[int, int] = {}
    seen_values: set[bytes] = set()
    for p, offset, value in history.read:
        if value in seen_values:
            problems.append(f"the concurrent reader got {value!r} twice")
        seen_values.add(value)
        if offset <= seen_offsets.get(p, -1):
            problems.append(
                f"partition {p}: the reader went back from {seen_offsets[p]} to {offset}"
            )
        seen_offsets[p] = offset
        txn = _txn_of(value)
        if history.outcome.get(txn) == "aborted" or txn not in visible:
            problems.append(f"the concurrent reader saw {value!r} of a transaction never committed")
    return problems


def test_transactions_on_three_brokers_under_sigkills_keep_their_history(tmp_path) -> None:
    cluster = Cluster(tmp_path, f"file://{tmp_path}/root")
    try:
        for broker_id in range(3):
            cluster.start(broker_id)
        cluster.wait_live(3)
        bootstrap = cluster.kafka_bootstrap
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(timeout=30)
        cluster.wait_listed(TOPIC)
        history = History()
        stop = threading.Event()
        reader = threading.Thread(target=_reader, args=(bootstrap, history, stop), daemon=True)
        reader.start()
        producer: Producer | None = _new_producer(bootstrap)
        txn = 0
        for kill in range(KILLS + 1):
            for _ in range(TRANSACTIONS_PER_KILL):
                if producer is None:
                    producer = _new_producer(bootstrap)
                producer = _run_transaction(producer, txn, history)
                txn += 1
            if kill < KILLS:
                victim = kill % 3
                cluster.kill(victim)
                cluster.restart(victim)
        # a last, quiet stretch: the cluster is whole again and every transaction commits
        cluster.wait_live(3)
        quiet = range(txn, txn + TRANSACTIONS_PER_KILL)
        for txn in quiet:
            if producer is None:
                producer = _new_producer(bootstrap)
            producer = _run_transaction(producer, txn, history)
        stored = _read_committed_to_end(bootstrap)
        stop.set()
        reader.join(timeout=30)
        problems = check(history, stored)
        assert problems == [], "\n".join(problems)
        # not vacuous: transactions committed and aborted, and the quiet ones all went through
        outcomes = list(history.outcome.values())
        assert outcomes.count("committed") >= TRANSACTIONS_PER_KILL
        assert "aborted" in outcomes
        # a healthy cluster refuses no correct client: every quiet transaction did as asked
        wanted = {t: "aborted" if t % 4 == 3 else "committed" for t in quiet}
        assert {t: history.outcome[t] for t in quiet} == wanted
        assert history.read, "the concurrent reader read nothing"
    finally:
        cluster.stop_all()
