"""Importing the Spark data source loads no module it does not need at import time.

Spark starts each streaming query's Python source runner as a fresh process, which
pays every import of ``sparklog.spark.source`` again: ``pyarrow.compute`` (~0.2 s),
``fsspec`` (~0.15 s), s3fs's transport (botocore, aiohttp: ~0.5 s) and tenacity
(~0.1 s) are imported where they are used instead. The check is which modules are
loaded (no wall clock), in a fresh interpreter.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

#: modules the data source uses only when it reads, writes or retries
DEFERRED = ("pyarrow.compute", "fsspec", "s3fs", "botocore", "aiohttp", "tenacity")


@pytest.mark.parametrize(
    "module", ["sparklog.spark.source", "pyspark_sparklog", "pyspark_sparklog_postgres"]
)
def test_data_source_import_defers_heavy_modules(module: str) -> None:
    script = (
        f"import json, sys; import {module}; "
        f"print(json.dumps([name for name in {list(DEFERRED)!r} if name in sys.modules]))"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == []


def test_transport_errors_are_recognised_once_loaded() -> None:
    """botocore and aiohttp errors still count as outages when s3fs has loaded them."""
    script = """
import json
from sparklog.storage.objectstore import _outcome_open, is_io_failure
before = is_io_failure(ValueError("a bug"))
import aiohttp
import botocore.exceptions as boto
refused = boto.EndpointConnectionError(endpoint_url="http://127.0.0.1:1")
lost = aiohttp.ServerDisconnectedError()
print(json.dumps([before, is_io_failure(refused), _outcome_open(refused),
                  is_io_failure(lost), _outcome_open(lost)]))
"""
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == [False, True, False, True, True]


#: what no Spark worker of the data source needs (client, CLI, broker, console, pandas)
NEVER_IN_WORKERS = (
    "sparklog.cli",
    "sparklog.client.producer",
    "sparklog.client.consumer",
    "sparklog.client.transports",
    "sparklog.broker_lite",
    "sparklog.groups",
    "typer",
    "rich",
    "pandas",
    "pyspark.pandas",
    "fsspec",
    "s3fs",
)
#: per Spark Python worker: (worker module Spark runs, what sparklog then imports, modules of
#: sparklog's that this worker must not load because its job does not use them)
WORKERS = {
    "lookup": (
        "pyspark.sql.worker.lookup_data_sources",
        ["pyspark_sparklog"],
        ("sparklog.storage", "sparklog.spark.stream", "sparklog.spark.sink", "numpy", "pyarrow"),
    ),
    "stream planner": (
        "pyspark.sql.streaming.python_streaming_source_runner",
        ["pyspark_sparklog", "sparklog.spark.stream"],
        ("sparklog.spark.sink", "sparklog.spark.batch", "sparklog.client.partitioner"),
    ),
    "batch planner": (
        "pyspark.sql.worker.plan_data_source_read",
        ["pyspark_sparklog", "sparklog.spark.batch"],
        ("sparklog.spark.sink", "sparklog.spark.stream", "sparklog.client.partitioner"),
    ),
    "writer": (
        "pyspark.sql.worker.write_into_data_source",
        ["pyspark_sparklog", "sparklog.spark.sink"],
        ("sparklog.spark.stream", "sparklog.spark.batch", "sparklog.spark.offsets"),
    ),
}


@pytest.mark.parametrize("worker", sorted(WORKERS))
def test_each_spark_worker_imports_only_what_its_job_needs(worker: str) -> None:
    """Spark gives a Python worker a fixed time to start (docs/spark.md): keep imports small."""
    base, imports, unused = WORKERS[worker]
    banned = [*NEVER_IN_WORKERS, *unused]
    script = (
        f"import importlib, json, sys; importlib.import_module({base!r}); "
        f"[importlib.import_module(m) for m in {imports!r}]; "
        f"print(json.dumps(sorted(m for m in sys.modules for b in {banned!r} "
        "if m == b or m.startswith(b + '.'))))"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == []
