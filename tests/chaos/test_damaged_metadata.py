"""One damaged topic metadata file takes no other topic down (issue 15, item 7, broker/CLI)."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

from sparklog.client.transports.flight_client import BrokerClient
from sparklog.errors import CorruptRecordError
from sparklog.storage import make_batch, open_root
from tests.chaos.inproc import inproc_broker

DAMAGE = {
    "torn": b'{"name": "bad", "id',
    "empty": b"",
    "not_an_object": b"[1, 2]",
    "missing_keys": json.dumps({"name": "bad"}).encode(),
    "wrong_types": json.dumps(
        {"name": "bad", "id": "x", "partitions": "two", "config": 3, "created_ms": 0}
    ).encode(),
}


def _damaged_root(tmp_path: pathlib.Path, damage: bytes) -> str:
    url = f"file://{tmp_path}/root"
    root = open_root(url)
    root.create_topic("good", 2)
    root.create_topic("bad", 1)
    meta = tmp_path / "root" / "topics" / "bad" / "meta"
    (meta / sorted(p.name for p in meta.iterdir())[-1]).write_bytes(damage)
    return url


@pytest.mark.parametrize("kind", sorted(DAMAGE))
def test_broker_starts_and_serves_other_topics(tmp_path, kind: str) -> None:
    url = _damaged_root(tmp_path, DAMAGE[kind])
    with inproc_broker(url) as (server, loc), BrokerClient(loc) as client:
        assert "bad" in server.broker.damaged_topics  # reported, and isolated
        assert client.produce("good", 1, make_batch([b"a", b"b"])).base_offset == 0
        got = client.fetch("good", 1, 0, max_wait_ms=0)
        assert [v for b in got.batches for v in b.column("value").to_pylist()] == [b"a", b"b"]
        assert sorted(client.list_topics()) == ["bad", "good"]
        everything = client._action("metadata", {"topics": None})
        assert sorted(everything["topics"]) == ["good"]
        assert "damaged" in everything["damaged_topics"]["bad"]
        with pytest.raises(CorruptRecordError) as info:
            client.metadata(["bad"])
        assert not info.value.retriable and "bad" in str(info.value)


def test_cli_prints_one_line_for_a_damaged_file(tmp_path) -> None:
    url = _damaged_root(tmp_path, DAMAGE["torn"])
    for command in (["topics", "describe", "bad"], ["offsets", "bad"]):
        done = subprocess.run(
            [sys.executable, "-m", "sparklog.cli", "-a", url, *command],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode != 0
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
        assert "00000000000000000000.json is damaged" in lines[0]
