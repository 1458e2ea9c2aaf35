"""`sparklog produce` is not all-or-nothing, so it must say what it wrote (issue 26 item 4).

A write that fails and a Ctrl-C both end non-zero (130 for Ctrl-C) with one line
that says how many records reached each partition and the first line not written,
so a user re-running the input knows what not to send twice.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

from sparklog.storage import open_root
from tests.cli.test_cli import REPO


def _env() -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SPARKLOG_")}
    clean.update(PYTHONPATH=str(REPO), COLUMNS="200")
    return clean


def _latest(url: str, topic: str) -> dict[int, int]:
    t = open_root(url).topic(topic)
    return {p: t.partition(p).high_watermark for p in range(t.partitions)}


def test_a_failed_write_says_what_was_written(tmp_path):
    url = f"file://{tmp_path}/root"
    open_root(url).create_topic("t", 2, {"max.message.bytes": 2000})
    lines = [f"small-{i}" for i in range(10)] + ["x" * 5000] + [f"late-{i}" for i in range(5)]
    path = tmp_path / "in.txt"
    path.write_text("\n".join(lines) + "\n")
    done = subprocess.run(
        [sys.executable, "-m", "sparklog.cli", "-a", url, "produce", "t", "--file", str(path)],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=120,
    )
    assert done.returncode == 1, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("error: line 11: record of 5000 bytes is larger than")
    assert "10 of 10 records were written" in line and "nothing after it was sent" in line
    per_partition = {int(p): int(n) for p, n in re.findall(r"partition (\d+): (\d+)", line)}
    assert per_partition == {p: n for p, n in _latest(url, "t").items() if n}
    assert sum(per_partition.values()) == 10


def test_ctrl_c_exits_130_and_says_what_was_written(tmp_path):
    url = f"file://{tmp_path}/root"
    open_root(url).create_topic("t", 3)
    proc = subprocess.Popen(
        [sys.executable, "-m", "sparklog.cli", "-a", url, "produce", "t", "--linger-ms", "1"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(),
    )
    assert proc.stdin is not None
    proc.stdin.write(b"".join(b"line-%d\n" % i for i in range(500)))
    proc.stdin.flush()
    deadline = time.monotonic() + 60
    while sum(_latest(url, "t").values()) < 500:  # all 500 written; stdin still open
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    [line] = err.decode().strip().splitlines()
    assert line.startswith("error: interrupted: 500 of 500 records were written (")
    per_partition = {int(p): int(n) for p, n in re.findall(r"partition (\d+): (\d+)", line)}
    assert per_partition == {p: n for p, n in _latest(url, "t").items() if n}
    assert out == b""
