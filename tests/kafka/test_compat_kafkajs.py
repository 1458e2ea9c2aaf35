"""kafkajs' ``admin.resetOffsets({earliest: true})`` against the listener (issue 24 item 5).

kafkajs commits -2 for every partition; the listener stores it as given (as Kafka)
and kafkajs' admin reads it back (before item 5 the commit was INVALID_REQUEST and
kafkajs hung).  What readers of the group then do with -2 is
``test_compat_offsets.py``'s (librdkafka).  kafkajs is installed
by the test from the committed lock (tests/kafka/js/package-lock.json, ``npm ci``
into build/kafkajs; ``SPARKLOG_KAFKAJS_DIR`` names another install); skipped,
saying why, only where node and npm are missing.
"""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.brokers import Cluster
from tests.support.kafkajs import install_kafkajs, run_script
from tests.support.waiting import wait_for

TOPIC = "js-resets"
GROUP = "js-reset-me"


@pytest.mark.slow
def test_kafkajs_reset_offsets_earliest_commits_minus_2(
    brokers: Cluster,
) -> None:
    missing = install_kafkajs()
    if missing:
        pytest.skip(missing)
    bootstrap = brokers.kafka_bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(timeout=30)
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(3):
        producer.produce(TOPIC, value=f"v{i}".encode())
    assert producer.flush(30) == 0

    consumer = Consumer(  # the group reads everything and commits offset 3
        {
            "bootstrap.servers": bootstrap,
            "group.id": GROUP,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    seen: list[bytes] = []
    try:
        consumer.subscribe([TOPIC])

        def read() -> bool:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                seen.append(msg.value())
            return len(seen) >= 3

        wait_for(read, timeout_s=60, what="the group reads the topic")
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()

    answer = run_script("reset_offsets.js", bootstrap, TOPIC, GROUP, timeout_s=120)
    assert answer["offsets"] == [[0, "-2"]]  # stored as kafkajs committed it
    # kafkajs' consumer resolves a committed -2 with its own ``fromBeginning`` (kafkajs
    # issue 1020, the same against Kafka): with it, the group reads everything again
    again = run_script("consume_group.js", bootstrap, TOPIC, GROUP, "3", "true", timeout_s=120)
    assert again["values"] == ["v0", "v1", "v2"]
