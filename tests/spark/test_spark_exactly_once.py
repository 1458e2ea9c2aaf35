"""End-to-end exactly-once: a topic->topic query killed at chosen points, restarted, complete.

The kills are tests/spark/exactly_once_support.py's; task failures make Spark
retry tasks.  After the restarts the output topic must hold every input record
exactly once.  The input is produced through an in-process broker that journals its
records (format 3) and does not fold them while the drivers run, so the source reads
them through the journal's tail; the broker leases the output too, so the sink hands
each batch's commit to it.  (The same kills on the foreachBatch recipe for update
mode, with the input written without a broker, are in
test_spark_exactly_once_update.py: a file of its own, so the two slowest Spark
tests run on different test workers.)
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from sparklog.storage import make_batch, open_root
from tests.broker_lite.test_handed_commits import revokes
from tests.chaos.inproc import inproc_broker
from tests.spark.exactly_once_support import KILL_POINTS, run_driver

pytestmark = pytest.mark.slow


def produce(broker, start: int, count: int) -> None:
    """Records ``start`` .. ``start + count - 1`` over the input's partitions, through the
    broker: acknowledged once its journal holds them (format 3), folded into the shard
    logs only at the broker's stop, so the driver (no broker) reads them through the
    journal's tail."""
    ids = range(start, start + count)
    partitions = broker.state.topic("in").partitions
    broker.produce(
        "in",
        [
            (p, make_batch([f"v{i}".encode() for i in mine], keys=[f"k{i}".encode() for i in mine]))
            for p in range(partitions)
            if (mine := [i for i in ids if i % partitions == p])
        ],
    )


def output_values(root) -> Counter:
    topic = root.topic("out")
    values: Counter = Counter()
    for p in range(topic.partitions):
        values.update(topic.partition(p).read(0).column("value").to_pylist())
    return values


@pytest.mark.parametrize(
    "clean_run_after_task_failures",
    # the default run ends with the run whose tasks fail (one Spark start fewer); the soak
    # form restarts once more, cleanly, after it
    [pytest.param(False, id="default"), pytest.param(True, marks=pytest.mark.soak, id="soak")],
)
def test_killed_and_restarted_query_writes_every_record_once(
    tmp_path: Path, clean_run_after_task_failures: bool
) -> None:
    url = f"file://{tmp_path}/root"
    root = open_root(url)
    root.create_topic("in", 3)
    root.create_topic("out", 4)
    checkpoint = tmp_path / "ck"
    # the input comes through a broker journalling its records (issue 37 item 3: the
    # source reads the shard logs and the journal's tail); the brokerless path is
    # test_spark_exactly_once_update.py's
    with inproc_broker(url, fold_interval_ms=3_600_000) as (server, _):
        broker = server.broker
        # the broker leases the output's shard too, so each batch's commit is handed to it
        # with its (app id, batch id) marker (issue 37 item 3), replays and kills included
        broker.produce("out", [(p, make_batch([b"leased"])) for p in range(4)])
        produce(broker, 0, 200)
        for n, fault in enumerate(KILL_POINTS):
            run_driver(url, checkpoint, fault)  # asserts that it was killed there
            produce(broker, 200 + 40 * n, 40)
        if not clean_run_after_task_failures:
            produce(broker, 320, 30)
        assert broker.state.journal is not None and broker.state.journal.unfolded_keys()
        # Task failures (first attempts of every sink and source task) are retried by Spark.
        assert run_driver(url, checkpoint, "sink.write,source.read") == 0
        if clean_run_after_task_failures:
            produce(broker, 320, 30)
            assert run_driver(url, checkpoint, None) == 0
        assert revokes(tmp_path / "root") == 0  # no commit went around the leader
    got = output_values(root)
    expected = Counter([b"leased"] * 4 + [f"v{i}".encode() for i in range(350)])
    assert got == expected, (
        f"missing {sorted(expected - got)[:5]}, duplicated {sorted(got - expected)[:5]}"
    )
