"""``sparklog connect run|stop``, progress and lag in metrics and ``connect status``.

A PostgreSQL source's definition, stored by its first run, is run again by name as
a long-running process serving ``/metrics``; ``connect stop`` records a stop request
in the root and the process ends by itself (exit 0). A stored definition whose
table is gone, a wrong host or a role without REPLICATION: one ``error:`` line
naming it. A Delta sink (real Spark) reports the offsets it applied and the
records behind, then stops on request too.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from sparklog.storage import make_batch, open_root
from tests.connect.pg_history import REPO, sql
from tests.spark.spark_support import classic_env
from tests.support.postgres import Postgres, free_port
from tests.support.waiting import wait_for

psycopg = pytest.importorskip("psycopg")


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "sparklog.cli", *args],
        capture_output=True, text=True, cwd=REPO, check=False, timeout=180,
    )  # fmt: skip


def background(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "sparklog.cli", *args],
        cwd=REPO, env=classic_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, start_new_session=True,
    )  # fmt: skip


def stop_by_pid(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def scrape(port: int, proc: subprocess.Popen) -> dict[tuple[str, str], float]:
    """``(sample name, connector label) -> value`` from the process's /metrics; {} if not up."""
    assert proc.poll() is None, proc.stdout.read() if proc.stdout else proc.returncode
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as page:
            text = page.read().decode()
    except OSError:
        return {}
    out: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            key = (sample.name, sample.labels.get("connector", ""))
            out[key] = out.get(key, 0.0) + sample.value
    return out


def status(root: str, name: str) -> dict[str, Any]:
    result = cli("-a", root, "-o", "json", "connect", "status", name)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_postgres_source_run_by_name_reports_progress_and_stops(
    postgres: Postgres, tmp_path: Path
) -> None:
    sql(
        postgres,
        "CREATE TABLE runs (id int PRIMARY KEY, v text)",
        "INSERT INTO runs SELECT g, 'v' || g FROM generate_series(1, 3) g",
    )
    root = str(tmp_path / "root")
    first = cli("-a", root, "connect", "postgres-source", "--dsn", postgres.dsn + " password=x",
                "--table", "runs", "--prefix", "rs", "--once")  # fmt: skip
    assert first.returncode == 0, first.stderr
    assert status(root, "rs")["status"] == "stopped"
    sql(postgres, "INSERT INTO runs SELECT g, 'w' || g FROM generate_series(4, 8) g")

    port = free_port()
    proc = background("-a", root, "connect", "run", "rs", "--metrics-listen", f"127.0.0.1:{port}")
    try:
        metrics = wait_for(
            lambda: (
                (m := scrape(port, proc)).get(("sparklog_connect_records_total", "rs"), 0) >= 5
                and m
            ),
            timeout_s=120,
            what="5 change records in the metrics",
        )
        assert metrics[("sparklog_connect_source_lsn", "rs")] > 0
        assert ("sparklog_connect_source_lag_bytes", "rs") in metrics
        running = status(root, "rs")
        assert running["status"] == "running" and running["pid"] == proc.pid
        stopped = cli("-a", root, "connect", "stop", "rs")
        assert stopped.returncode == 0, stopped.stderr
        assert stopped.stdout.strip() == "rs stopped (status stopped)"
        assert proc.wait(timeout=60) == 0
    finally:
        stop_by_pid(proc)
    final = status(root, "rs")
    assert final["status"] == "stopped" and final["stop_requested_ms"]
    assert final["progress"]["changes"] == 5 and final["progress"]["last_lsn"]
    again = cli("-a", root, "connect", "stop", "rs")
    assert again.returncode == 0 and again.stdout.strip() == "rs is not running (status stopped)"
    topic = open_root(root).topic("rs.public.runs")
    assert topic.partition(0).refresh().high_watermark == 8  # 3 snapshot rows, 5 inserts


def test_run_refuses_a_bad_definition_in_one_line(postgres: Postgres, tmp_path: Path) -> None:
    sql(postgres, "CREATE TABLE gone (id int PRIMARY KEY)", "CREATE ROLE weak LOGIN")
    root = str(tmp_path / "root")
    first = cli("-a", root, "connect", "postgres-source", "--dsn", postgres.dsn, "--table", "gone",
                "--prefix", "bad", "--once")  # fmt: skip
    assert first.returncode == 0, first.stderr
    sql(postgres, "DROP TABLE gone")
    wrong_port = postgres.dsn.replace(f"port={postgres.port}", "port=1")
    weak = postgres.dsn.replace("user=postgres", "user=weak")
    cases = [
        ([], "error: table public.gone not found in database 'postgres' (or not a table)"),
        (["--dsn", wrong_port], "error: cannot connect to PostgreSQL (" + wrong_port + "): "),
        (
            ["--dsn", weak],
            "error: PostgreSQL role 'weak' lacks the REPLICATION attribute "
            "(ALTER ROLE weak REPLICATION)",
        ),
    ]
    for extra, line in cases:
        result = cli("-a", root, "connect", "run", "bad", *extra)
        assert result.returncode == 1, result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(line), lines
    unknown = cli("-a", root, "connect", "run", "nope")
    assert unknown.stderr.strip() == "error: no connector 'nope' in this root; known: ['bad']"
    assert status(root, "bad")["status"] == "stopped"  # the refused runs changed nothing


@pytest.mark.slow
def test_delta_sink_reports_applied_offsets_and_stops(tmp_path: Path) -> None:
    root = str(tmp_path / "root")
    log_root = open_root(f"file://{root}", create=True)
    log_root.create_topic("clicks", 2)

    def produce(start: int) -> None:
        log_root.topic("clicks").produce(
            {p: make_batch([f"c{i}".encode() for i in range(start, start + 10)]) for p in (0, 1)}
        )

    produce(0)
    table = str(tmp_path / "clicks_delta")
    port = free_port()
    spark_log = tmp_path / "sink-spark.log"
    proc = background("-a", root, "connect", "delta-sink", "--topic", "clicks", "--table", table,
                      "--metrics-listen", f"127.0.0.1:{port}",
                      "--spark-log", str(spark_log))  # fmt: skip
    try:

        def applied() -> float:
            metrics = scrape(port, proc)
            return metrics.get(("sparklog_connect_sink_offset", "delta-clicks"), 0)

        wait_for(lambda: applied() == 20, timeout_s=180, what="20 offsets applied")
        produce(10)
        wait_for(lambda: applied() == 40, timeout_s=120, what="40 offsets applied")
        metrics = scrape(port, proc)
        assert metrics[("sparklog_connect_sink_lag_records", "delta-clicks")] == 0
        assert metrics[("sparklog_connect_records_total", "delta-clicks")] == 40
        stopped = cli("-a", root, "connect", "stop", "delta-clicks")
        assert stopped.returncode == 0, stopped.stderr
        assert proc.wait(timeout=120) == 0
    finally:
        stop_by_pid(proc)
    # Spark's own lines are in the file it names, none on the terminal; bound to loopback
    output = proc.stdout.read() if proc.stdout else ""
    assert f"delta-clicks: Spark's log: {spark_log}" in output
    for noise in ("WARN", "log4j", "\tat ", "Exception", "resolves to a loopback address"):
        assert noise not in output, (noise, output[-3000:])
    assert "log4j" in spark_log.read_text()  # Spark's start-up notice, where it was sent
    assert "resolves to a loopback address" not in spark_log.read_text()
    final = status(root, "delta-clicks")
    assert final["spark_log"] == str(spark_log)
    assert final["status"] == "stopped" and final["records_behind"] == 0
    assert final["progress"]["applied_offsets"] == {"0": 20, "1": 20}
    assert final["progress"]["rows"] == 40 and final["last_batch"] >= 1
