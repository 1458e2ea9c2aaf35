"""Spark's Python workers find format("sparklog") however the driver was started.

A first script run as ``.venv/bin/python job.py`` without the venv on the PATH
used to fail with DATA_SOURCE_NOT_FOUND: Spark starts its workers with
``PYSPARK_PYTHON``, else ``python3`` from the PATH, which lacks sparklog.  The
installed ``sparklog_workers_python.pth`` sets ``PYSPARK_PYTHON`` to the
driver's interpreter when it is unset (build_support/sparklog_build.py).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sparklog.storage import open_root
from tests.spark.spark_data import fill

SCRIPT = """
import sys
from pyspark.sql import SparkSession
spark = (
    SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
)
df = spark.read.format("sparklog").option("root", sys.argv[1]).option("subscribe", "t").load()
print("COUNT", df.count())
spark.stop()
"""


def _plain_env(tmp_path: Path) -> dict[str, str]:
    """A user's shell: no PYSPARK_* variables, no PYTHONPATH, the venv not on the PATH."""
    venv_bin = str(Path(sys.executable).parent)
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("PYSPARK_") and k not in ("PYTHONPATH", "VIRTUAL_ENV")
    }
    env["PATH"] = os.pathsep.join(
        p for p in env.get("PATH", "").split(os.pathsep) if p and p != venv_bin
    )
    env["HOME"] = str(tmp_path)
    return env


@pytest.mark.slow
def test_a_script_run_by_the_venvs_python_off_the_path_finds_the_source(tmp_path) -> None:
    env = _plain_env(tmp_path)
    other = shutil.which("python3", path=env["PATH"])
    if other is not None:  # the PATH's python3 must lack sparklog, or the test proves nothing
        probe = subprocess.run(
            [other, "-c", "import sparklog"],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            check=False,
        )
        assert probe.returncode != 0, f"{other} on the PATH has sparklog installed"
    url = f"file://{tmp_path}/root"
    fill(open_root(url), "t", partitions=2, batches=1, per_batch=5)
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, url],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert "COUNT 10" in done.stdout, done.stderr[-3000:]
