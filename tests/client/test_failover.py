"""Producer retries through a broker failover: order per partition kept, no duplicates."""

from __future__ import annotations

import time

import pytest

from sparklog import Admin, Consumer, Producer, TopicPartition


@pytest.mark.slow
def test_producer_survives_leader_failover(two_brokers):
    address = two_brokers.address
    with Admin(address) as admin:
        # leaders are per shard: one shard per partition spreads them over both brokers
        admin.create_topic("orders", partitions=4, config={"commit.shards": 4})
        before = {p.partition: p.leader for p in admin.describe_topic("orders").partitions}
    assert {leader.split("@")[0] for leader in before.values()} == {"1", "2"}, before
    sent: list[tuple[str, str]] = []
    futures = []
    with Producer(address, linger_ms=5, delivery_timeout_ms=60_000) as producer:
        for i in range(400):
            key, value = f"user-{i % 16}", f"{i}"
            futures.append(producer.send("orders", value, key=key))
            sent.append((key, value))
            if i == 150:
                producer.flush()
                two_brokers.kill(1)  # SIGKILL: no goodbye; its lease must expire
            if i > 150 and i % 25 == 0:
                time.sleep(0.05)  # keep producing while leadership moves
        producer.flush()
        metas = [f.get(timeout=60) for f in futures]
    with Admin(address) as admin:
        after = admin.describe_topic("orders").partitions
    assert all(p.leader and p.leader.startswith("2@") for p in after), after
    consumer = Consumer(address, auto_offset_reset="earliest")
    consumer.assign([TopicPartition("orders", p) for p in range(4)])
    got = []
    deadline = time.monotonic() + 60
    while len(got) < len(sent) and time.monotonic() < deadline:
        got.extend(consumer.poll_records(timeout_ms=500))
    consumer.close()
    assert len(got) == len(sent), "every acknowledged record is there exactly once"
    assert sorted((r.partition, r.offset) for r in got) == sorted(
        (m.partition, m.offset) for m in metas
    )
    for p in range(4):
        in_log = [
            (r.key.decode(), r.value.decode())
            for r in sorted(got, key=lambda r: r.offset)
            if r.partition == p
        ]
        in_send_order = [kv for kv, m in zip(sent, metas, strict=True) if m.partition == p]
        assert in_log == in_send_order, f"partition {p} order differs from send order"
