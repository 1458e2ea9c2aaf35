"""PostgreSQL -> topics -> Delta tables end to end, both processes SIGKILLed again and again.

Three tables get ``changes`` row changes (inserts, updates, deletes) while
``sparklog connect postgres-source`` runs as a process and a Spark driver
(tests/connect/pg_delta_driver.py) lands the three Debezium topics in three Delta
tables (upsert). ``kills`` times a round of changes is made, then the connector
is SIGKILLed once it has written some of it and restarted, then the driver's
process group is SIGKILLed once a Delta table moved and restarted. The default
run kills each once among 4,000 changes (each driver restart costs a Spark
start); the soak (``SPARKLOG_SOAK=1``) 5 times among 10,000 (290 s on 2 shared
cores); ``SPARKLOG_CONNECT_E2E_KILLS`` / ``_CHANGES`` set the default run's.
At the end both catch up (``--once``, AvailableNow) and: every Delta table equals
its PostgreSQL table row by row, and every topic holds each change once (no two
records with one LSN and key) and replays to its table.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sparklog.storage import open_root
from tests.connect.pg_history import (
    CHANGES_PER_STEP,
    REPO,
    TABLES,
    History,
    check_topics_mirror_tables,
    create_tables,
    start_connector,
)
from tests.spark.spark_support import classic_env
from tests.support.postgres import Postgres
from tests.support.waiting import wait_for

psycopg = pytest.importorskip("psycopg")
deltalake = pytest.importorskip("deltalake")
pytestmark = pytest.mark.slow

KILLS = int(os.environ.get("SPARKLOG_CONNECT_E2E_KILLS", "1"))
CHANGES = int(os.environ.get("SPARKLOG_CONNECT_E2E_CHANGES", "4000"))
TOPICS = [f"shop.public.{t}" for t in TABLES]


def start_driver(url: str, tmp_path: Path, mode: str) -> subprocess.Popen:
    debug_env = {
        **classic_env(),
        "JDK_JAVA_OPTIONS": "-Dsun.io.serialization.extendedDebugInfo=true",
    }
    log = open(tmp_path / "driver.log", "a")  # noqa: SIM115  (the child keeps it)
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "tests.connect.pg_delta_driver", url,
             str(tmp_path / "ck"), str(tmp_path / "delta"), mode, *TOPICS],
            cwd=REPO, env=debug_env, start_new_session=True, stdout=log,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
    finally:
        log.close()


#: Spark's own failure, seen once in CI (2026-11-28): every query of the final driver
#: failed while Spark serialized a micro-batch's task ("Task serialization failed: ...
#: Illegal size 5 of collection, expected 6": a Scala collection inside the task
#: changed while it was written).  Not reproduced here: ten local runs, and a driver
#: crashed before a batch's commit and replayed, passed.  The driver's JVM runs with
#: extended serialization debug info so that the next one names the field.
SPARK_SERIALIZATION_RACE = (
    "Task serialization failed: java.lang.IllegalStateException: Illegal size"
)


def catch_up(url: str, tmp_path: Path) -> None:
    """Run the driver once (AvailableNow) to the topics' end; it must exit 0.

    A driver that died of :data:`SPARK_SERIALIZATION_RACE` is started once more, as a
    deployment restarts a failed query: the sink is exactly-once across restarts, and
    the tables are compared row by row after it.
    """
    log_path = tmp_path / "driver.log"
    for attempt in (1, 2):
        start = log_path.stat().st_size if log_path.exists() else 0
        final = start_driver(url, tmp_path, "once")
        try:
            code = final.wait(timeout=300)
        finally:
            kill_group(final)
        if code == 0:
            return
        output = log_path.read_text(errors="replace")[start:]
        if attempt == 2 or SPARK_SERIALIZATION_RACE not in output:
            raise AssertionError(f"the driver exited {code}:\n{output[-4000:]}")


def kill_group(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def kill(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait()


def delta_batches(tmp_path: Path) -> int:
    """Micro-batches committed to the three Delta tables so far (-1 each before the first)."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    total = 0
    for topic in TOPICS:
        try:
            version = DeltaTable(str(tmp_path / "delta" / topic)).transaction_version(
                f"e2e-{topic}"
            )
        except TableNotFoundError:
            version = None
        total += -1 if version is None else version
    return total


def delta_rows(tmp_path: Path, topic: str) -> list[tuple[Any, ...]]:
    from deltalake import DeltaTable

    data = DeltaTable(str(tmp_path / "delta" / topic)).to_pyarrow_table()
    return sorted(tuple(r.values()) for r in data.select(["id", "name", "qty"]).to_pylist())


@pytest.mark.parametrize(
    ("kills", "changes"),
    [
        pytest.param(KILLS, CHANGES, id="default"),
        pytest.param(5, 10_000, marks=pytest.mark.soak, id="soak"),
    ],
)
def test_postgres_to_delta_through_topics_under_kills(
    postgres: Postgres, tmp_path: Path, kills: int, changes: int
) -> None:
    create_tables(postgres)
    history = History()
    history.round(postgres, transactions=4)  # rows before the connector: its snapshot
    snapshot_rows, history_before = sum(map(len, history.live.values())), history.changes
    url = f"file://{tmp_path}/root"
    root = open_root(url)
    per_round = max(1, changes // (2 * CHANGES_PER_STEP) // (kills + 1))

    def topic_records() -> int:
        """Records in the topics (their high watermarks); fails if the connector exited."""
        if connector.poll() is not None:
            raise AssertionError(
                f"connector exited {connector.returncode}: {connector.stdout.read()}"
            )
        existing = set(root.list_topics())
        return sum(
            root.topic(t).partition(p).refresh().high_watermark
            for t in TOPICS
            if t in existing
            for p in range(root.topic(t).partitions)
        )

    connector = start_connector(url, postgres, log=tmp_path / "connector.log")
    wait_for(lambda: topic_records() > 0, timeout_s=120, what="the snapshot in the topics")
    driver = start_driver(url, tmp_path, "stream")
    try:
        for _ in range(kills):
            written, landed = topic_records(), delta_batches(tmp_path)
            history.round(postgres, transactions=per_round)
            wait_for(
                lambda w=written: topic_records() > w, timeout_s=120, what="connector progress"
            )
            kill(connector)
            connector = start_connector(url, postgres, log=tmp_path / "connector.log")
            wait_for(
                lambda d=landed: delta_batches(tmp_path) > d, timeout_s=180, what="Delta progress"
            )
            kill_group(driver)
            driver = start_driver(url, tmp_path, "stream")
        history.round(postgres, transactions=per_round)
    finally:
        kill(connector)
        kill_group(driver)
    last = start_connector(url, postgres, "--once", log=tmp_path / "connector.log")
    assert last.wait(timeout=180) == 0, (tmp_path / "connector.log").read_text()[-4000:]
    catch_up(url, tmp_path)

    assert history.changes >= changes
    ops = check_topics_mirror_tables(root, postgres)
    assert ops["r"] == snapshot_rows
    assert ops["c"] + ops["u"] + ops["d"] == history.changes - history_before
    with psycopg.connect(postgres.dsn) as conn:
        for table, topic in zip(TABLES, TOPICS, strict=True):
            expected = sorted(conn.execute(f"SELECT id, name, qty FROM {table}").fetchall())
            assert delta_rows(tmp_path, topic) == expected, table
