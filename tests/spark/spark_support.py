"""Shared helpers for the Spark data source tests: one real local[2] SparkSession per module.

Spark's Python workers are separate processes, so roots must be on disk or on
the moto S3 server (memory:// roots are invisible to them).  Import the
``spark`` fixture into a test module with
``from tests.spark.spark_support import spark  # noqa: F401``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.waiting import wait_for  # noqa: F401  (re-exported for the Spark tests)

REPO = Path(__file__).resolve().parents[2]


CONNECT_ENV = ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE", "SPARK_LOCAL_REMOTE")


def classic_env() -> dict[str, str]:
    """This process's environment without Spark Connect markers, plus :func:`spark_env`."""
    env = {k: v for k, v in os.environ.items() if k not in CONNECT_ENV}
    return {**env, **spark_env()}


def spark_env() -> dict[str, str]:
    """Environment under which Spark's JVM and Python workers find this checkout."""
    path = os.environ.get("PYTHONPATH", "")
    parts = [str(REPO), *[p for p in path.split(os.pathsep) if p and p != str(REPO)]]
    return {
        "PYTHONPATH": os.pathsep.join(parts),
        # Spark looks up pyspark_<name> modules with this interpreter.
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
    }


def new_session(app: str, master: str = "local[2]", **conf: str) -> Any:
    os.environ.update(spark_env())
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master(master)
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.python.filterPushdown.enabled", "true")
        .config("spark.driver.memory", "1g")
    )
    for key, value in conf.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


@pytest.fixture(scope="module")
def spark(request: pytest.FixtureRequest) -> Iterator[Any]:
    """One local[2] SparkSession for the whole test module."""
    session = new_session(request.module.__name__)
    try:
        yield session
    finally:
        session.stop()


def source_options(url: str, storage_options: dict[str, Any]) -> dict[str, str]:
    """``root`` and ``storage.<key>`` options for a root spec (nested keys joined by dots)."""
    out = {"root": url}

    def flatten(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                flatten(f"{prefix}.{k}", v)
        else:
            out[prefix] = str(value)

    for key, value in storage_options.items():
        flatten(f"storage.{key}", value)
    return out


@pytest.fixture(params=["file", "s3"])
def spark_root(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, dict[str, Any]]:
    """(url, storage options) of a fresh root Spark's workers can reach: file or moto S3."""
    if request.param == "file":
        return f"file://{tmp_path}/root", {}
    return request.getfixturevalue("s3_root_spec")
