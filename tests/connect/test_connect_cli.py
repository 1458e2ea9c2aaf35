"""``sparklog connect``: settings refused in one line before Spark starts; list and status."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from sparklog.spark.local_session import worker_timeout_line
from sparklog.storage import make_batch, open_root
from tests.spark.spark_support import classic_env
from tests.support.postgres import Postgres

REPO = Path(__file__).resolve().parents[2]


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "sparklog.cli", *args],
        capture_output=True, text=True, cwd=REPO, check=False, timeout=120,
    )  # fmt: skip


def test_delta_sink_settings_are_refused_before_spark_starts(tmp_path: Path) -> None:
    root = tmp_path / "root"
    open_root(str(root)).create_topic("events", 1)
    cases = [
        (["--topic", "nope", "--table", str(tmp_path / "t")], "error: unknown topic 'nope'"),
        (
            ["--topic", "events", "--table", str(tmp_path / "t"), "--value-format", "yaml"],
            "error: value format 'yaml' not accepted; accepted: auto, typed, json, raw, debezium",
        ),
        (
            ["--topic", "events", "--table", "s3://bucket/t"],
            "error: --checkpoint is needed for the remote table 's3://bucket/t' (a folder every "
            "restart of the query reaches)",
        ),
        (
            ["--topic", "events", "--table", str(tmp_path / "t"), "--table-option", "x"],
            "error: --table-option 'x' not accepted; accepted: KEY=VALUE",
        ),
    ]
    for args, line in cases:
        result = cli("-a", str(root), "connect", "delta-sink", *args)
        assert result.returncode == 1, result.stderr
        assert result.stderr.strip().splitlines() == [line]
    broker = cli("-a", "127.0.0.1:9092", "connect", "list")
    assert broker.returncode == 1 and broker.stderr.startswith("error: connectors read and write")


def test_list_and_status_of_a_postgres_source(postgres: Postgres, tmp_path: Path) -> None:
    with psycopg.connect(postgres.dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE listed (id int PRIMARY KEY)")
        conn.execute("INSERT INTO listed SELECT generate_series(1, 3)")
    root = str(tmp_path / "root")
    dsn = postgres.dsn + " password=hunter2"  # trust auth ignores it; it must not be stored
    run = cli("-a", root, "connect", "postgres-source", "--dsn", dsn, "--table", "listed",
              "--prefix", "cdc", "--once")  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert "3 snapshot rows" in run.stdout
    listed = cli("-a", root, "-o", "json", "connect", "list")
    docs = json.loads(listed.stdout)
    assert [(d["name"], d["kind"], d["topics"]) for d in docs] == [
        ("cdc", "postgres-source", ["cdc.public.listed"])
    ]
    assert "hunter2" not in listed.stdout and "password=***" in docs[0]["dsn"]
    status = json.loads(cli("-a", root, "-o", "json", "connect", "status", "cdc", "--dsn",
                            postgres.dsn).stdout)  # fmt: skip
    assert status["snapshot_done"] is True and status["slot"] == "sparklog_cdc"
    assert status["slot_exists"] is True and status["lag_bytes"] >= 0
    unknown = cli("-a", root, "connect", "status", "nope")
    assert unknown.stderr.strip() == "error: no connector 'nope' in this root; known: ['cdc']"


def test_status_says_when_a_killed_sinks_progress_trails_its_table(tmp_path: Path) -> None:
    """Progress is saved every 5 s; a sink killed in between leaves the table ahead of it."""
    import pyarrow as pa

    from sparklog.connect import state
    from sparklog.connect.delta import DeltaTarget
    from sparklog.connect.sink_progress import SinkProgress

    root_path = str(tmp_path / "root")
    root = open_root(root_path, create=True)
    root.create_topic("clicks", 1)
    root.topic("clicks").produce({0: make_batch([b"a", b"b", b"c", b"d"])})
    table = str(tmp_path / "clicks_delta")
    state.save(root, "sink", kind="delta-sink", topic="clicks", table=table, status="stopped")
    target = DeltaTarget(table, "sink")
    # saved on its first batch, then not for an hour: the kill lands before the next save
    progress = SinkProgress(root, "sink", "clicks", save_interval_s=3600)

    def batch(batch_id: int, offsets: list[int]) -> None:
        rows = pa.table(
            {
                "value": [b"x"] * len(offsets),
                "_key": pa.array([None] * len(offsets), pa.binary()),
                "_topic": ["clicks"] * len(offsets),
                "_partition": pa.array([0] * len(offsets), pa.int32()),
                "_offset": pa.array(offsets, pa.int64()),
                "_timestamp": pa.array([0] * len(offsets), pa.timestamp("ms", tz="UTC")),
            }
        )
        assert target.write(rows, batch_id)
        progress(batch_id, rows)  # as the sink's foreachBatch calls it after the commit

    batch(0, [0, 1])  # the first batch's progress is saved
    batch(1, [2, 3])  # not saved yet, and the process is killed
    shown = json.loads(cli("-a", root_path, "-o", "json", "connect", "status", "sink").stdout)
    assert shown["last_batch"] == 1 and shown["progress"]["last_batch"] == 0
    assert shown["records_behind"] == 2  # as of batch 0
    assert "progress records batch 0 but the table has batch 1" in shown["progress_trails"]
    progress.save()  # what a graceful stop does
    caught_up = json.loads(cli("-a", root_path, "-o", "json", "connect", "status", "sink").stdout)
    assert "progress_trails" not in caught_up and caught_up["records_behind"] == 0


@pytest.mark.slow
@pytest.mark.parametrize("worker", ["lookup_data_sources", "create_data_source"])
def test_delta_sink_names_sparks_python_worker_timeout_in_one_line(
    tmp_path: Path, worker: str
) -> None:
    """Spark's worker that looks the source up, or the one that plans the read, starts
    after Spark's fixed 10 s (a busy machine, made by a Python that waits): one error
    line saying so and what to do, no Java. (A lookup that timed out makes Spark say
    "Failed to find the data source: sparklog"; the timeout is in Spark's log.)"""
    root = tmp_path / "root"
    open_root(str(root), create=True).create_topic("events", 1)
    wrapper = tmp_path / "slow-python"
    wrapper.write_text(
        "#!/bin/sh\n"
        f'[ "$2" = pyspark.sql.worker.{worker} ] && sleep 12\n'
        f'exec "{sys.executable}" "$@"\n'
    )
    wrapper.chmod(0o755)
    env = {
        **classic_env(),
        "PYSPARK_PYTHON": str(wrapper),
        "PYSPARK_DRIVER_PYTHON": str(wrapper),
        # workers started one by one, as Spark's 10 s limit applies to
        "PYSPARK_SUBMIT_ARGS": "--conf spark.python.use.daemon=false pyspark-shell",
    }
    spark_log = tmp_path / "spark.log"
    done = subprocess.run(
        [sys.executable, "-m", "sparklog.cli", "-a", str(root), "connect", "delta-sink",
         "--topic", "events", "--table", str(tmp_path / "t"), "--once",
         "--spark-log", str(spark_log)],
        capture_output=True, text=True, cwd=REPO, env=env, check=False, timeout=300,
    )  # fmt: skip
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1, done.stderr[-3000:]
    assert lines == [
        f"delta-events: Spark's log: {spark_log}",
        f"error: delta-events: {worker_timeout_line(str(spark_log))}",
    ], done.stderr[-3000:]
    assert "log4j" in spark_log.read_text()  # Spark's own lines went to its log


@pytest.mark.slow
def test_delta_sink_names_a_spark_failure_in_one_line(tmp_path: Path) -> None:
    """A query that Spark fails (here a --value-schema Spark's DDL parser refuses in the
    first batch) ends the command with Spark's log's name and one error line naming the
    Python error Spark wrapped: no Python traceback, no Java stack, no query plan on the
    terminal; all of it goes to Spark's log."""
    root = tmp_path / "root"
    open_root(str(root), create=True).create_topic("events", 1)
    spark_log = tmp_path / "spark.log"
    done = subprocess.run(
        [sys.executable, "-m", "sparklog.cli", "-a", str(root), "connect", "delta-sink",
         "--topic", "events", "--table", str(tmp_path / "t"), "--once",
         "--value-format", "json", "--value-schema", "id INT,,",
         "--spark-log", str(spark_log)],
        capture_output=True, text=True, cwd=REPO, env=classic_env(), check=False, timeout=300,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr[-3000:]
    assert done.stderr.strip().splitlines() == [
        f"delta-events: Spark's log: {spark_log}",
        "error: delta-events: Spark failed: ParseException: [PARSE_SYNTAX_ERROR] Syntax error "
        "at or near ','. SQLSTATE: 42601 (line 1, pos 7) (all of it in Spark's log: "
        f"{spark_log})",
    ], done.stderr[-3000:]
    logged = spark_log.read_text()
    assert "StreamingQueryException" in logged and "== SQL ==" in logged  # nothing lost
