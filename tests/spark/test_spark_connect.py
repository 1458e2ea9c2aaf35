"""format("sparklog") through Spark Connect, against a local Connect server the test starts."""

from __future__ import annotations

import contextlib
import os
import queue
import signal
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


@pytest.fixture(scope="module")
def connect(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A Spark Connect client session on a server subprocess (stopped by pid afterwards)."""
    log_path = tmp_path_factory.mktemp("connect") / "server.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.spark.spark_connect_server"],
            cwd=REPO,
            env=classic_env(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            start_new_session=True,
        )
    ports: queue.Queue[int | None] = queue.Queue()

    def watch() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            words = line.split()
            if words[:1] == ["ready"]:
                ports.put(int(words[1]))
        ports.put(None)  # the server's stdout closed: it has ended

    threading.Thread(target=watch, daemon=True).start()
    try:
        try:
            port = ports.get(timeout=300)
        except queue.Empty:
            port = None
        if port is None:
            tail = log_path.read_text()[-3000:]
            raise AssertionError(
                f"the Spark Connect server did not start (exit code {proc.poll()}):\n{tail}"
            )
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
