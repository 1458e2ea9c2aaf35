"""Consumer groups of Kafka clients: client-side assignment, rebalances, shared commits."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.brokers import REPO, Cluster
from tests.support.waiting import wait_for

TOPIC = "orders"
PARTITIONS = 6


class Members:
    """Member processes (tests/kafka/member.py) writing what they consume to files."""

    def __init__(self, workdir: Path, group: str) -> None:
        self.dir = workdir / "members"
        self.dir.mkdir(exist_ok=True)
        self.group = group
        self.procs: dict[str, subprocess.Popen] = {}

    def start(self, name: str, bootstrap: str) -> None:
        self.procs[name] = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.kafka.member",
                bootstrap,
                self.group,
                TOPIC,
                str(self.dir),
                name,
            ],
            cwd=REPO,
        )

    def stop(self, name: str) -> None:
        (self.dir / f"{name}.stop").touch()
        assert self.procs[name].wait(timeout=60) == 0

    def stop_all(self) -> None:
        for name, proc in self.procs.items():
            if proc.poll() is None:
                (self.dir / f"{name}.stop").touch()
        for proc in self.procs.values():
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()

    def assignment(self, name: str) -> list[int]:
        path = self.dir / f"{name}.assignment"
        return json.loads(path.read_text() or "[]") if path.exists() else []

    def records(self, names: list[str] | None = None) -> list[str]:
        out = []
        for path in sorted(self.dir.glob("*.records")):
            if names is None or path.stem in names:
                out += [line.split(" ", 2)[2] for line in path.read_text().splitlines()]
        return out

    def split(self, names: list[str]) -> bool:
        """Each member has partitions; together they cover every partition once."""
        assigned = [self.assignment(n) for n in names]
        parts = [p for ps in assigned for p in ps]
        return all(assigned) and sorted(parts) == list(range(PARTITIONS))


def produce(bootstrap: str, values: list[str]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i, value in enumerate(values):
        producer.produce(TOPIC, key=str(i).encode(), value=value.encode())
    assert producer.flush(60) == 0


@pytest.mark.slow
def test_group_splits_rebalances_commits_and_resumes_after_restart(
    kafka_cluster: Cluster, tmp_path: Path
) -> None:
    for broker_id in range(3):
        kafka_cluster.start(broker_id)
    bootstrap = kafka_cluster.kafka_bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(timeout=30)
    members = Members(tmp_path, "billing")
    try:
        first = [f"a{i}" for i in range(300)]
        produce(bootstrap, first)
        for name in ("m1", "m2", "m3"):
            members.start(name, bootstrap)
        wait_for(lambda: members.split(["m1", "m2", "m3"]), what="three members split")
        wait_for(lambda: sorted(members.records()) == sorted(first), what="first records")

        members.stop("m2")  # leaves the group: the others take its partitions
        wait_for(lambda: members.split(["m1", "m3"]), what="rebalance after m2 left")
        second = [f"b{i}" for i in range(200)]
        produce(bootstrap, second)
        wait_for(
            lambda: (
                sorted(members.records(["m1", "m3"])) != []
                and sorted(members.records()) == sorted(first + second)
            ),
            what="second records",
        )
        members.stop_all()

        for broker_id in range(3):  # every broker restarts; offsets are in the root
            kafka_cluster.brokers[broker_id].terminate()
        for broker_id in range(3):
            kafka_cluster.restart(broker_id)
        third = [f"c{i}" for i in range(150)]
        produce(kafka_cluster.kafka_bootstrap, third)
        members.start("m4", kafka_cluster.kafka_bootstrap)
        members.start("m5", kafka_cluster.kafka_bootstrap)
        wait_for(lambda: sorted(members.records(["m4", "m5"])) == sorted(third), what="resume")
        wait_for(lambda: members.split(["m4", "m5"]), what="two members split")
        # every record read exactly once across all members and restarts
        assert sorted(members.records()) == sorted(first + second + third)
    finally:
        members.stop_all()
