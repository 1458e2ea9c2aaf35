"""A Kafka-protocol source (a sparklog broker's Kafka listener) mirrored onto a root, and
producers refused on mirror topics by a broker's Flight and Kafka listeners."""

from __future__ import annotations

import pytest

from sparklog.errors import PolicyViolationError
from sparklog.mirror.copier import Mirror, promote
from sparklog.mirror.kafka_source import KafkaMirror
from sparklog.mirror.links import create_link, get_link
from sparklog.storage import open_root
from sparklog.storage.maintenance import delete_records
from tests.mirror.support import assert_same, produce, wait_for


def test_a_kafka_listener_mirrored_onto_a_root_keeps_offsets(broker, tmp_path):
    source = open_root(broker.root, {})
    source.create_topic("orders", partitions=3)
    produce(source, "orders", 3, rounds=4)
    delete_records(source.topic("orders").partition(0), 7)  # retention at the source
    dest = open_root(f"file://{tmp_path}/dest", {}, create=True)
    create_link(
        dest,
        "migrate",
        source=f"kafka://{broker.kafka_bootstrap}",
        topics="orders",
        groups="app",
    )
    from confluent_kafka import Consumer as KafkaConsumer
    from confluent_kafka import TopicPartition

    app = KafkaConsumer({"bootstrap.servers": broker.kafka_bootstrap, "group.id": "app"})
    app.commit(offsets=[TopicPartition("orders", 1, 12)], asynchronous=False)
    app.close()
    mirror = KafkaMirror(dest, get_link(dest, "migrate"))
    try:
        copied = 0
        while (report := mirror.step()).records:
            copied += report.records
        assert copied == 60 - 7
        produce(source, "orders", 3, rounds=1)  # (written to the root: the broker sees it
        more = [0]  # when it next reads the shard log)

        def caught_up() -> bool:
            more[0] += mirror.step().records
            return more[0] >= 15

        wait_for(caught_up, timeout_s=60, what="the new records at the Kafka listener")
        assert more[0] == 15 and mirror.step().records == 0
        lags = mirror.lag()
        assert [(x.partition, x.lag_records) for x in lags] == [(0, 0), (1, 0), (2, 0)]
        assert lags[0].gaps == [(0, 7)]
    finally:
        mirror.close()
    assert assert_same(source, dest, "orders") == 75 - 7
    synced = {(tp.topic, tp.partition): c.offset for tp, c in dest.groups.fetch("app").items()}
    assert synced == {("orders", 1): 12}
    p0 = dest.topic("orders").partition(0).refresh()
    assert p0.log_start_offset == 7 and p0.mirror_gaps == [(0, 7)]
    assert dest.describe_topic("orders").mirror["source"].startswith("kafka://")


def test_brokers_refuse_producers_on_mirror_topics_until_promoted(broker, tmp_path):
    from confluent_kafka import KafkaError
    from confluent_kafka import Producer as KafkaProducer

    from sparklog import Producer

    source = open_root(f"file://{tmp_path}/src", {}, create=True)
    source.create_topic("orders", partitions=1)
    produce(source, "orders", 1, rounds=1)
    dest = open_root(broker.root, {})
    create_link(dest, "dr", source=source.url, topics="orders")
    Mirror(dest, get_link(dest, "dr")).step()

    flight = Producer(broker.address)
    with pytest.raises(PolicyViolationError, match="link 'dr'"):
        flight.send("orders", b"x", partition=0).get(timeout=30)
    errors: list = []
    kafka = KafkaProducer({"bootstrap.servers": broker.kafka_bootstrap, "retries": 0})
    kafka.produce("orders", b"x", partition=0, on_delivery=lambda err, msg: errors.append(err))
    kafka.flush(30)
    assert errors and errors[0].code() == KafkaError.POLICY_VIOLATION
    # (the message naming the link travels in ProduceResponse's error_message; librdkafka
    # shows only the code's text)

    promote(dest, "orders")

    def accepted() -> bool:
        try:
            return flight.send("orders", b"y", partition=0).get(timeout=30).offset >= 10
        except PolicyViolationError:
            return False  # the broker has not followed the promotion yet

    wait_for(accepted, timeout_s=30, what="the broker to follow the promotion")
    flight.close()


def test_a_broker_runs_the_links_its_config_names(tmp_path):
    from tests.support.brokers import Cluster

    source = open_root(f"file://{tmp_path}/src", {}, create=True)
    source.create_topic("orders", partitions=2)
    produce(source, "orders", 2, rounds=2)
    dest_url = f"file://{tmp_path}/dest"
    dest = open_root(dest_url, {}, create=True)
    create_link(dest, "dr", source=source.url, topics="orders")
    cluster = Cluster(tmp_path, dest_url)
    cluster.start(1, mirror_links="dr")
    try:
        cluster.wait_live(1)

        def mirrored(count: int) -> bool:
            if "orders" not in dest.list_topics():
                return False
            topic = dest.topic("orders")
            return sum(topic.partition(p).refresh().high_watermark for p in range(2)) == count

        wait_for(lambda: mirrored(20), timeout_s=60, what="the broker's mirror to copy")
        produce(source, "orders", 2, rounds=1)
        wait_for(lambda: mirrored(30), timeout_s=60, what="the broker's mirror to follow")
    finally:
        cluster.stop()
    assert assert_same(source, dest, "orders") == 30


def test_a_kafka_source_mirror_killed_and_restarted_neither_skips_nor_repeats(broker, tmp_path):
    import threading

    from tests.mirror.support import kill, mirrored_total, start_mirror

    source = open_root(broker.root, {})
    source.create_topic("orders", partitions=3)
    dest = open_root(f"file://{tmp_path}/dest", {}, create=True)
    create_link(dest, "migrate", source=f"kafka://{broker.kafka_bootstrap}", topics="orders")
    stop = threading.Event()
    written = [0]

    def write() -> None:
        while not stop.is_set():
            written[0] += produce(source, "orders", 3, rounds=1)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    seen = 0
    try:
        for _ in range(3):
            proc = start_mirror(dest.url, "migrate", None, tmp_path / "mirror.log")
            wait_for(
                lambda seen=seen: mirrored_total(dest, ["orders"]) > seen,
                timeout_s=120,
                what="the mirror to copy more",
            )
            kill(proc)
            seen = mirrored_total(dest, ["orders"])
    finally:
        stop.set()
        writer.join(timeout=60)
    mirror = KafkaMirror(dest, get_link(dest, "migrate"))
    try:
        wait_for(
            lambda: mirror.step().records == 0 and mirrored_total(dest, ["orders"]) == written[0],
            timeout_s=120,
            what="the mirror to catch up",
        )
    finally:
        mirror.close()
    assert assert_same(source, dest, "orders") == written[0]


def test_a_source_topic_deleted_and_re_created_is_not_mixed_into_its_mirror(broker, tmp_path):
    from sparklog.mirror.admin import describe
    from sparklog.mirror.metrics import MirrorMetrics
    from tests.mirror.support import table

    source = open_root(broker.root, {})
    source.create_topic("orders", partitions=2)
    produce(source, "orders", 2, rounds=2)  # 10 a partition
    dest = open_root(f"file://{tmp_path}/dest", {}, create=True)
    create_link(dest, "migrate", source=f"kafka://{broker.kafka_bootstrap}", topics="orders")
    mirror = KafkaMirror(dest, get_link(dest, "migrate"))
    try:
        # (a step before the broker's metadata shows the new topic copies nothing too)
        wait_for(
            lambda: mirror.step().records == 0 and "orders" in dest.list_topics(),
            timeout_s=60,
            what="the first copy",
        )
        first_id = dest.describe_topic("orders").mirror["source_topic_id"]
        assert first_id and first_id == mirror.topic_ids(["orders"])["orders"]
        before = [table(dest, "orders", p) for p in range(2)]
        assert [len(x) for x in before] == [10, 10]

        # a new incarnation, longer than the old one: offsets 0-14 again, under a new id
        source.delete_topic("orders")
        source.create_topic("orders", partitions=2)
        produce(source, "orders", 2, rounds=3)
        seen: list = []

        def stopped() -> bool:
            report = mirror.step()
            seen.append(report)
            return "orders" in report.skipped

        wait_for(stopped, timeout_s=60, what="the mirror to see the new topic id")
        assert sum(r.records for r in seen) == 0
        assert "deleted and re-created" in seen[-1].skipped["orders"]
        assert "mirroring of 'orders' stopped" in seen[-1].skipped["orders"]
        assert [table(dest, "orders", p) for p in range(2)] == before  # nothing mixed in

        metrics = MirrorMetrics()
        metrics.observe("migrate", seen[-1])
        labels = {"link": "migrate", "topic": "orders"}
        assert metrics.registry.get_sample_value("sparklog_mirror_topic_stopped", labels) == 1
    finally:
        mirror.close()
    described = describe(dest, "migrate")
    assert "deleted and re-created" in described["stopped"]["orders"]
    assert described["partitions"] == []

    # deleting the old mirror topic mirrors the new incarnation, from offset 0
    dest.delete_topic("orders")
    again = KafkaMirror(dest, get_link(dest, "migrate"))
    try:
        wait_for(lambda: again.step().records == 0, timeout_s=60, what="the new copy")
    finally:
        again.close()
    assert assert_same(source, dest, "orders") == 30
    assert dest.describe_topic("orders").mirror["source_topic_id"] != first_id


def test_a_kafka_source_copy_into_leased_shards_is_one_journal_commit_of_their_leader(
    broker, tmp_path
):
    """The Kafka-protocol source hands a topic's copy to the destination broker whose
    journal leases its shards in ONE call, as the root copier does (issue 37 item 3):
    one journal commit for both shards (two before: a call per shard), nothing revoked,
    the leader epochs and the lease kept, every record at the source's offsets (the
    source's retention gap included), through the broker and without one."""
    from tests.broker_lite.test_handed_commits import revokes
    from tests.chaos.inproc import inproc_broker
    from tests.mirror.test_mirror_handover import through_broker, without_broker

    source = open_root(broker.root, {})
    source.create_topic("orders", partitions=2)
    produce(source, "orders", 2, rounds=2)  # 10 a partition
    delete_records(source.topic("orders").partition(0), 3)  # retention at the source
    folder = tmp_path / "dest"
    url = f"file://{folder}"
    dest = open_root(url, {}, create=True)
    link = create_link(dest, "migrate", source=f"kafka://{broker.kafka_bootstrap}", topics="orders")
    mirror = KafkaMirror(dest, get_link(dest, "migrate"))
    try:
        with inproc_broker(url) as (server, location):
            # the link's mirror topic, of two shards (one a partition), made beforehand
            dest.create_topic(
                "orders",
                partitions=2,
                config={"commit.shards": 2},
                mirror={
                    "link": link.name,
                    "source": link.source,
                    "source_topic": "orders",
                    "source_topic_id": mirror.topic_ids(["orders"])["orders"],
                    "state": "mirroring",
                },
            )
            state = server.broker.state
            topic = state.topic("orders")
            shards = [state.partition_state(topic, p).shard for p in range(2)]
            assert len({shard.key for shard in shards}) == 2
            for shard in shards:  # the destination's broker leases both shards
                shard.epoch = shard.log.bump_epoch()
            epochs = [shard.log.leader_epoch for shard in shards]
            assert state.journal is not None
            journal_commits = state.journal.commits

            report = mirror.step()

            assert report.records == 20 - 3
            assert state.journal.commits == journal_commits + 1  # both shards: one commit
            assert revokes(folder) == 0  # the lease stays: nothing revoked the shards
            for shard, epoch in zip(shards, epochs, strict=True):
                assert shard.log.leader_epoch == epoch  # never leased again
                lease = open_root(url).topic("orders").shard(shard.key[2]).refresh().journal
                assert lease == state.journal.ref
            assert assert_same(source, dest, "orders") == 20 - 3  # at the source's offsets
            assert open_root(url).topic("orders").partition(0).refresh().mirror_gaps == [(0, 3)]
            for p, start in ((0, 3), (1, 0)):
                fetched = through_broker(location, "orders", p, start)
                assert fetched == without_broker(dest, "orders", p, start)
                assert fetched[0][0] == start
            assert mirror.step().records == 0
    finally:
        mirror.close()
