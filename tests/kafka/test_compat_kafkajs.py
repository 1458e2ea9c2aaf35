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

import json
import os
import pathlib
import shutil
import subprocess

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.brokers import Cluster
from tests.support.waiting import wait_for

SCRIPT = pathlib.Path(__file__).parent / "js" / "reset_offsets.js"
TOPIC = "js-resets"
GROUP = "js-reset-me"


#: kafkajs at the version tests/kafka/js/package-lock.json pins, installed on first use
KAFKAJS_DIR = pathlib.Path(__file__).resolve().parents[2] / "build" / "kafkajs"


def node_env() -> dict[str, str]:
    env = dict(os.environ)
    where = os.environ.get("SPARKLOG_KAFKAJS_DIR") or str(KAFKAJS_DIR)
    extra = str(pathlib.Path(where) / "node_modules")
    env["NODE_PATH"] = os.pathsep.join(p for p in (extra, env.get("NODE_PATH")) if p)
    return env


def install_kafkajs() -> str | None:
    """Install the pinned kafkajs (npm ci from the committed lock) unless node resolves it;
    the reason if it cannot be had."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        return "node/npm are not installed"
    resolve = ["node", "-e", "require.resolve('kafkajs')"]
    if subprocess.run(resolve, env=node_env(), capture_output=True).returncode == 0:
        return None
    KAFKAJS_DIR.mkdir(parents=True, exist_ok=True)
    for name in ("package.json", "package-lock.json"):
        shutil.copy(SCRIPT.parent / name, KAFKAJS_DIR / name)
    done = subprocess.run(
        ["npm", "ci", "--silent", "--no-audit", "--no-fund"],
        cwd=KAFKAJS_DIR,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if done.returncode != 0:
        return f"npm ci of kafkajs failed: {done.stderr.strip()[-300:]}"
    return None


@pytest.mark.slow
def test_kafkajs_reset_offsets_earliest_commits_minus_2(
    one_broker: Cluster,
) -> None:
    missing = install_kafkajs()
    if missing:
        pytest.skip(missing)
    bootstrap = one_broker.kafka_bootstrap
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

    done = subprocess.run(
        ["node", str(SCRIPT), bootstrap, TOPIC, GROUP],
        env=node_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert answer["offsets"] == [[0, "-2"]]  # stored as kafkajs committed it
