"""Faust's table recovery against the listener, SIGKILLed mid-way and restarted, on one
broker and on three (issue 39's application suite).

tests/kafka/apps/faust_table.py keeps two in-memory tables backed by changelog topics:
``seen`` (record number -> key) and ``counts`` (key -> records). The test feeds it a first
batch, then a second, kills it with SIGKILL while it works through the second, and
restarts it: its tables come back from their changelogs alone (an in-memory store), and it
then processes what the killed instance left. Its tables are then compared with the truth:
every record in ``seen`` under at_least_once, Faust as released (idempotent, so Faust's
replay of what came after its last offset commit changes nothing); under exactly_once, with
the fixes to Faust's commit and recovery that faust_table.py applies, every record in
``seen`` and every count exact (the restart made to take the order in which Faust as
released hands its agent a record twice). As released, Faust's exactly_once loses or
doubles table updates across a kill, on Kafka as here (docs/broker.md, "Faust's
exactly_once", has the evidence).

Faust runs in a venv of its own (tests/support/appenv.py, pins in
tests/kafka/apps/faust-requirements.txt): every faust-streaming release caps click below
8.4, the project pins 8.5.1. Skipped, saying why, only where that venv cannot be made.
"""

from __future__ import annotations

import json
import pathlib
import signal
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.appenv import AppProcesses, app_python
from tests.support.brokers import Cluster
from tests.support.waiting import wait_for

APPS = pathlib.Path(__file__).resolve().parent / "apps"
KEYS = 20
PARTITIONS = 2
FIRST_BATCH_RECORDS = 1000
SECOND_BATCH_RECORDS = 2000
TOTAL_RECORDS = FIRST_BATCH_RECORDS + SECOND_BATCH_RECORDS
#: the longest the restarted exactly_once app holds back the seek to the committed offsets
#: that ends its recovery, waiting for its agent to handle an event: Faust as released
#: resumes its source partitions before that seek, so records fetched before it can reach
#: the agent and a partition's last one is then handled twice (docs/broker.md, "Faust's
#: exactly_once"). Held back, that order is taken on every restart the fix does not cover,
#: not in about one of ten; with the fix no event comes first and the seek waits not at all
SEEK_WAIT_S = 1.0


@pytest.fixture(scope="module")
def faust_python() -> pathlib.Path:
    python, why = app_python(APPS / "faust-requirements.txt")
    if python is None:
        pytest.skip(why)
    return python


def key_of(record: int) -> str:
    return f"k{record % KEYS}"


def produce(bootstrap: str, topic: str, first: int, last: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for record in range(first, last):
        producer.produce(topic, key=key_of(record), value=str(record))
    assert producer.flush(30) == 0


class AppRun:
    """One run of faust_table.py: its process and the tables it last wrote."""

    def __init__(self, process: subprocess.Popen[bytes], dump: pathlib.Path) -> None:
        self.process = process
        self.dump = dump

    def state(self) -> dict[str, Any]:
        """The tables as the app last wrote them (empty before its first write)."""
        try:
            return dict(json.loads(self.dump.read_text()))
        except FileNotFoundError:
            return {"recovered": False, "seen": {}, "counts": {}, "committed": {}}

    def wait_until(self, done: Any, what: str, timeout_s: float = 60) -> dict[str, Any]:
        """The app's state once ``done(state)`` holds; fails naming ``what`` and its last
        state's sizes otherwise."""
        last: dict[str, Any] = {}

        def check() -> bool:
            nonlocal last
            assert self.process.poll() is None, f"the app exited: {self.process.returncode}"
            last = self.state()
            return bool(done(last))

        try:
            wait_for(check, timeout_s=timeout_s, what=what)
        except AssertionError as timed_out:
            raise AssertionError(f"{timed_out}; the app's last state: {summary(last)}") from None
        return last


def summary(state: dict[str, Any]) -> str:
    counts = state.get("counts", {})
    return (
        f"recovered={state.get('recovered')} seen={len(state.get('seen', {}))} "
        f"counted={sum(counts.values())} committed={state.get('committed')}"
    )


@pytest.fixture
def app_runs(faust_python: pathlib.Path, brokers: Cluster, tmp_path) -> Iterator[Any]:
    """Starts faust_table.py with a data folder of its own; every run stopped at teardown."""
    runs = AppProcesses(faust_python, APPS / "faust_table.py", tmp_path)

    def start(
        source: str, app_id: str, guarantee: str, fix: str, name: str, seek_wait_s: float = 0
    ) -> AppRun:
        dump = tmp_path / f"{name}.json"
        args = [brokers.kafka_bootstrap, source, app_id, str(tmp_path / name), guarantee]
        return AppRun(runs.start(name, [*args, str(dump), fix, str(seek_wait_s)]), dump)

    yield start
    runs.stop_all()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("guarantee", "fix"),
    [("at_least_once", "as-released"), ("exactly_once", "exactly-once-fixed")],
    ids=["at-least-once", "exactly-once"],
)
def test_faust_tables_recover_after_a_sigkill(
    brokers: Cluster, app_runs: Any, guarantee: str, fix: str
) -> None:
    """at_least_once runs Faust as released; exactly_once with the fixes to its commit and
    recovery that faust_table.py applies (as released it loses or doubles table updates
    across a kill, on Kafka as here: docs/broker.md, "Faust's exactly_once")."""
    bootstrap = brokers.kafka_bootstrap
    source, app_id = f"faust-in-{guarantee}", f"faust-{guarantee}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(source, PARTITIONS, 1)])[source].result(timeout=30)

    produce(bootstrap, source, 0, FIRST_BATCH_RECORDS)
    first = app_runs(source, app_id, guarantee, fix, "first")
    first.wait_until(
        lambda state: len(state["seen"]) >= FIRST_BATCH_RECORDS, "the first batch kept"
    )
    produce(bootstrap, source, FIRST_BATCH_RECORDS, TOTAL_RECORDS)
    first.wait_until(
        lambda state: len(state["seen"]) > FIRST_BATCH_RECORDS, "the second batch begun"
    )
    first.process.send_signal(signal.SIGKILL)
    first.process.wait()

    # tables from changelogs; under exactly_once, the seek that ends its recovery waits for
    # an event handled before it, if one can come (SEEK_WAIT_S)
    seek_wait_s = SEEK_WAIT_S if guarantee == "exactly_once" else 0
    second = app_runs(source, app_id, guarantee, fix, "second", seek_wait_s)
    state = second.wait_until(
        lambda state: (
            state["recovered"]
            and len(state["seen"]) >= TOTAL_RECORDS
            # offsets 0..n-1 in each partition: the input's end is committed
            and sum(offset or 0 for offset in state["committed"].values()) >= TOTAL_RECORDS
        ),
        "every record kept and the input's end committed after the restart",
    )
    assert state["seen"] == {str(record): key_of(record) for record in range(TOTAL_RECORDS)}
    if guarantee == "exactly_once":
        per_key = TOTAL_RECORDS // KEYS
        assert state["counts"] == {key_of(k): per_key for k in range(KEYS)}  # none lost or twice
