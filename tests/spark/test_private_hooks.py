"""sparklog leans on one private detail of PySpark: a batch reader asked for by Spark's
filter-pushdown worker (found by that module's name on the stack, ``sys._getframe`` in
``spark/batch.py``) pushes filters.  These tests fail when the name moves or the worker
stops asking the data source for its reader itself, so an upgrade cannot silently turn
pushdown off.  (The S3 counterpart is ``tests/storage/test_store_backends.py``.)"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from sparklog.spark.batch import PUSHDOWN_WORKER, SparklogBatchReader, SparklogPushdownReader
from sparklog.spark.schema import source_schema
from sparklog.spark.source import SparklogDataSource


def test_sparks_pushdown_worker_still_has_its_name_and_asks_for_the_reader() -> None:
    spec = importlib.util.find_spec(PUSHDOWN_WORKER)
    assert spec is not None and spec.origin, f"pyspark has no {PUSHDOWN_WORKER} any more"
    assert ".reader(schema=schema)" in Path(spec.origin).read_text()


def _reader_asked_by(module_name: str, tmp_path: Path) -> object:
    source = SparklogDataSource({"root": f"file://{tmp_path}/root", "subscribe": "t"})
    scope = {"__name__": module_name, "source": source, "schema": source_schema(None, False)}
    exec("reader = source.reader(schema=schema)", scope)  # a frame of that module
    return scope["reader"]


def test_the_pushdown_worker_gets_the_pushdown_reader(tmp_path) -> None:
    assert isinstance(_reader_asked_by(PUSHDOWN_WORKER, tmp_path), SparklogPushdownReader)
    plain = _reader_asked_by("pyspark.sql.worker.plan_data_source_read", tmp_path)
    assert type(plain) is SparklogBatchReader
