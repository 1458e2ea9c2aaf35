"""A user's own ``storage.py`` and ``broker_lite.py`` beside a notebook break nothing.

The scripts run in a subprocess whose working directory holds both files (as a
notebook's folder would), so the directory is first on ``sys.path``; the files
raise when imported, so any import of the top-level names fails loudly.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run_beside_user_modules(tmp_path: Path, script: str, timeout_s: int) -> str:
    work = tmp_path / "notebook"
    work.mkdir()
    for name in ("storage", "broker_lite"):
        (work / f"{name}.py").write_text(
            f"raise RuntimeError('the user\\'s own {name}.py was imported by sparklog')\n"
        )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script), str(tmp_path / "root")],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def test_import_produce_and_consume_beside_user_storage_py(tmp_path: Path) -> None:
    out = _run_beside_user_modules(
        tmp_path,
        """
        import sys
        import sparklog
        from sparklog.storage import open_root
        root = sys.argv[1]
        sparklog.Admin(root).create_topic("events", partitions=2)
        with sparklog.Producer(root) as producer:
            producer.send("events", b"hello", key=b"user-1").get(timeout=10)
        consumer = sparklog.Consumer(root, group_id="g", auto_offset_reset="earliest")
        consumer.subscribe(["events"])
        values = []
        for _ in range(20):
            values += [record.value for record in consumer.poll_records(timeout_ms=500)]
            if values:
                break
        consumer.close()
        print(values, "storage" in sys.modules, "broker_lite" in sys.modules)
        """,
        timeout_s=120,
    )
    assert out.strip() == "[b'hello'] False False"


@pytest.mark.slow
def test_spark_finds_format_sparklog_beside_user_storage_py(tmp_path: Path) -> None:
    out = _run_beside_user_modules(
        tmp_path,
        """
        import os, sys
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        import sparklog
        root = sys.argv[1]
        sparklog.Admin(root).create_topic("events", partitions=1)
        with sparklog.Producer(root) as producer:
            producer.send("events", b"hello").get(timeout=10)
        from pyspark.sql import SparkSession
        spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
                 .getOrCreate())
        rows = (spark.read.format("sparklog").option("root", root)
                .option("subscribe", "events").load().select("value").collect())
        spark.stop()
        print([bytes(r.value) for r in rows])
        """,
        timeout_s=300,
    )
    assert out.strip().splitlines()[-1] == "[b'hello']"
