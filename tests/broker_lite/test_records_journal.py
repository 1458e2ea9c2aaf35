"""Format 3's records (issue 37 items 1-3): a broker with ``journal_records`` journals a
flush's records of every shard it touched in ONE journal commit, folds each shard's
steps into its log every ``fold_interval_ms``, and readers without a broker read the
log and the journal's tail."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from sparklog.storage import make_batch, open_root
from tests.broker_lite.test_offsets_journal import _count_writes
from tests.chaos.inproc import inproc_broker

TOPICS = [f"t{i}" for i in range(20)]


def _shard_log_versions(tmp_path) -> set:
    return {p for p in (tmp_path / "root" / "topics").rglob("*.json") if "/shards/" in str(p)}


def _everything(url: str) -> dict[str, list[bytes]]:
    root = open_root(url)  # no broker: each shard's log, then the journal's tail
    return {
        name: sorted(root.topic(name).partition(0).read(0).column("value").to_pylist())
        for name in TOPICS
    }


def test_a_flush_of_twenty_topics_is_one_journal_commit_and_readers_see_every_record(
    tmp_path,
) -> None:
    url = f"file://{tmp_path}/root"
    root = open_root(url)
    for name in TOPICS:
        root.create_topic(name, 1)
    settings = {"journal_records": True, "linger_ms": 100, "fold_interval_ms": 3_600_000}
    with inproc_broker(url, **settings) as (server, _):
        broker = server.broker
        broker.produce(TOPICS[0], [(0, make_batch([b"warm"]))])  # leases the first shard
        arrow_before = set((tmp_path / "root").rglob("*.arrow"))
        logs_before = _shard_log_versions(tmp_path)
        written = _count_writes(broker.root.store, ("cluster/journal/",))

        def produce(name: str) -> None:
            for i in range(5):
                broker.produce(name, [(0, make_batch([f"{name}-{i}".encode()]))])

        with ThreadPoolExecutor(20) as pool:
            list(pool.map(produce, TOPICS))
        commits = _shard_log_versions(tmp_path) - logs_before
        journal = written
        objects = set((tmp_path / "root").rglob("*.arrow")) - arrow_before  # one per flush
        # one lease per newly led shard, and no shard-log commit per flush; format 2 made
        # one shard-log commit per topic and flush: at least 100 here
        assert len(commits) <= len(TOPICS), commits
        assert 1 <= len(journal) <= len(objects), (len(journal), len(objects))
        expected = {n: sorted(f"{n}-{i}".encode() for i in range(5)) for n in TOPICS}
        expected[TOPICS[0]] = sorted([*expected[TOPICS[0]], b"warm"])
        assert _everything(url) == expected  # read through the journal's tail
        assert broker.produce_path.fold_shards(0) == len(TOPICS)
    # a graceful stop folded every shard and deleted the journal
    assert list((tmp_path / "root" / "cluster" / "journal").rglob("*.json")) == []
    assert _everything(url) == expected


def test_a_killed_leaders_journalled_records_survive_and_its_successor_goes_on(tmp_path) -> None:
    """SIGKILL leaves the journal unfolded: a reader without a broker reads the records
    from its tail; the restarted broker (a fresh journal) seals the old one and folds
    the shard's records before it journals again; a Kafka consumer reads each once."""
    from confluent_kafka import Consumer, Producer

    from tests.support.brokers import Cluster

    url = f"file://{tmp_path}/root"
    open_root(url).create_topic("k", 2)
    cluster = Cluster(tmp_path, url)
    settings = {"journal_records": True, "fold_interval_ms": 3_600_000}

    def produce(values: list[str]) -> None:
        producer = Producer(
            {"bootstrap.servers": cluster.kafka_bootstrap, "enable.idempotence": True}
        )
        for i, value in enumerate(values):
            producer.produce("k", value.encode(), partition=i % 2)
        assert producer.flush(30) == 0

    def stored() -> list[bytes]:
        topic = open_root(url).topic("k")
        return sorted(
            v for p in (0, 1) for v in topic.partition(p).read(0).column("value").to_pylist()
        )

    try:
        cluster.start(0, **settings)
        produce([f"a{i}" for i in range(40)])
        cluster.kill(0)
        assert stored() == sorted(f"a{i}".encode() for i in range(40))
        cluster.restart(0)
        produce([f"b{i}" for i in range(40)])
        everything = sorted(f"{c}{i}".encode() for c in "ab" for i in range(40))
        assert stored() == everything
        consumer = Consumer(
            {
                "bootstrap.servers": cluster.kafka_bootstrap,
                "group.id": "reader",
                "auto.offset.reset": "earliest",
            }
        )
        consumer.subscribe(["k"])
        seen: list[bytes] = []
        while len(seen) < len(everything):
            message = consumer.poll(10)
            assert message is not None, f"{len(seen)} of {len(everything)} read"
            assert message.error() is None, message.error()
            seen.append(message.value())
        consumer.close()
        assert sorted(seen) == everything
    finally:
        cluster.stop_all()


def test_a_flush_meeting_a_revoke_leases_the_shard_again_and_answers(tmp_path) -> None:
    """A brokerless commit (another broker's transaction marker, the Spark sink) revokes a
    shard in the leader's journal while a flush is on its way: the flush journals the
    shard again under a new lease instead of failing the producer's request."""
    from sparklog.storage.journal import Journal

    url = f"file://{tmp_path}/root"
    open_root(url).create_topic("v", 1)
    with inproc_broker(url, journal_records=True) as (server, _):
        broker = server.broker
        broker.produce("v", [(0, make_batch([b"first"]))])  # leases the shard
        writer = broker.state.journal
        key = f"{open_root(url).describe_topic('v').topic_id}/0"
        Journal(writer.store, writer.ref).seal(writer.next_version, "a direct writer", [key])
        [outcome] = broker.produce("v", [(0, make_batch([b"after"]))])
        assert outcome.base_offset == 1
        values = open_root(url).topic("v").partition(0).read(0).column("value").to_pylist()
        assert values == [b"first", b"after"]
