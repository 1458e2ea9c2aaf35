"""What planning a streaming query costs in the process Spark starts for it.

Spark runs a Python streaming source's driver calls (initialOffset, latestOffset,
partitions, commit) in a fresh Python process per query. pyarrow's ``to_numpy``
imports pandas there (about 0.3 s, measured as most of the gap between a
one-batch query and the Python streaming ceiling in bench/spark_bench.py);
the planning path reads Arrow columns without it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from sparklog.storage import open_root
from tests.spark.spark_data import fill
from tests.spark.spark_support import REPO

PLAN = textwrap.dedent(
    """
    import sys
    import pyspark.sql.streaming.python_streaming_source_runner  # what Spark's runner loads
    from pyspark.sql.datasource import ReadAllAvailable
    from sparklog.spark.source import SparklogDataSource

    assert "pandas" not in sys.modules, "the runner itself imported pandas"
    source = SparklogDataSource(
        {"root": sys.argv[1], "subscribe": "t", "startingOffsets": "earliest"}
    )
    reader = source.streamReader(source.schema())
    start = reader.initialOffset()
    reader.prepareForTriggerAvailableNow()
    end = reader.latestOffset(start, ReadAllAvailable())
    tasks = reader.partitions(start, end)
    reader.latestOffset(end, ReadAllAvailable())
    reader.commit(end)
    print(len(tasks), "pandas" in sys.modules)
    """
)


def test_planning_a_stream_does_not_import_pandas(tmp_path: Path) -> None:
    url = f"file://{tmp_path}/root"
    # past one snapshot (every 32 commits): planning then reads segment tables from it
    fill(open_root(url), "t", partitions=2, batches=40, per_batch=2)
    out = subprocess.run(
        [sys.executable, "-c", PLAN, url],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    tasks, pandas_imported = out.stdout.split()
    assert int(tasks) >= 1
    assert pandas_imported == "False"
