"""A Quix Streams exactly-once application, run by tests/kafka/test_compat_quix.py in its own
venv (tests/kafka/apps/quix-requirements.txt).

It reads JSON records ``{"key": ..., "i": ...}``, regroups them by ``key`` (Quix creates the
repartition topic), keeps a running count per key in its state store (Quix creates the
compacted changelog topic) and writes ``{"key": ..., "count": n}`` for every record, with
``processing.guarantee`` exactly-once: its output, offsets and changelog go in one
transaction. The transactional id is fixed, so a restarted instance fences the killed
one's open transaction at once (Quix's default is a new random id per start, which leaves
that transaction to its timeout); the static member id lets the restart take the killed
member's partitions without waiting out its session.

Usage: python quix_count.py BOOTSTRAP SOURCE SINK GROUP STATE_DIR
"""

from __future__ import annotations

import sys
from typing import Any

from quixstreams import Application, State

#: records per transaction: small, so a kill lands between commits with work left
COMMIT_EVERY_RECORDS = 50


def count(value: dict[str, Any], state: State) -> dict[str, Any]:
    """This key's count so far, this record included."""
    seen = int(state.get("count", 0)) + 1
    state.set("count", seen)
    return {"key": value["key"], "count": seen}


def main() -> None:
    bootstrap, source, sink, group, state_dir = sys.argv[1:6]
    app = Application(
        broker_address=bootstrap,
        consumer_group=group,
        processing_guarantee="exactly-once",
        auto_offset_reset="earliest",
        state_dir=state_dir,
        commit_interval=0.5,
        commit_every=COMMIT_EVERY_RECORDS,
        loglevel="INFO",
        consumer_extra_config={
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500,
            "group.instance.id": f"{group}-member",
        },
        producer_extra_config={
            "transactional.id": f"{group}-txn",
            "transaction.timeout.ms": 10000,
        },
    )
    source_topic = app.topic(source, key_deserializer="str", value_deserializer="json")
    sink_topic = app.topic(sink, key_serializer="str", value_serializer="json")
    records = app.dataframe(source_topic).group_by(lambda value: value["key"], name="by-key")
    records = records.apply(count, stateful=True)
    records.to_topic(sink_topic)
    app.run()


if __name__ == "__main__":
    main()
