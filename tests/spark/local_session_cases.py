"""The local Spark sparklog's commands start: its log in a file, loopback, the worker timeout.

One real local[2] session, started as ``connect delta-sink`` and ``demo`` start
theirs (:func:`sparklog.spark.local_session.start_session`). Its workers' Python
(``PYSPARK_PYTHON`` as the context starts; workers not forked by a daemon) is a
wrapper that, once the session is up, waits past Spark's fixed 10 s before starting
Python: reading a sparklog table then fails with Spark's real "Python worker failed
to connect back", which the classifier, the demo's retry and its one-line message
are checked against.

Run by tests/spark/test_local_session.py in a fresh Python (not collected by a
suite run): the session must be its process's first JVM.
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sparklog.demo import DemoError, retry_on_worker_timeout
from sparklog.spark.local_session import (
    LOOPBACK,
    is_worker_timeout,
    local_conf,
    log_size,
    start_session,
    timed_out,
    worker_timeout_line,
)
from tests.spark.spark_support import spark_env

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def slow_python_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Path]]:
    """(session, its log file): planner workers start only after Spark's 10 s have passed."""
    folder = tmp_path_factory.mktemp("local-session")
    wrapper = folder / "slow-python"
    # Spark waits 10 s for the worker to connect back (PythonWorkerFactory); 12 s is past it
    slow = folder / "slow"  # the wrapper waits only once this exists (after start-up)
    wrapper.write_text(f'#!/bin/sh\n[ -e "{slow}" ] && sleep 12\nexec "{sys.executable}" "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
    os.environ.update(spark_env())
    from pyspark.sql import SparkSession
    from pyspark.sql.utils import AnalysisException

    log = folder / "spark.log"
    builder = (
        SparkSession.builder.master("local[2]")
        .appName("test_local_session")
        .config("spark.ui.enabled", "false")
        # workers started one by one, as Spark's 10 s limit applies to (no forking daemon)
        .config("spark.python.use.daemon", "false")
    )
    # the context's workers run the Python these name when it starts
    os.environ.update(PYSPARK_PYTHON=str(wrapper), PYSPARK_DRIVER_PYTHON=str(wrapper))
    try:
        session = start_session(builder, str(log))
    finally:
        os.environ.update(spark_env())
    with pytest.raises(AnalysisException, match="root"):  # looks the source up, quickly
        session.read.format("sparklog").load()
    slow.touch()
    try:
        yield session, log
    finally:
        session.stop()


def test_a_local_session_binds_to_loopback_and_logs_to_its_file(
    slow_python_session: tuple[Any, Path],
) -> None:
    session, log = slow_python_session
    conf = session.sparkContext.getConf()
    assert conf.get("spark.driver.host") == LOOPBACK
    assert conf.get("spark.driver.bindAddress") == LOOPBACK
    text = log.read_text()
    assert text.strip(), "Spark's start-up lines went elsewhere"
    assert "resolves to a loopback address" not in text  # bound where it was told


def test_the_user_address_wins_over_loopback() -> None:
    assert local_conf({"SPARK_LOCAL_IP": "10.1.2.3"})["spark.driver.host"] == "10.1.2.3"
    assert local_conf({})["spark.driver.bindAddress"] == LOOPBACK


def test_spark_python_worker_timeout_is_one_line_and_retried_once(
    slow_python_session: tuple[Any, Path], tmp_path: Path
) -> None:
    session, log = slow_python_session
    root = f"file://{tmp_path}/root"

    def read() -> int:
        reader = session.read.format("sparklog").option("root", root)
        return int(reader.option("subscribe", "clicks").load().count())

    retries: list[str] = []
    with pytest.raises(DemoError) as failed:
        retry_on_worker_timeout(read, on_retry=lambda: retries.append("again"))
    assert retries == ["again"]  # once, then the error
    spark_error = failed.value.__cause__
    assert spark_error is not None and is_worker_timeout(spark_error), str(spark_error)[:2000]
    assert not is_worker_timeout(ValueError("topic 'x' not found"))
    line = str(failed.value)
    assert "\n" not in line and line == worker_timeout_line()
    assert "10 s" in line and "docs/spark.md" in line
    assert str(log) in worker_timeout_line(str(log))


def test_a_retry_that_succeeds_returns_its_result() -> None:
    attempts: list[int] = []
    text = "org.apache.spark.SparkException: Python worker failed to connect back."

    def flaky() -> str:
        attempts.append(1)
        if len(attempts) == 1:
            raise RuntimeError(text)
        return "done"

    assert retry_on_worker_timeout(flaky, on_retry=lambda: None) == "done"
    assert len(attempts) == 2
    with pytest.raises(KeyError):  # any other failure is not retried
        retry_on_worker_timeout(lambda: {}["x"], on_retry=lambda: None)


def test_a_timeout_only_in_sparks_log_counts_from_this_runs_lines(tmp_path: Path) -> None:
    """A lookup that timed out is in Spark's log, not in the error: read from ``since``."""
    log = tmp_path / "spark.log"
    not_found = RuntimeError("[DATA_SOURCE_NOT_FOUND] Failed to find the data source: sparklog")
    log.write_text(
        "WARN DataSourceManager: Skipping the lookup of Python Data Sources\n"
        "org.apache.spark.SparkException: Python worker failed to connect back.\n"
    )
    earlier_run = log_size(str(log))
    assert timed_out(not_found, str(log))
    assert not timed_out(not_found, str(log), since=earlier_run)  # an earlier run's lines
    assert not timed_out(not_found, str(tmp_path / "missing.log"))
