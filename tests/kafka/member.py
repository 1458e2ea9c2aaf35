"""A confluent-kafka group member run as its own process by the group tests.

``python -m tests.kafka.member BOOTSTRAP GROUP TOPIC OUT_DIR NAME [PROTOCOL]``
(``classic``, the default, or KIP-848's ``consumer``): consumes with
a synchronous commit after each record, appends ``partition offset value`` lines
to ``OUT_DIR/NAME.records`` and its current assignment to ``NAME.assignment``,
and leaves the group cleanly once ``OUT_DIR/NAME.stop`` exists.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from confluent_kafka import Consumer


def main(
    bootstrap: str, group: str, topic: str, out_dir: str, name: str, protocol: str = "classic"
) -> None:
    out = Path(out_dir)
    assignment_path = out / f"{name}.assignment"

    def write_assignment(consumer: Consumer, partitions: list) -> None:
        current = sorted(tp.partition for tp in consumer.assignment())
        assignment_path.write_text(json.dumps(current))

    config = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    }
    if protocol == "consumer":  # KIP-848: the broker's keys set session and assignor
        config["group.protocol"] = "consumer"
    else:
        config.update(
            {
                "session.timeout.ms": 6000,
                "heartbeat.interval.ms": 300,
                "partition.assignment.strategy": "range",
            }
        )
    consumer = Consumer(config)
    if protocol == "consumer":  # incremental: the assignment is noted after each poll
        consumer.subscribe([topic])
    else:
        consumer.subscribe(
            [topic],
            on_assign=lambda c, ps: (c.assign(ps), write_assignment(c, ps)),
            on_revoke=lambda c, ps: (c.unassign(), assignment_path.write_text("[]")),
        )
    with open(out / f"{name}.records", "a") as records:
        while not (out / f"{name}.stop").exists():
            msg = consumer.poll(0.2)
            if protocol == "consumer":
                write_assignment(consumer, [])
            if msg is None or msg.error() is not None:
                continue
            consumer.commit(message=msg, asynchronous=False)
            records.write(f"{msg.partition()} {msg.offset()} {msg.value().decode()}\n")
            records.flush()
    consumer.close()


if __name__ == "__main__":
    main(*sys.argv[1:7])
