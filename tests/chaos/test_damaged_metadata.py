"""Damaged topic metadata: one bad topic document takes no other topic down; a damaged
metadata-log file is reported in one line naming it.

Topic documents live in the cluster metadata log; a document that does not
describe a topic (missing keys, wrong types, an unreadable value schema) is
isolated to its topic, while a damaged commit file of the log itself is a
``CorruptRecordError`` naming the file, never a traceback.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

from sparklog.client.transports.flight_client import BrokerClient
from sparklog.errors import CorruptRecordError
from sparklog.protocol import actions
from sparklog.protocol.actions import METADATA
from sparklog.storage import make_batch, open_root
from sparklog.storage.cluster_metadata import METADATA_LOG_PREFIX, topic_record
from tests.chaos.inproc import inproc_broker

DAMAGE = {
    "missing_keys": {"name": "bad"},
    "wrong_types": {"name": "bad", "id": "x", "partitions": "two", "config": 3, "created_ms": 0},
    "bad_schema": {
        "name": "bad",
        "id": "y",
        "partitions": 1,
        "config": {},
        "created_ms": 0,
        "value_schema_id": "s",
        "value_schemas": {"s": "not base64 of a schema"},
    },
}


def _damaged_root(tmp_path: pathlib.Path, doc: dict) -> str:
    url = f"file://{tmp_path}/root"
    root = open_root(url)
    root.create_topic("good", 2)
    root.metadata.append(lambda image: [topic_record(doc)])
    return url


@pytest.mark.parametrize("kind", sorted(DAMAGE))
def test_broker_starts_and_serves_other_topics(tmp_path, kind: str) -> None:
    url = _damaged_root(tmp_path, DAMAGE[kind])
    with inproc_broker(url) as (server, loc), BrokerClient(loc) as client:
        assert "bad" in server.broker.damaged_topics  # reported, and isolated
        assert client.produce("good", 1, make_batch([b"a", b"b"])).base_offset == 0
        got = client.fetch("good", 1, 0, max_wait_ms=0)
        assert [v for b in got.batches for v in b.column("value").to_pylist()] == [b"a", b"b"]
        assert sorted(client.call(actions.LIST_TOPICS)) == ["bad", "good"]
        everything = client.call(METADATA, topics=None)
        assert sorted(everything["topics"]) == ["good"]
        assert "damaged" in everything["damaged_topics"]["bad"]
        with pytest.raises(CorruptRecordError) as info:
            client.metadata(["bad"])
        assert not info.value.retriable and "bad" in str(info.value)


def _cli(url: str, *command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sparklog.cli", "-a", url, *command],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_cli_prints_one_line_for_a_damaged_topic_document(tmp_path) -> None:
    url = _damaged_root(tmp_path, DAMAGE["wrong_types"])
    for command in (["topics", "describe", "bad"], ["offsets", "bad"]):
        done = _cli(url, *command)
        assert done.returncode != 0
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
        assert "of topic 'bad' is damaged" in lines[0] and METADATA_LOG_PREFIX in lines[0]


def test_cli_prints_one_line_naming_a_torn_metadata_log_file(tmp_path) -> None:
    url = _damaged_root(tmp_path, DAMAGE["missing_keys"])
    log = tmp_path / "root" / METADATA_LOG_PREFIX
    newest = sorted(p for p in log.iterdir() if p.suffix == ".json" and p.stem.isdigit())[-1]
    newest.write_bytes(newest.read_bytes()[:20])  # a torn last commit
    done = _cli(url, "topics", "list")
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert newest.name in lines[0] and "damaged" in lines[0]
