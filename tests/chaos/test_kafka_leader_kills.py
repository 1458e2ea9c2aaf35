"""Leader SIGKILLs through the Kafka listener, with a consumer group (issue 26, chaos suite).

Three broker processes share a file root.  A confluent-kafka idempotent producer
(acks=all) writes numbered records to four partitions while a consumer group
member processes them and commits after each batch (at-least-once, Kafka's
usual loop).  The leader of a partition (sometimes the group's coordinator too)
is SIGKILLed ``KILLS`` times and restarted.  At the end: every acknowledged
record is stored exactly once, and no record below a committed offset was
processed zero times (the group never skips).  ``KILLS`` is small in CI;
``SPARKLOG_CHAOS_KILLS`` runs the long form.
"""

from __future__ import annotations

import os
import pathlib
import threading
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.brokers import Cluster
from tests.support.waiting import wait_for

KILLS = int(os.environ.get("SPARKLOG_CHAOS_KILLS", "3"))
TOPIC = "kills"
PARTITIONS = 4


class Traffic:
    """The producer and the group member, each on its own thread, and what they saw."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.acked: set[bytes] = set()
        self.processed: dict[bytes, int] = {}
        self.committed: dict[int, int] = {}
        self.errors: list[BaseException] = []
        self.threads = [
            threading.Thread(target=self._guarded, args=(self._produce,), daemon=True),
            threading.Thread(target=self._guarded, args=(self._consume,), daemon=True),
        ]

    def __enter__(self) -> Traffic:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(120)

    def _guarded(self, run: object) -> None:
        try:
            run()  # type: ignore[operator]
        except BaseException as exc:
            self.errors.append(exc)

    def _bootstrap(self) -> str:
        return self.cluster.kafka_bootstrap

    def _produce(self) -> None:
        producer = Producer(
            {
                "bootstrap.servers": self._bootstrap(),
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
                "message.timeout.ms": 120_000,
            }
        )

        def report(err: KafkaError | None, msg: object) -> None:
            if err is None:
                with self.lock:
                    self.acked.add(msg.value())  # type: ignore[attr-defined]

        n = 0
        while not self.stop.wait(0.02):  # about 500 records a second
            for _ in range(10):
                producer.produce(TOPIC, b"r-%06d" % n, key=b"%d" % n, on_delivery=report)
                n += 1
            producer.poll(0)
        producer.flush(120)

    def _consume(self) -> None:
        consumer = Consumer(
            {
                "bootstrap.servers": self._bootstrap(),
                "group.id": "chaos-group",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "session.timeout.ms": 6000,
                "heartbeat.interval.ms": 500,
            }
        )
        consumer.subscribe([TOPIC])
        try:
            while not self.stop.is_set():
                batch = [m for m in consumer.consume(100, 0.5) if m.error() is None]
                if not batch:
                    continue
                with self.lock:
                    for m in batch:
                        self.processed[m.value()] = self.processed.get(m.value(), 0) + 1
                try:
                    done = consumer.commit(asynchronous=False)
                except Exception:
                    continue
                with self.lock:
                    for tp in done or []:
                        if tp.error is None and tp.offset >= 0:
                            old = self.committed.get(tp.partition, 0)
                            self.committed[tp.partition] = max(old, tp.offset)
        finally:
            consumer.close()

    def progress(self) -> tuple[int, int]:
        with self.lock:
            return len(self.acked), len(self.processed)


@pytest.fixture
def three_brokers(tmp_path: pathlib.Path) -> Iterator[Cluster]:
    cluster = Cluster(tmp_path, f"file://{tmp_path}/root")
    try:
        for broker_id in (1, 2, 3):
            cluster.start(broker_id, group_min_session_timeout_ms=1000)
        cluster.wait_live(3)
        yield cluster
    finally:
        cluster.stop_all()


def _leader(admin: AdminClient, cluster: Cluster, partition: int) -> int:
    found: list[int] = []

    def live_leader() -> bool:
        leader = admin.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions[partition].leader
        found[:] = [leader]
        return leader in cluster.brokers and cluster.brokers[leader].alive

    wait_for(live_leader, timeout_s=60, what=f"a live leader of {TOPIC}-{partition}")
    return found[0]


@pytest.mark.slow
def test_leader_kills_lose_no_acknowledged_record_and_the_group_skips_none(
    three_brokers: Cluster,
) -> None:
    cluster = three_brokers
    admin = AdminClient({"bootstrap.servers": cluster.kafka_bootstrap})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(timeout=30)
    with Traffic(cluster) as traffic:

        def moved_on(acked: int, processed: int) -> bool:
            assert not traffic.errors, traffic.errors
            now = traffic.progress()
            return now[0] >= acked + 100 and now[1] >= processed + 100

        start = traffic.progress()
        wait_for(lambda: moved_on(*start), timeout_s=60, what="traffic under way")
        for k in range(KILLS):
            victim = _leader(admin, cluster, k % PARTITIONS)
            cluster.kill(victim)
            before = traffic.progress()
            wait_for(lambda b=before: moved_on(*b), timeout_s=120,
                     what=f"producing and consuming after kill {k + 1}")  # fmt: skip
            cluster.restart(victim)
    assert not traffic.errors, traffic.errors

    stored: dict[bytes, int] = {}
    reader = Consumer({"bootstrap.servers": cluster.kafka_bootstrap, "group.id": "verify",
                       "enable.partition.eof": True})  # fmt: skip
    reader.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    ended: set[int] = set()

    def read() -> bool:
        for m in reader.consume(1000, 0.5):
            if m.error() is None:
                stored[m.value()] = stored.get(m.value(), 0) + 1
            elif m.error().code() == KafkaError._PARTITION_EOF:
                ended.add(m.partition())
            else:
                other.append(m.error())
        return len(ended) == PARTITIONS

    other: list[KafkaError] = []
    try:
        wait_for(read, timeout_s=180, what="every partition read to its end")
    except AssertionError as exc:
        from sparklog.storage import open_root

        topic = open_root(cluster.root).topic(TOPIC)
        states = []
        for p in range(PARTITIONS):
            st = topic.partition(p).state
            marks = reader.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=10)
            position = reader.position([TopicPartition(TOPIC, p)])[0].offset
            states.append((p, st.high_watermark, st.last_stable_offset, marks, position))
        import signal

        for b in cluster.brokers.values():  # each live broker's stacks, into its log
            if b.alive and b.proc is not None:
                os.kill(b.proc.pid, signal.SIGUSR1)
        raise AssertionError(
            f"{exc} (ended: {sorted(ended)}, {len(stored)} records, acknowledged "
            f"{len(traffic.acked)}, errors {other[:3]}; partition, stored hwm, lso, "
            f"kafka watermarks, position: {states})"
        ) from None
    reader.close()
    missing = [v for v in traffic.acked if stored.get(v, 0) == 0]
    twice = [v for v, n in stored.items() if n > 1]
    assert not missing and not twice, (len(missing), len(twice))
    # the group: below each committed offset, every stored record was processed
    skipped = [
        v
        for v, (p, offset) in _offsets(cluster).items()
        if offset < traffic.committed.get(p, 0) and v not in traffic.processed
    ]
    assert not skipped, f"{len(skipped)} records below the group's commits never processed"
    assert traffic.committed, "the group committed nothing"


def _offsets(cluster: Cluster) -> dict[bytes, tuple[int, int]]:
    """Every stored record's (partition, offset), read from the root."""
    from sparklog.storage import open_root

    topic = open_root(cluster.root).topic(TOPIC)
    found: dict[bytes, tuple[int, int]] = {}
    for p in range(PARTITIONS):
        log = topic.partition(p)
        for batch in log.iter_batches(log.log_start_offset, log.high_watermark):
            for value, offset in zip(
                batch.column("value").to_pylist(), batch.column("offset").to_pylist(), strict=True
            ):
                found[value] = (p, offset)
    return found
