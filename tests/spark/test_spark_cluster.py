"""format("sparklog") on a real Spark standalone cluster (master + two workers on 127.0.0.1).

Every other Spark test uses local[2], where the driver and executors share one
JVM; here tasks run in two worker JVMs' executors, with Python workers of their
own, as on a multi-host cluster: a batch read, a streaming topic -> topic query
checked exactly-once, and the sink on an S3 root (moto).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sparklog.spark.compat import HAS_ADMISSION_CONTROL
from sparklog.storage import open_root
from tests.spark.spark_cluster import cluster_session, standalone_cluster
from tests.spark.spark_data import fill
from tests.spark.spark_support import source_options
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster_spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with standalone_cluster(tmp_path_factory.mktemp("standalone")) as cluster:
        session = cluster_session(cluster)
        try:
            yield session
        finally:
            session.stop()


def pairs(root: Any, topic: str) -> Counter[tuple[bytes | None, bytes]]:
    """How many times each (key, value) is stored in the topic."""
    handle = root.topic(topic)
    return Counter(
        (row["key"], row["value"])
        for p in range(handle.partitions)
        for row in handle.partition(p).read(0).to_pylist()
    )


def test_batch_read_runs_on_the_workers_executors(cluster_spark, tmp_path: Path) -> None:
    url = f"file://{tmp_path}/root"
    root = open_root(url)
    fill(root, "t", partitions=4, batches=5, per_batch=100)
    status = cluster_spark.sparkContext._jsc.sc().getExecutorMemoryStatus
    wait_for(lambda: status().size() == 3, what="the driver and an executor on each worker")
    df = cluster_spark.read.format("sparklog").options(root=url, subscribe="t").load()
    got = df.select("partition", "offset").collect()
    assert len(got) == 2000 and len(set(got)) == 2000


@pytest.mark.parametrize("where", ["file", "s3"])
def test_stream_topic_to_topic_is_exactly_once(cluster_spark, tmp_path: Path, where, request):
    if where == "file":
        url, storage = f"file://{tmp_path}/root", {}
    else:
        url, storage = request.getfixturevalue("s3_root_spec")
    root = open_root(url, storage)
    fill(root, "in", partitions=4, batches=5, per_batch=50)
    root.create_topic("out", 4)
    limits = {"maxOffsetsPerTrigger": "300"} if HAS_ADMISSION_CONTROL else {}
    query = (
        cluster_spark.readStream.format("sparklog")
        .options(**source_options(url, storage))
        .options(subscribe="in", startingOffsets="earliest", **limits)
        .load()
        .select("key", "value")
        .writeStream.format("sparklog")
        .options(**source_options(url, storage))
        .option("topic", "out")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(300)
    assert query.exception() is None, query.exception()
    source, written = pairs(root, "in"), pairs(root, "out")
    assert sum(written.values()) == 1000 and written == source  # each record exactly once
