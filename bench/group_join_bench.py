"""1,000 one-member groups joining at once: seconds until all are Stable (issue 36).

One broker process on a local root (Kafka listener on 127.0.0.1). For each group
count N, N one-member groups (``protocol_type=consumer``, Kafka's consumer
protocol, as librdkafka sends it) each send a JoinGroup and, once answered, the
leader's SyncGroup, over ``--connections`` connections with the requests of a
connection pipelined (raw frames: ``tests/kafka/wire.py``). Measured from the
first JoinGroup sent until every SyncGroup is answered (the group is Stable),
against the same with 1 group in the same run.

The broker runs with ``group_initial_rebalance_delay_ms`` (``--initial-delay-ms``,
Kafka's ``group.initial.rebalance.delay.ms``, 3,000 by default there): every join
of an empty group waits that long, so each of the N joins is a waiting request at
once. Before issue 36 each waiting join held a request thread polling every
50 ms; now it is parked (``sparklog/groups/purgatory.py``). The broker's thread
count is read from ``/proc`` while the joins wait.

    .venv/bin/python bench/group_join_bench.py --groups 1,100,1000,5000
"""

from __future__ import annotations

import argparse
import datetime
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kio.schema.join_group.v5.request import JoinGroupRequest, JoinGroupRequestProtocol
from kio.schema.sync_group.v3.request import SyncGroupRequest, SyncGroupRequestAssignment

from sparklog.broker_lite.kafka.groups import encode_assignment, encode_subscription
from sparklog.topic_partition import TopicPartition
from tests.kafka.test_group_purgatory import _read
from tests.kafka.wire import Connection
from tests.support.brokers import Cluster


def _join(group: str) -> JoinGroupRequest:
    return JoinGroupRequest(
        group_id=group,  # type: ignore[arg-type]
        session_timeout=datetime.timedelta(seconds=45),  # type: ignore[arg-type]
        rebalance_timeout=datetime.timedelta(seconds=300),  # type: ignore[arg-type]
        member_id="",
        group_instance_id=None,
        protocol_type="consumer",
        protocols=(JoinGroupRequestProtocol(name="range", metadata=encode_subscription(["t"])),),
    )


def _sync(group: str, generation: int, member: str) -> SyncGroupRequest:
    assignment = encode_assignment([TopicPartition("t", 0)])
    return SyncGroupRequest(
        group_id=group,  # type: ignore[arg-type]
        generation_id=generation,  # type: ignore[arg-type]
        member_id=member,
        group_instance_id=None,
        assignments=(SyncGroupRequestAssignment(member_id=member, assignment=assignment),),
    )


def _threads(pid: int) -> int:
    return int(
        next(
            line.split()[1]
            for line in Path(f"/proc/{pid}/status").read_text().splitlines()
            if line.startswith("Threads:")
        )
    )


def run(address: str, pid: int, prefix: str, groups: int, connections: int) -> dict[str, float]:
    """Seconds until ``groups`` one-member groups are Stable, and the broker's peak
    thread count seen while their joins were answered."""
    names = [f"{prefix}-{i:05d}" for i in range(groups)]
    conns = [Connection(address, timeout_s=600) for _ in range(min(connections, groups))]
    mine: list[list[str]] = [names[c :: len(conns)] for c in range(len(conns))]
    peak = _threads(pid)
    started = time.perf_counter()
    try:
        for conn, part in zip(conns, mine, strict=True):
            for group in part:
                conn.send_frame(conn.encode(_join(group)))
        peak = max(peak, _threads(pid))
        answers: dict[str, tuple[int, str]] = {}
        for conn, part in zip(conns, mine, strict=True):
            for group in part:
                _, body = _read(conn, _join(group))
                assert int(body.error_code) == 0, (group, body.error_code)
                answers[group] = (int(body.generation_id), body.member_id)
            peak = max(peak, _threads(pid))
        for conn, part in zip(conns, mine, strict=True):
            for group in part:
                conn.send_frame(conn.encode(_sync(group, *answers[group])))
        for conn, part in zip(conns, mine, strict=True):
            for group in part:
                _, body = _read(conn, _sync(group, *answers[group]))
                assert int(body.error_code) == 0, (group, body.error_code)
        return {"seconds": time.perf_counter() - started, "peak_threads": peak}
    finally:
        for conn in conns:
            conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--groups", default="1,100,1000", help="comma-separated group counts")
    parser.add_argument("--connections", type=int, default=50)
    parser.add_argument("--initial-delay-ms", type=int, default=3000)
    args = parser.parse_args()
    counts = [int(x) for x in args.groups.split(",")]
    work = Path(tempfile.mkdtemp(prefix="sparklog-group-join-"))
    cluster = Cluster(work, f"file://{work}/root")
    try:
        broker = cluster.start(
            0,
            group_initial_rebalance_delay_ms=args.initial_delay_ms,
            max_connections_per_ip=10_000,
        )
        assert broker.kafka_address is not None and broker.proc is not None
        pid = broker.proc.pid
        idle = _threads(pid)
        print(f"broker threads idle: {idle}; initial rebalance delay {args.initial_delay_ms} ms")
        base = run(broker.kafka_address, pid, "warm", 1, 1)  # the codec's first use
        base = run(broker.kafka_address, pid, "one", 1, 1)
        print(f"1 group: {base['seconds']:.2f} s")
        print("| groups | connections | s until all Stable | x 1 group | peak broker threads |")
        print("|---|---|---|---|---|")
        for n in counts:
            got = run(broker.kafka_address, pid, f"n{n}", n, args.connections)
            print(
                f"| {n:,} | {min(args.connections, n)} | {got['seconds']:.2f} | "
                f"{got['seconds'] / base['seconds']:.2f} | {int(got['peak_threads'])} |",
                flush=True,
            )
    finally:
        cluster.stop_all()


if __name__ == "__main__":
    main()
