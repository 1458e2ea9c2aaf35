"""Issue 37 item 7: a root written by the format-2 writer (no journal: every flush a
shard-log commit, every offset commit a group-log commit), generated here, keeps every
record, offset, group offset and transaction outcome when a format-3 broker (records
and offsets journalled, the defaults) serves it, and goes on through the journal."""

from __future__ import annotations

from sparklog.storage import open_root
from tests.support.brokers import Cluster

FORMAT_2 = {"journal_records": False, "journal_offset_commits": False}


def test_a_format_2_root_keeps_records_offsets_group_offsets_and_transactions(tmp_path) -> None:
    from confluent_kafka import Consumer, Producer
    from confluent_kafka import TopicPartition as KafkaTopicPartition

    url = f"file://{tmp_path}/root"
    open_root(url).create_topic("u", 2)
    cluster = Cluster(tmp_path, url)

    def read_committed(group: str, expected: int) -> list[tuple[int, int, bytes]]:
        consumer = Consumer(
            {
                "bootstrap.servers": cluster.kafka_bootstrap,
                "group.id": group,
                "auto.offset.reset": "earliest",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
            }
        )
        consumer.subscribe(["u"])
        seen: list[tuple[int, int, bytes]] = []
        while len(seen) < expected:
            message = consumer.poll(10)
            assert message is not None, f"{len(seen)} of {expected} read: {sorted(seen)}"
            assert message.error() is None, message.error()
            seen.append((message.partition(), message.offset(), message.value()))
        consumer.close()
        return sorted(seen)

    def committed(group: str) -> dict[int, int]:
        consumer = Consumer({"bootstrap.servers": cluster.kafka_bootstrap, "group.id": group})
        found = consumer.committed([KafkaTopicPartition("u", p) for p in (0, 1)], 30)
        consumer.close()
        return {tp.partition: tp.offset for tp in found}

    try:
        cluster.start(0, **FORMAT_2)
        plain = Producer({"bootstrap.servers": cluster.kafka_bootstrap, "enable.idempotence": True})
        for i in range(10):
            plain.produce("u", f"p{i}".encode(), partition=i % 2)
        assert plain.flush(30) == 0
        txn = Producer({"bootstrap.servers": cluster.kafka_bootstrap, "transactional.id": "tx"})
        txn.init_transactions(30)
        txn.begin_transaction()
        for i in range(4):
            txn.produce("u", f"c{i}".encode(), partition=i % 2)
        txn.commit_transaction(30)
        txn.begin_transaction()
        for i in range(4):
            txn.produce("u", f"a{i}".encode(), partition=i % 2)
        txn.flush(30)
        txn.abort_transaction(30)
        group = Consumer({"bootstrap.servers": cluster.kafka_bootstrap, "group.id": "g"})
        group.commit(
            offsets=[KafkaTopicPartition("u", 0, 3), KafkaTopicPartition("u", 1, 2)],
            asynchronous=False,
        )
        group.close()
        before = read_committed("r1", 14)  # 10 plain and 4 committed, no aborted record
        assert not list((tmp_path / "root" / "cluster").rglob("journal/**/*.json"))
        cluster.stop_all()

        cluster.start(0)  # format 3: records and offsets journalled
        assert read_committed("r2", 14) == before
        assert committed("g") == {0: 3, 1: 2}
        more = Producer({"bootstrap.servers": cluster.kafka_bootstrap, "enable.idempotence": True})
        for i in range(4):
            more.produce("u", f"n{i}".encode(), partition=i % 2)
        assert more.flush(30) == 0
        after = read_committed("r3", 18)
        assert set(before) <= set(after)  # every record kept at its offset
        news = [row for row in after if row[2].startswith(b"n")]
        ends = {p: max(o for q, o, _ in before if q == p) for p in (0, 1)}
        assert all(offset > ends[p] for p, offset, _ in news)  # after everything kept
        assert list((tmp_path / "root" / "cluster").rglob("journal/**/*.json"))  # journalled
        reader = open_root(url).topic("u")  # no broker: the logs, then the journal's tail
        stored = sorted(
            v for p in (0, 1) for v in reader.partition(p).read(0).column("value").to_pylist()
        )
        assert [v for v in stored if v.startswith(b"n")] == [b"n0", b"n1", b"n2", b"n3"]
    finally:
        cluster.stop_all()
