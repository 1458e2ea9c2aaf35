"""A consumer-group member process for tests (``python -m tests.client.member ...``).

Arguments: ADDRESS GROUP TOPIC OUT.
Writes its current assignment to ``OUT.assignment.json`` after every rebalance,
appends ``partition offset`` lines for every record it consumes to ``OUT.log``,
commits after every poll, and on SIGTERM closes cleanly (leaving the group).
"""

from __future__ import annotations

import json
import os
import signal
import sys

from sparklog import Consumer


def main() -> None:
    address, group, topic, out = sys.argv[1:5]
    stop = {"now": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.update(now=True))
    consumer = Consumer(
        address,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=3000,
        heartbeat_interval_ms=300,
        rebalance_timeout_ms=5000,
    )

    def write_assignment(tps: list) -> None:
        tmp = f"{out}.assignment.tmp"
        with open(tmp, "w") as f:
            json.dump(sorted(tp.partition for tp in tps), f)
        os.replace(tmp, f"{out}.assignment.json")

    consumer.subscribe([topic], on_assign=write_assignment, on_revoke=lambda tps: None)
    with open(f"{out}.log", "a") as log:
        while not stop["now"]:
            records = consumer.poll_records(timeout_ms=200)
            for r in records:
                log.write(f"{r.partition} {r.offset}\n")
            log.flush()
            if records:
                consumer.commit()
    consumer.close()


if __name__ == "__main__":
    main()
