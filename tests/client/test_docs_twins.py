"""docs/client.md's kafka-python program and its sparklog twin, run as written.

The sparklog twin runs against a storage root and against a broker; the kafka-python twin
runs against the broker's Kafka listener when kafka-python is installed and the broker
has one.  Both must print the same line.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.client.brokers import REPO, BrokerCluster, free_port

DOC = REPO / "docs" / "client.md"
EXPECTED = repr(sorted((f"user-{i % 3}".encode(), i) for i in range(10)))


def twin(name: str) -> str:
    """The code block that follows ``<!-- twin: name -->`` in docs/client.md."""
    found = re.search(
        rf"<!-- twin: {re.escape(name)} -->\s*```python\n(.*?)```", DOC.read_text(), re.S
    )
    assert found, f"docs/client.md has no twin {name!r}"
    return found.group(1)


def run(program: str, bootstrap: str, tmp_path: Path) -> str:
    """Run ``program`` with its BOOTSTRAP line pointing at ``bootstrap``; its stdout."""
    source, count = re.subn(r"^BOOTSTRAP = .*$", f"BOOTSTRAP = {bootstrap!r}", program, flags=re.M)
    assert count == 1, "the twin sets BOOTSTRAP on one line"
    script = tmp_path / "twin.py"
    script.write_text(source)
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=REPO
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip()


def test_twins_differ_only_in_imports_and_address():
    def body(code: str) -> list[str]:
        return [
            line
            for line in code.splitlines()
            if not line.startswith(("from ", "import ", "BOOTSTRAP = "))
        ]

    assert body(twin("kafka-python")) == body(twin("sparklog"))


def test_sparklog_twin_on_a_storage_root(tmp_path):
    assert run(twin("sparklog"), str(tmp_path / "root"), tmp_path) == EXPECTED


def test_sparklog_twin_through_a_broker(broker, tmp_path):
    assert run(twin("sparklog"), broker.bootstrap, tmp_path) == EXPECTED


def _has_kafka_listener() -> bool:
    from sparklog.broker_lite.config import BrokerConfig

    return "kafka_listen" in {f.name for f in dataclasses.fields(BrokerConfig)}


@pytest.mark.skipif(importlib.util.find_spec("kafka") is None, reason="kafka-python not installed")
@pytest.mark.skipif(
    not _has_kafka_listener(), reason="the broker has no Kafka listener yet (issue 12)"
)
def test_kafka_python_twin_through_the_kafka_listener(tmp_path):
    kafka_port = free_port()
    cluster = BrokerCluster(
        f"file://{tmp_path}/root",
        tmp_path,
        env={"SPARKLOG_KAFKA_LISTEN": f"127.0.0.1:{kafka_port}"},
    )
    cluster.start(1)
    try:
        cluster.wait_live(1)
        assert run(twin("kafka-python"), f"127.0.0.1:{kafka_port}", tmp_path) == EXPECTED
    finally:
        cluster.stop()
