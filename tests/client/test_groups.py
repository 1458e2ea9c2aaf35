"""A consumer group of several real processes sharing one storage root (embedded mode)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from sparklog import Admin, Producer
from tests.support.waiting import wait_for

REPO = Path(__file__).resolve().parents[2]
PARTITIONS = 6


def _start(address: str, out: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        [sys.executable, "-m", "tests.client.member", address, "g", "jobs", str(out)],
        env=env,
        cwd=REPO,
    )


def _assignment(out: Path) -> list[int] | None:
    try:
        return json.loads(Path(f"{out}.assignment.json").read_text())
    except (FileNotFoundError, ValueError):
        return None


def _consumed(outs: list[Path]) -> set[tuple[int, int]]:
    seen = set()
    for out in outs:
        path = Path(f"{out}.log")
        if path.exists():
            for line in path.read_text().splitlines():
                p, o = line.split()
                seen.add((int(p), int(o)))
    return seen


def _produce(address: str, count: int) -> set[tuple[int, int]]:
    with Producer(address) as producer:
        futures = [producer.send("jobs", f"job-{i}", key=f"k{i}") for i in range(count)]
        producer.flush()
        return {(m.partition, m.offset) for m in (f.get(10) for f in futures)}


def _stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=30)


def _covers_disjointly(outs: list[Path]) -> bool:
    parts = [_assignment(o) for o in outs]
    if any(p is None for p in parts):
        return False
    flat = [x for p in parts for x in p]  # type: ignore[union-attr]
    return sorted(flat) == list(range(PARTITIONS)) and all(parts)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["embedded", "broker"])
def test_group_shares_rebalances_and_resumes(mode, tmp_path, request):
    if mode == "broker":
        address = request.getfixturevalue("broker").address
    else:
        address = f"file://{tmp_path}/root"
    with Admin(address) as admin:
        admin.create_topic("jobs", partitions=PARTITIONS)
    produced = _produce(address, 300)
    outs = [tmp_path / f"m{i}" for i in range(3)]
    procs = [_start(address, out) for out in outs]
    try:
        wait_for(lambda: _covers_disjointly(outs), 60, "three members sharing six partitions")
        wait_for(lambda: _consumed(outs) >= produced, 60, "first records consumed")
        # one member leaves: the other two take over all partitions
        _stop(procs[0])
        # before the rebalance the two survivors hold only 4 of the 6 partitions
        wait_for(lambda: _covers_disjointly(outs[1:]), 60, "two members taking over")
        produced |= _produce(address, 120)
        wait_for(lambda: _consumed(outs[1:]) | _consumed(outs[:1]) >= produced, 60, "all consumed")
    finally:
        for proc in procs:
            if proc.poll() is None:
                _stop(proc)
    with Admin(address) as admin:
        lag = admin.describe_group("g").lag
        assert {(x.partition, x.lag) for x in lag} == {(p, 0) for p in range(PARTITIONS)}
    # everyone restarts: they resume from committed offsets and see only new records
    new_outs = [tmp_path / f"r{i}" for i in range(2)]
    procs = [_start(address, out) for out in new_outs]
    try:
        wait_for(lambda: _covers_disjointly(new_outs), 60, "restarted members assigned")
        fresh = _produce(address, 60)
        wait_for(lambda: _consumed(new_outs) >= fresh, 60, "new records after restart")
    finally:
        for proc in procs:
            _stop(proc)
    assert _consumed(new_outs) == fresh, "restarted members re-read nothing already committed"
