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


@pytest.mark.parametrize("module", ["sparklog.spark.source", "pyspark_sparklog"])
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
