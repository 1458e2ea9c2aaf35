"""Go clients from Debian's packages against the listener (issue 24 item 6).

sarama 1.22 (golang-github-shopify-sarama-dev) and kafka-go 0.2
(golang-github-segmentio-kafka-go-dev) are built offline from /usr/share/gocode
(``GO111MODULE=off``) into build/go by the test; the program is
tests/kafka/go/clients (``clients sarama|kafka-go ...``) and prints what it saw
as JSON.  Skipped, saying why, where ``go`` or the libraries are missing
(.ci/system-packages installs them where it can).
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.brokers import Cluster

REPO = pathlib.Path(__file__).resolve().parents[2]
SOURCES = pathlib.Path(__file__).parent / "go"
BUILD = REPO / "build" / "go"
GOCODE = pathlib.Path("/usr/share/gocode")
LIBRARIES = (
    GOCODE / "src/github.com/Shopify/sarama",
    GOCODE / "src/github.com/segmentio/kafka-go",
)


def build() -> pathlib.Path:
    """tests/kafka/go/clients built (skips the test, saying why, where Go or a Debian
    library is missing)."""
    if shutil.which("go") is None:
        pytest.skip("go is not installed (Debian: golang-go; .ci/system-packages)")
    for library in LIBRARIES:
        if not library.is_dir():
            pytest.skip(f"{library} is missing (.ci/system-packages installs it)")
    BUILD.mkdir(parents=True, exist_ok=True)
    out = BUILD / "clients"
    env = dict(
        os.environ,
        GOPATH=str(GOCODE),
        GO111MODULE="off",
        GOFLAGS="",
        GOCACHE=str(BUILD / "cache"),
    )
    done = subprocess.run(
        ["go", "build", "-o", str(out), "./tests/kafka/go/clients"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    return out


def run(program: pathlib.Path, *args: str) -> object:
    done = subprocess.run([str(program), *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"{program.name} failed: {done.stderr[-3000:]}"
    return json.loads(done.stdout)


@pytest.mark.slow
def test_sarama_produces_consumes_as_a_group_and_commits_with_v1(brokers: Cluster) -> None:
    program = build()
    bootstrap = brokers.kafka_bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("go-sarama", 1, 1)])["go-sarama"].result(timeout=30)
    brokers.wait_listed("go-sarama")
    seen = run(
        program, "sarama", "-brokers", bootstrap, "-topic", "go-sarama", "-group", "go-group"
    )
    assert isinstance(seen, dict)
    assert seen["topics"]["go-sarama"] == 1  # ListTopics (Metadata v0, DescribeConfigs v0)
    assert "retention.ms" in seen["configs"]  # DescribeConfig
    assert seen["acls"] == 0  # DescribeAcls v0 decoded (SECURITY_DISABLED, no bindings)
    assert seen["consumed"] == 5
    assert seen["committed"] == 5  # OffsetCommit v1 stored, read back with OffsetFetch


@pytest.mark.slow
def test_kafka_go_produces_and_fetches(brokers: Cluster) -> None:
    program = build()
    bootstrap = brokers.kafka_bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("go-kafka-go", 1, 1)])["go-kafka-go"].result(timeout=30)
    brokers.wait_listed("go-kafka-go")
    values = run(program, "kafka-go", "-brokers", bootstrap, "-topic", "go-kafka-go")
    assert values == [f"go-{i}" for i in range(5)]
