"""kcat (librdkafka's command-line client, Debian's ``kcat``) against the listener:
metadata (``-L``), produce (``-P``) and consume (``-C``), including the read-only
``__consumer_offsets`` in the listing.  Skipped, saying why, where kcat is missing.
"""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.brokers import Cluster


def kcat(*args: str, stdin: str | None = None) -> str:
    if shutil.which("kcat") is None:
        pytest.skip("kcat is not installed (Debian: kcat; .ci/system-packages)")
    done = subprocess.run(["kcat", *args], input=stdin, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_kcat_lists_produces_and_consumes(brokers: Cluster) -> None:
    bootstrap = brokers.kafka_bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("kcat-topic", 2, 1)])["kcat-topic"].result(timeout=30)
    brokers.wait_listed("kcat-topic")

    listing = json.loads(kcat("-b", bootstrap, "-L", "-J"))
    topics = {t["topic"]: len(t["partitions"]) for t in listing["topics"]}
    assert topics["kcat-topic"] == 2
    assert topics["__consumer_offsets"] == 50
    assert sorted(b["id"] for b in listing["brokers"]) == sorted(brokers.brokers)

    kcat("-b", bootstrap, "-P", "-t", "kcat-topic", "-p", "1", "-K", ":", stdin="a:1\nb:2\nc:3\n")
    read = kcat(
        "-b",
        bootstrap,
        "-C",
        "-t",
        "kcat-topic",
        "-p",
        "1",
        "-o",
        "beginning",
        "-e",
        "-f",
        "%k=%s@%o\n",
    )
    assert read.splitlines() == ["a=1@0", "b=2@1", "c=3@2"]
