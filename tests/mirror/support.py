"""Helpers of the mirror tests: records with every field set, mirror processes, comparison."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from sparklog.storage import LogRoot, make_batch

REPO = pathlib.Path(__file__).resolve().parents[2]


def records(partition: int, start: int, count: int) -> pa.RecordBatch:
    """``count`` records with keys, values, CreateTime timestamps and headers (some null)."""
    n = range(start, start + count)
    return make_batch(
        [None if i % 17 == 5 else f"v{partition}-{i}".encode() for i in n],
        keys=[None if i % 11 == 3 else f"k{i}".encode() for i in n],
        timestamps_ms=[1_700_000_000_000 + i * 7 for i in n],
        headers=[None if i % 5 == 0 else [("h", f"{i}".encode()), ("p", b"x")] for i in n],
    )


def produce(root: LogRoot, topic: str, partitions: int, rounds: int, per_round: int = 5) -> int:
    """Write ``rounds`` flushes to every partition of ``topic``; return records written."""
    handle = root.topic(topic)
    written = 0
    for r in range(rounds):
        handle.produce({p: records(p, r * per_round, per_round) for p in range(partitions)})
        written += partitions * per_round
    return written


def table(root: LogRoot, topic: str, partition: int) -> list[dict[str, Any]]:
    log = root.topic(topic).partition(partition)
    state = log.refresh()
    return log.read(state.log_start_offset).to_pylist()


def assert_same(source: LogRoot, dest: LogRoot, topic: str, dest_topic: str | None = None) -> int:
    """Every partition's records and offsets identical on both sides; return the count."""
    src = source.describe_topic(topic)
    dst = dest.describe_topic(dest_topic or topic)
    assert dst.partitions == src.partitions
    total = 0
    for p in range(src.partitions):
        left, right = table(source, topic, p), table(dest, dest_topic or topic, p)
        assert len(left) == len(right), (topic, p, len(left), len(right))
        for a, b in zip(left, right, strict=True):
            assert a == b, (topic, p, a, b)
        total += len(left)
    return total


def mirror_cmd(dest: str, link: str, options: dict[str, Any] | None, *extra: str) -> list[str]:
    cmd = [sys.executable, "-m", "sparklog", "-a", dest]
    if options:
        cmd += ["--storage-option", f"key={options['key']}"]
        cmd += ["--storage-option", f"secret={options['secret']}"]
        cmd += ["--storage-option", f"client_kwargs={json.dumps(options['client_kwargs'])}"]
    return [*cmd, "mirror", "run", link, *extra]


def start_mirror(
    dest: str, link: str, options: dict[str, Any] | None, log_path: pathlib.Path
) -> subprocess.Popen[bytes]:
    with open(log_path, "ab") as out:
        return subprocess.Popen(
            mirror_cmd(dest, link, options, "--interval-ms", "20"),
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=REPO,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )


def run_once(dest: str, link: str, options: dict[str, Any] | None) -> str:
    done = subprocess.run(
        mirror_cmd(dest, link, options, "--once"),
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def kill(proc: subprocess.Popen[bytes]) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)


def wait_for(condition: Callable[[], bool], timeout_s: float = 60, what: str = "") -> None:
    """Poll ``condition`` until true (a deadline, not a sleep as synchronisation)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def mirrored_total(dest: LogRoot, topics: list[str]) -> int:
    total = 0
    for name in topics:
        if name not in dest.list_topics():
            continue
        handle = dest.topic(name)
        for p in range(handle.partitions):
            total += handle.partition(p).refresh().high_watermark
    return total
