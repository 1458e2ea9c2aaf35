"""Kafka transactions with real clients: commit/abort, read_committed, zombie fencing, EOS.

confluent-kafka (librdkafka) transactional producers against broker processes;
consumers read with ``isolation.level`` read_committed and read_uncommitted.
"""

from __future__ import annotations

import json
import os
import pathlib
import random
import select
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.brokers import Cluster
from tests.support.kafkajs import install_kafkajs, run_script

#: librdkafka's "end of partition" event code
PARTITION_EOF = -191


def create(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(timeout=30)


def read_all(
    bootstrap: str, topic: str, partitions: int, level: str, timeout_s: float = 30
) -> tuple[list[bytes], list[int]]:
    """Every value readable at ``level`` up to the end of each partition, and the positions."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{level}-{random.random()}",
            "isolation.level": level,
            "enable.partition.eof": True,
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    values: list[bytes] = []
    ended: set[int] = set()
    deadline = time.monotonic() + timeout_s
    while len(ended) < partitions and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is None:
            continue
        if message.error():
            assert message.error().code() == PARTITION_EOF, message.error()
            ended.add(message.partition())
            continue
        values.append(message.value())
    positions = [consumer.position([TopicPartition(topic, p)])[0].offset for p in range(partitions)]
    consumer.close()
    assert len(ended) == partitions, "did not reach the end of every partition"
    return values, positions


def test_commit_and_abort_as_read_committed_and_read_uncommitted_readers_see_them(
    brokers: Cluster,
) -> None:
    bootstrap = brokers.kafka_bootstrap
    create(bootstrap, "txn", 2)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "t-basic"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(4):
        producer.produce("txn", value=b"committed-%d" % i, partition=i % 2)
    producer.commit_transaction(30)
    producer.begin_transaction()
    for i in range(3):
        producer.produce("txn", value=b"aborted-%d" % i, partition=i % 2)
    producer.flush(30)  # written to the partitions, then aborted
    producer.abort_transaction(30)
    producer.begin_transaction()
    producer.produce("txn", value=b"committed-last", partition=0)
    producer.commit_transaction(30)

    committed, positions = read_all(bootstrap, "txn", 2, "read_committed")
    assert sorted(committed) == sorted(
        [b"committed-%d" % i for i in range(4)] + [b"committed-last"]
    )
    everything, _ = read_all(bootstrap, "txn", 2, "read_uncommitted")
    assert sorted(everything) == sorted(committed + [b"aborted-%d" % i for i in range(3)])
    # 8 records + 3 markers in partition 0 (2 + 2 + 1 records), 3 records + 2 markers in 1
    assert positions == [8, 5]


def test_back_to_back_transactions_over_partitions_of_several_leaders_all_commit(
    brokers: Cluster,
) -> None:
    """On three brokers, most of a transaction's partitions are led by brokers other than
    its coordinator, whose images may still show the previous transaction ongoing: each
    leader re-reads the coordinator's state before it refuses (issue 36: 1 of 60 committed,
    the others refused with INVALID_TXN_STATE, then OUT_OF_ORDER_SEQUENCE_NUMBER)."""
    bootstrap = brokers.kafka_bootstrap
    create(bootstrap, "spread", 6)
    revoked = _revokes(brokers)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "t-spread"})
    producer.init_transactions(30)
    for t in range(20):
        producer.begin_transaction()
        for i in range(30):
            producer.produce("spread", value=b"%d-%d" % (t, i), partition=i % 6)
        producer.commit_transaction(30)  # raises if any of its records was refused
    values, positions = read_all(bootstrap, "spread", 6, "read_committed")
    assert sorted(values) == sorted(b"%d-%d" % (t, i) for t in range(20) for i in range(30))
    assert positions == [20 * 5 + 20] * 6  # 5 records and a marker per transaction
    refusals = [
        line
        for broker in brokers.brokers.values()
        for line in broker.log_lines()
        if line.get("msg") == "transactional request refused"
        and line.get("transactional_id") == "t-spread"
    ]
    assert refusals == []
    # a leader that is not the id's coordinator asked it (Flight transaction_state), and
    # never had to read the id's log itself
    messages = [
        line.get("msg") for broker in brokers.brokers.values() for line in broker.log_lines()
    ]
    assert "transaction ended" in messages  # (INFO lines are logged)
    assert "transaction state read from the id's log" not in messages
    # each leader wrote its partitions' markers through its journal (Kafka's WriteTxnMarkers
    # to the leader): the coordinator revoked no shard of another broker's journal (before,
    # each transaction revoked the other leaders' shards, which then leased them again)
    assert _revokes(brokers) == revoked


def _revokes(cluster: Cluster) -> int:
    """How many revoke versions the brokers' journals hold now (a file root)."""
    folder = pathlib.Path(cluster.root.removeprefix("file://")) / "cluster/journal"
    return sum(
        json.loads(path.read_bytes()).get("c", {}).get("kind") == "revoke"
        for path in folder.glob("*/*/*.json")
    )


def test_back_to_back_transactions_cost_no_metadata_append(
    brokers: Cluster,
) -> None:
    """EndTxn answers before its Complete step (left for later); the producer's
    next transaction, begun at once, replaces the ended one's Prepare state instead
    of failing or joining it.  Every step is one of the id's log (a journal step of
    its coordinator): no metadata-log append (before: two per transaction, begin and
    decision)."""
    bootstrap = brokers.kafka_bootstrap
    create(bootstrap, "rapid", 1)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "t-rapid"})
    producer.init_transactions(30)
    before = _metadata_files(brokers)
    kept = []
    for i in range(30):
        producer.begin_transaction()
        producer.produce("rapid", value=b"%d" % i)
        if i % 3 == 2:
            producer.flush(30)  # written, then aborted
            producer.abort_transaction(30)
        else:
            producer.commit_transaction(30)
            kept.append(b"%d" % i)
    # (versions of anything else, a broker's fencing on a loaded machine, are not counted)
    assert _naming(_metadata_files(brokers) - before, b"transactional_id") == 0
    values, positions = read_all(bootstrap, "rapid", 1, "read_committed")
    assert values == kept and positions == [60]  # 30 records, 30 markers
    address = ["--address", brokers.address, "--output", "json"]
    assert _described_state(address, "t-rapid") in ("CompleteAbort", "PrepareAbort")


def test_an_exactly_once_loop_adds_no_metadata_record_after_its_first_transaction(
    brokers: Cluster,
) -> None:
    """Consume, transform, produce and commit the offsets in one transaction, N times
    (confluent-kafka): the id's begin, AddPartitionsToTxn, AddOffsetsToTxn, decision and
    Complete are steps of its own log, journalled by its coordinator; the metadata log
    registers the id once (InitProducerId).  Before: about three appends per transaction."""
    bootstrap = brokers.kafka_bootstrap
    create(bootstrap, "eos-in", 2)
    create(bootstrap, "eos-out", 2)
    feeder = Producer({"bootstrap.servers": bootstrap})
    for i in range(10):
        feeder.produce("eos-in", value=b"%d" % i, partition=i % 2)
    feeder.flush(30)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "eos-loop",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.assign([TopicPartition("eos-in", p) for p in range(2)])
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "t-eos-loop"})
    producer.init_transactions(30)
    before: set[pathlib.Path] = set()
    for t in range(10):
        message = None
        while message is None or message.error():
            message = consumer.poll(1)
        producer.begin_transaction()
        producer.produce("eos-out", value=message.value().upper(), partition=message.partition())
        offsets = [TopicPartition(message.topic(), message.partition(), message.offset() + 1)]
        producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), 30)
        producer.commit_transaction(30)
        if t == 0:
            before = _metadata_files(brokers)
    assert _naming(_metadata_files(brokers) - before, b"transactional_id") == 0
    consumer.close()
    values, _ = read_all(bootstrap, "eos-out", 2, "read_committed")
    assert sorted(values) == sorted(b"%d" % i for i in range(10))
    address = ["--address", brokers.address, "--output", "json"]
    assert _described_state(address, "t-eos-loop") in ("CompleteCommit", "PrepareCommit")


def _described_state(address: list[str], tid: str) -> str:
    return str(json.loads(_cli(*address, "transactions", "describe", tid))["state"])


def test_an_open_transaction_holds_read_committed_readers_at_its_first_offset(
    brokers: Cluster,
) -> None:
    bootstrap = brokers.kafka_bootstrap
    create(bootstrap, "open", 1)
    plain = Producer({"bootstrap.servers": bootstrap})
    plain.produce("open", value=b"before")
    plain.flush(30)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "t-open"})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce("open", value=b"pending")
    producer.flush(30)
    plain.produce("open", value=b"after")  # behind the open transaction: held back too
    plain.flush(30)
    values, positions = read_all(bootstrap, "open", 1, "read_committed")
    assert values == [b"before"]
    assert positions == [1]
    producer.commit_transaction(30)
    values, positions = read_all(bootstrap, "open", 1, "read_committed")
    assert values == [b"before", b"pending", b"after"]
    assert positions == [4]


def test_zombie_fencing_refuses_the_older_producers_writes_and_commit(brokers: Cluster) -> None:
    bootstrap = brokers.kafka_bootstrap
    create(bootstrap, "zombie", 1)
    old = Producer({"bootstrap.servers": bootstrap, "transactional.id": "t-zombie"})
    old.init_transactions(30)
    old.begin_transaction()
    old.produce("zombie", value=b"old-1")
    old.flush(30)
    new = Producer({"bootstrap.servers": bootstrap, "transactional.id": "t-zombie"})
    new.init_transactions(30)  # aborts the old one's transaction and fences it
    new.begin_transaction()
    new.produce("zombie", value=b"new-1")
    new.commit_transaction(30)
    with pytest.raises(KafkaException) as refused:
        old.produce("zombie", value=b"old-2")
        old.commit_transaction(30)
    assert refused.value.args[0].fatal() or "fenced" in str(refused.value).lower()
    values, _ = read_all(bootstrap, "zombie", 1, "read_committed")
    assert values == [b"new-1"]


WORKER = textwrap.dedent(
    """
    import sys
    from confluent_kafka import Consumer, Producer, TopicPartition

    bootstrap, group = sys.argv[1], sys.argv[2]
    # a short session: a killed worker's member leaves the group soon after it dies
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed", "session.timeout.ms": 3000,
                         "heartbeat.interval.ms": 300})
    consumer.subscribe(["in"])
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "ctp",
                         "linger.ms": 5})
    producer.init_transactions(60)
    while True:
        batch = consumer.consume(20, 1.0)
        batch = [m for m in batch if not m.error()]
        if not batch:
            continue
        producer.begin_transaction()
        for m in batch:
            producer.produce("out", key=m.key(), value=m.value(), partition=m.partition())
        positions = {}
        for m in batch:
            positions[m.partition()] = m.offset() + 1
        producer.send_offsets_to_transaction(
            [TopicPartition("in", p, o) for p, o in positions.items()],
            consumer.consumer_group_metadata(), 60)
        producer.commit_transaction(60)
        print("committed", len(batch), flush=True)
    """
)


def test_consume_transform_produce_survives_sigkills_exactly_once(
    brokers: Cluster, tmp_path
) -> None:
    bootstrap = brokers.kafka_bootstrap
    create(bootstrap, "in", 2)
    create(bootstrap, "out", 2)
    kills = int(os.environ.get("SPARKLOG_TXN_KILLS", "5"))  # bench/txn_chaos.py: more
    total = 80 * kills  # enough input that every worker is killed while it copies
    plain = Producer({"bootstrap.servers": bootstrap})
    for i in range(total):
        plain.produce("in", value=b"%d" % i, partition=i % 2)
    plain.flush(30)
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    rng = random.Random(25)
    for _ in range(kills):
        worker = subprocess.Popen(
            [sys.executable, str(script), bootstrap, "ctp-group"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        try:
            assert worker.stdout is not None
            # kill it after it committed a few batches (mid-transaction, at a random point),
            # or after 30 s without a commit (then it dies wherever it is)
            deadline = time.monotonic() + 30
            for _ in range(rng.randint(1, 3)):
                ready, _, _ = select.select([worker.stdout], [], [], deadline - time.monotonic())
                if not ready or not worker.stdout.readline():
                    break
        finally:
            worker.send_signal(signal.SIGKILL)
            worker.wait()
    worker = subprocess.Popen(
        [sys.executable, str(script), bootstrap, "ctp-group"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            values, _ = read_all(bootstrap, "out", 2, "read_committed")
            if len(values) >= total:
                break
    finally:
        worker.send_signal(signal.SIGKILL)
        worker.wait()
    assert sorted(values, key=int) == [b"%d" % i for i in range(total)], "not exactly once"
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "ctp-group"})
    committed = consumer.committed([TopicPartition("in", p) for p in range(2)], timeout=30)
    consumer.close()
    assert [tp.offset for tp in committed] == [total // 2, total // 2]


def _sparklog_values(address: str, level: str, topic: str, partitions: int) -> list[bytes]:
    from sparklog import Consumer as SparklogConsumer

    consumer = SparklogConsumer(
        address=address, auto_offset_reset="earliest", isolation_level=level
    )
    consumer.assign([(topic, p) for p in range(partitions)])
    values: list[bytes] = []
    for _ in range(10):  # a bounded number of polls: everything is committed already
        polled = consumer.poll(timeout_ms=200, max_records=1000)
        values += [r.value for records in polled.values() for r in records]
    consumer.close()
    return values


def test_sparklog_consumer_isolation_levels_over_flight_and_embedded(brokers: Cluster) -> None:
    bootstrap = brokers.kafka_bootstrap
    create(bootstrap, "flight-txn", 1)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "t-flight"})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce("flight-txn", value=b"kept")
    producer.commit_transaction(30)
    producer.begin_transaction()
    producer.produce("flight-txn", value=b"dropped")
    producer.flush(30)
    producer.abort_transaction(30)
    producer.begin_transaction()
    producer.produce("flight-txn", value=b"open")
    producer.flush(30)  # left open: read_committed readers stop before it
    for address in (brokers.address, brokers.root):
        assert _sparklog_values(address, "read_committed", "flight-txn", 1) == [b"kept"]
        assert _sparklog_values(address, "read_uncommitted", "flight-txn", 1) == [
            b"kept",
            b"dropped",
            b"open",
        ]
    producer.abort_transaction(30)


def _cli(*args: str, timeout_s: float = 120) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "sparklog.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env={k: v for k, v in os.environ.items() if not k.startswith("SPARKLOG_")},
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_cli_lists_describes_and_aborts_a_hanging_transaction(brokers: Cluster) -> None:

    bootstrap = brokers.kafka_bootstrap
    create(bootstrap, "hang", 1)
    producer = Producer(
        # a timeout no step of the test reaches: the transaction hangs until aborted below
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": "t-hang",
            "transaction.timeout.ms": 600000,
        }
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce("hang", value=b"hanging")
    producer.flush(30)
    address = ["--address", brokers.address, "--output", "json"]
    listed = json.loads(_cli(*address, "transactions", "list"))
    # (the module's other tests' ids are listed too)
    ours = [
        (t["transactional_id"], t["state"]) for t in listed if t["transactional_id"] == "t-hang"
    ]
    assert ours == [("t-hang", "Ongoing")]
    described = json.loads(_cli(*address, "transactions", "describe", "t-hang"))
    assert described["partitions"] == [{"topic": "hang", "partition": 0}]
    # from the root too (the metadata log), without a broker
    from_root = json.loads(_cli("--address", brokers.root, "-o", "json", "transactions", "list"))
    # (the module's other ids may change between the two listings: a pass completing them)
    assert [t for t in from_root if t["transactional_id"] == "t-hang"] == [
        t for t in listed if t["transactional_id"] == "t-hang"
    ]
    # ListOffsets latest, read_committed: the last stable offset, as Kafka's (a
    # read_committed consumer's end_offsets; the high watermark before)
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KafkaTopicPartition

    hang_0 = KafkaTopicPartition("hang", 0)
    for level, end in (("read_committed", 0), ("read_uncommitted", 1)):
        reader = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level=level)
        try:
            assert reader.end_offsets([hang_0]) == {hang_0: end}, level
        finally:
            reader.close()
    # consume -e read_committed stops at the last stable offset the open transaction holds
    # (it waited for the end, which no read_committed reader passes, for ever before)
    held = ["consume", "hang", "--from-beginning", "-e", "--isolation-level", "read_committed"]
    assert _cli("--address", brokers.address, *held, timeout_s=30).split() == []
    aborted = json.loads(_cli(*address, "transactions", "abort", "t-hang"))
    assert aborted["state"] == "CompleteAbort"
    values, positions = read_all(bootstrap, "hang", 1, "read_committed")
    assert (values, positions) == ([], [2])  # the record and its abort marker
    lines = _cli(
        "--address",
        brokers.address,
        "consume",
        "hang",
        "--from-beginning",
        "-e",
        "--isolation-level",
        "read_uncommitted",
    )
    assert lines.split() == ["hanging"]
    lines = _cli(
        "--address",
        brokers.address,
        "consume",
        "hang",
        "--from-beginning",
        "-e",
        "--isolation-level",
        "read_committed",
    )
    assert lines.split() == []


@pytest.mark.parametrize("decision", ["PrepareCommit", "PrepareAbort"])
def test_a_restarted_broker_completes_a_decided_transaction_and_aborts_a_timed_out_one(
    kafka_cluster: Cluster, decision: str
) -> None:
    from sparklog.storage import open_root

    kafka_cluster.start(0)
    bootstrap = kafka_cluster.kafka_bootstrap
    create(bootstrap, "crash", 1)
    decided = Producer({"bootstrap.servers": bootstrap, "transactional.id": "t-decided"})
    pending = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": "t-pending",
            "transaction.timeout.ms": 3000,
        }
    )
    for producer, value in ((decided, b"decided"), (pending, b"pending")):
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.produce("crash", value=value)
        producer.flush(30)
    kafka_cluster.kill(0)
    # the coordinator died right after writing its decision about t-decided (a step of
    # the id's log: written here directly, which folds the dead broker's journal steps)
    root = open_root(kafka_cluster.root)

    def decide(state):
        assert state["state"] == "Ongoing"
        return {**state, "state": decision}

    root.transactions.write("t-decided", decide)
    kafka_cluster.restart(0)
    deadline = time.monotonic() + 60
    values: list[bytes] = []
    while time.monotonic() < deadline:
        values, positions = read_all(bootstrap, "crash", 1, "read_committed")
        if positions == [4]:  # both ended: two records, two markers
            break
    assert values == ([b"decided"] if decision == "PrepareCommit" else [])
    done = "CompleteCommit" if decision == "PrepareCommit" else "CompleteAbort"
    assert _states(kafka_cluster) == {"t-decided": done, "t-pending": "CompleteAbort"}


def _states(cluster: Cluster) -> dict[str, str]:
    """Each registered transactional id's state, read from the root (a fresh reader)."""
    from sparklog.storage import open_root
    from sparklog.storage.transactions import transaction_states

    root = open_root(cluster.root)
    found = transaction_states(root.metadata.refresh().transactional_ids, root.transactions)
    return {tid: state["state"] for tid, state in found.items()}


def test_ids_whose_state_an_older_broker_wrote_in_the_metadata_log_keep_working(
    kafka_cluster: Cluster,
) -> None:
    """Upgrade: a ``transactional_id`` record holding the whole state (an older broker's
    form) is the id's state until the id's own log has one.  A finished id's next
    InitProducerId and transaction move it into its log (the registry record becomes
    pid and epoch only); a decided transaction left there is finished as before."""
    from sparklog.storage import open_root

    root = open_root(kafka_cluster.root, create=True)
    root.create_topic("legacy", 1)
    old_form = {
        "pid": 900_000,
        "epoch": 2,
        "n": 3,
        "timeout_ms": 60_000,
        "started_ms": 1,
        "updated_ms": 1,
        "partitions": [],
        "groups": {},
    }
    records = [
        {
            "type": "transactional_id",
            "key": "t-legacy",
            "value": {**old_form, "state": "CompleteCommit"},
        },
        {
            "type": "transactional_id",
            "key": "t-legacy-decided",
            "value": {
                **old_form,
                "pid": 900_001,
                "state": "PrepareAbort",
                "partitions": [["legacy", 0]],
            },
        },
    ]
    root.metadata.append(lambda image: records)
    kafka_cluster.start(0)
    bootstrap = kafka_cluster.kafka_bootstrap
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "t-legacy"})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce("legacy", value=b"after the upgrade")
    producer.commit_transaction(30)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and _states(kafka_cluster)["t-legacy-decided"] != (
        "CompleteAbort"
    ):
        pass
    assert _states(kafka_cluster) == {
        "t-legacy": "CompleteCommit",
        "t-legacy-decided": "CompleteAbort",
    }
    fresh = open_root(kafka_cluster.root)
    registry = fresh.metadata.refresh().transactional_ids
    assert registry["t-legacy"] == {"pid": 900_000, "epoch": 3, "timeout_ms": 60_000}
    moved = fresh.transactions.state("t-legacy")
    assert moved is not None and (moved["pid"], moved["epoch"], moved["n"]) == (900_000, 3, 4)
    # the new transaction's record and marker (the decided one held no record there)
    values, positions = read_all(bootstrap, "legacy", 1, "read_committed")
    assert values == [b"after the upgrade"] and positions == [2]


async def _aiokafka_transactions(bootstrap: str) -> tuple[list[bytes], list[bytes]]:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka import TopicPartition as AioTopicPartition

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id="t-aio")
    await producer.start()
    try:
        async with producer.transaction():
            await producer.send_and_wait("aio-txn", b"aio-committed", partition=0)
        await producer.begin_transaction()
        await producer.send_and_wait("aio-txn", b"aio-aborted", partition=0)
        await producer.abort_transaction()
    finally:
        await producer.stop()
    seen = {}
    for level in ("read_committed", "read_uncommitted"):
        consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap, isolation_level=level, auto_offset_reset="earliest"
        )
        await consumer.start()
        try:
            tp = AioTopicPartition("aio-txn", 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            values: list[bytes] = []
            deadline = time.monotonic() + 30
            while await consumer.position(tp) < 4 and time.monotonic() < deadline:
                batch = await consumer.getmany(tp, timeout_ms=500)
                values += [m.value for m in batch.get(tp, [])]
            seen[level] = values
        finally:
            await consumer.stop()
    return seen["read_committed"], seen["read_uncommitted"]


def test_aiokafka_transactional_producer_commits_and_aborts(brokers: Cluster) -> None:
    import asyncio

    bootstrap = brokers.kafka_bootstrap
    create(bootstrap, "aio-txn", 1)
    committed, everything = asyncio.run(_aiokafka_transactions(bootstrap))
    assert committed == [b"aio-committed"]
    assert everything == [b"aio-committed", b"aio-aborted"]


def test_offsets_sent_in_a_transaction_are_visible_only_at_commit(brokers: Cluster) -> None:
    """TxnOffsetCommit's offsets are held in the group's log (a journal step of its
    coordinator, no metadata-log record; AddOffsetsToTxn's is a step of the id's log) until
    the transaction ends; meanwhile OffsetFetch with ``require_stable`` (KIP-447)
    answers UNSTABLE_OFFSET_COMMIT for their partitions, and without it the offset
    before."""
    bootstrap = brokers.kafka_bootstrap
    create(bootstrap, "src", 2)
    create(bootstrap, "dst", 1)
    # read_uncommitted: librdkafka's OffsetFetch then does not require stable offsets
    group = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "txn-offsets",
            "isolation.level": "read_uncommitted",
        }
    )
    metadata = group.consumer_group_metadata()
    tp = TopicPartition("src", 0)

    def committed() -> int:
        return group.committed([tp], timeout=30)[0].offset

    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "t-offsets"})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce("dst", value=b"x")
    producer.flush(30)  # its AddPartitionsToTxn step is written
    before = _metadata_files(brokers)
    producer.send_offsets_to_transaction([TopicPartition("src", 0, 5)], metadata, 30)
    # AddOffsetsToTxn is a step of the id's log, TxnOffsetCommit one of the group's
    assert _naming(_metadata_files(brokers) - before, b"t-offsets") == 0
    assert committed() < 0  # held: not visible while the transaction is open
    assert _stable_fetch(brokers, "txn-offsets", "src", [0, 1]) == {0: (-1, 88), 1: (-1, 0)}
    producer.abort_transaction(30)
    assert committed() < 0  # aborted: never visible
    assert _stable_fetch(brokers, "txn-offsets", "src", [0, 1]) == {0: (-1, 0), 1: (-1, 0)}
    producer.begin_transaction()
    producer.produce("dst", value=b"y")
    producer.send_offsets_to_transaction([TopicPartition("src", 0, 7)], metadata, 30)
    producer.commit_transaction(30)
    assert committed() == 7
    assert _stable_fetch(brokers, "txn-offsets", "src", [0]) == {0: (7, 0)}
    # a fenced producer's offset commit is refused
    newer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "t-offsets"})
    newer.init_transactions(30)
    with pytest.raises(KafkaException):
        producer.begin_transaction()
        producer.produce("dst", value=b"z")
        producer.send_offsets_to_transaction([TopicPartition("src", 0, 9)], metadata, 30)
        producer.commit_transaction(30)
    assert committed() == 7
    assert _stable_fetch(brokers, "txn-offsets", "src", [0]) == {0: (7, 0)}
    group.close()


def _metadata_files(cluster: Cluster) -> set[pathlib.Path]:
    folder = pathlib.Path(cluster.root.removeprefix("file://")) / "cluster/metadata/log"
    return set(folder.glob("*.json"))


def _naming(files: set[pathlib.Path], text: bytes) -> int:
    """How many of the metadata log's ``files`` mention ``text``."""
    return sum(text in path.read_bytes() for path in files)


def _stable_fetch(
    cluster: Cluster, group: str, topic: str, partitions: list[int]
) -> dict[int, tuple[int, int]]:
    """OffsetFetch v7 with ``require_stable``: {partition: (offset, error code)}."""
    from kio.schema.offset_fetch.v7.request import OffsetFetchRequest, OffsetFetchRequestTopic

    from tests.kafka.wire import Connection

    connection = Connection(cluster.kafka_bootstrap)
    try:
        answer = connection.call(
            OffsetFetchRequest(
                group_id=group,
                topics=(OffsetFetchRequestTopic(name=topic, partition_indexes=tuple(partitions)),),
                require_stable=True,
            )
        )
    finally:
        connection.close()
    assert answer.error_code == 0
    return {
        int(p.partition_index): (int(p.committed_offset), int(p.error_code))
        for t in answer.topics
        for p in t.partitions
    }


def test_the_surviving_broker_aborts_a_dead_coordinators_open_transaction(
    kafka_cluster: Cluster,
) -> None:
    from sparklog.broker_lite.cluster import rendezvous_weight

    for broker_id in range(2):
        kafka_cluster.start(broker_id)
    kafka_cluster.wait_live(2)
    bootstrap = kafka_cluster.kafka_bootstrap
    create(bootstrap, "multi", 4)
    tid = "t-multi"
    coordinator = max(range(2), key=lambda b: rendezvous_weight(tid, 0, b))
    survivor = 1 - coordinator
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": tid, "transaction.timeout.ms": 4000}
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    for p in range(4):
        producer.produce("multi", value=b"open-%d" % p, partition=p)
    producer.flush(30)
    kafka_cluster.kill(coordinator)
    survivor_bootstrap = kafka_cluster.brokers[survivor].kafka_address
    deadline = time.monotonic() + 90
    positions: list[int] = []
    values: list[bytes] = []
    while time.monotonic() < deadline:
        try:
            values, positions = read_all(survivor_bootstrap, "multi", 4, "read_committed", 10)
        except AssertionError:
            continue  # leadership still moving, or the transaction still open
        if positions == [2, 2, 2, 2]:  # each partition: its record and the abort marker
            break
    assert (values, positions) == ([], [2, 2, 2, 2])
    # the id is usable again through the survivor
    again = Producer({"bootstrap.servers": survivor_bootstrap, "transactional.id": tid})
    again.init_transactions(30)
    again.begin_transaction()
    again.produce("multi", value=b"after", partition=0)
    again.commit_transaction(30)
    values, _ = read_all(survivor_bootstrap, "multi", 4, "read_committed")
    assert values == [b"after"]


def test_describe_and_list_transactions_and_describe_producers_over_the_wire(
    brokers: Cluster,
) -> None:
    from kio.schema.describe_producers.v0.request import DescribeProducersRequest, TopicRequest
    from kio.schema.describe_transactions.v0.request import DescribeTransactionsRequest
    from kio.schema.list_transactions.v1.request import ListTransactionsRequest

    from tests.kafka.wire import Connection

    bootstrap = brokers.kafka_bootstrap
    create(bootstrap, "ops", 1)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "t-ops"})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce("ops", value=b"x")
    producer.flush(30)
    conn = Connection(brokers.kafka_leader("ops", 0))  # DescribeProducers asks the leader
    try:
        listed = conn.call(ListTransactionsRequest(state_filters=("Ongoing",)))
        # (the module's other tests' ids are listed too: a killed worker's is left open)
        assert ("t-ops", "Ongoing") in [
            (t.transactional_id, t.transaction_state) for t in listed.transaction_states
        ]
        assert {t.transaction_state for t in listed.transaction_states} == {"Ongoing"}
        described = conn.call(DescribeTransactionsRequest(transactional_ids=("t-ops", "nope")))
        ours, unknown = described.transaction_states
        assert (ours.error_code.value, ours.transaction_state) == (0, "Ongoing")
        assert [(t.topic, t.partitions) for t in ours.topics] == [("ops", (0,))]
        assert unknown.error_code.value == 105  # TRANSACTIONAL_ID_NOT_FOUND
        producers = conn.call(
            DescribeProducersRequest(topics=(TopicRequest(name="ops", partition_indexes=(0,)),))
        )
        (active,) = producers.topics[0].partitions[0].active_producers
        assert (active.producer_id, active.current_txn_start_offset) == (ours.producer_id, 0)
    finally:
        conn.close()
    producer.abort_transaction(30)


@pytest.mark.slow
def test_kafkajs_transactional_producer_commits_aborts_and_is_fenced(brokers: Cluster) -> None:
    missing = install_kafkajs()
    if missing:
        pytest.skip(missing)
    bootstrap = brokers.kafka_bootstrap
    create(bootstrap, "txn-js", 1)
    answer = run_script("transactions.js", bootstrap, "txn-js", "t-kafkajs")
    # the zombie's send is refused once the second producer has initialised, with the code
    # kafkajs knows (it sends AddPartitionsToTxn v1, from before PRODUCER_FENCED existed)
    assert answer["fenced"] == "INVALID_PRODUCER_EPOCH", answer
    committed, _ = read_all(bootstrap, "txn-js", 1, "read_committed")
    assert committed == [b"committed-0", b"committed-1", b"committed-2", b"after-fencing"]
    everything, _ = read_all(bootstrap, "txn-js", 1, "read_uncommitted")
    assert b"aborted-0" in everything and b"aborted-1" in everything
