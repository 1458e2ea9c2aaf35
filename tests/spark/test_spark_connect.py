"""format("sparklog") through Spark Connect, against a local Connect server the test starts."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sparklog.storage import open_root
from tests.spark.spark_data import fill
from tests.spark.spark_support import REPO, classic_env

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def connect() -> Iterator[Any]:
    """A Spark Connect client session on a server subprocess (stopped by pid afterwards)."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.spark.spark_connect_server", str(port)],
        cwd=REPO,
        env=classic_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    ready = threading.Event()

    def watch() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.strip() == "ready":
                ready.set()

    threading.Thread(target=watch, daemon=True).start()
    try:
        if not ready.wait(180):
            raise AssertionError("the Spark Connect server did not start within 180 s")
        from pyspark.sql import SparkSession

        saved_env = dict(os.environ)  # a Connect client marks the process as Connect-only
        session = SparkSession.builder.remote(f"sc://127.0.0.1:{port}").getOrCreate()
        try:
            yield session
        finally:
            session.stop()
            os.environ.clear()
            os.environ.update(saved_env)
    finally:
        assert proc.stdin is not None
        with contextlib.suppress(BrokenPipeError):
            proc.stdin.close()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_batch_read_through_connect(connect, tmp_path: Path) -> None:
    url = f"file://{tmp_path}/root"
    fill(open_root(url), "t", partitions=2, batches=2, per_batch=10)
    df = connect.read.format("sparklog").option("root", url).option("subscribe", "t").load()
    assert df.columns[:5] == ["key", "value", "topic", "partition", "offset"]
    got = sorted((r.partition, r.offset) for r in df.select("partition", "offset").collect())
    assert got == [(p, o) for p in (0, 1) for o in range(20)]


def test_streaming_query_through_connect(connect, tmp_path: Path) -> None:
    url = f"file://{tmp_path}/root"
    root = open_root(url)
    fill(root, "in", partitions=2, batches=1, per_batch=15)
    root.create_topic("out", 2)
    query = (
        connect.readStream.format("sparklog")
        .option("root", url)
        .option("subscribe", "in")
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "10")
        .load()
        .select("key", "value")
        .writeStream.format("sparklog")
        .option("root", url)
        .option("topic", "out")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(180)
    assert query.exception() is None
    topic = root.topic("out")
    values = sorted(
        v for p in range(2) for v in topic.partition(p).read(0).column("value").to_pylist()
    )
    assert values == sorted(f"in-{p}-{i}".encode() for p in range(2) for i in range(15))


def test_bad_option_message_reaches_a_connect_client(connect, tmp_path: Path) -> None:
    url = f"file://{tmp_path}/root"
    with pytest.raises(Exception, match="exactly one of the options 'subscribe'"):
        connect.read.format("sparklog").option("root", url).load().collect()
