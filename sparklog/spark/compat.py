"""What the running PySpark's Python DataSource API offers, found by feature detection.

sparklog supports pyspark 4.0 (Databricks Runtime 17.3 LTS) through the newest.
The API grew between them, and each difference is detected here once, by
looking for the class or module rather than parsing version strings:

* streaming admission control (``ReadLimit``, ``latestOffset(start, limit)``,
  ``getDefaultReadLimit``) and ``SupportsTriggerAvailableNow`` are in
  ``pyspark.sql.streaming.datasource``, from 4.2.  Without them the rate-limit
  options cannot be honoured exactly across restarts, so they are refused
  (:func:`refuse_without_admission_control`), never ignored;
* the filter classes for batch pushdown (``pyspark.sql.datasource.Filter``...)
  arrive in 4.1; on 4.0 Spark never asks to push filters, so stand-ins that no
  filter is an instance of keep the batch reader's code one path;
* ``DataSourceStreamArrowWriter`` arrives in 4.1; 4.0's write worker hands
  Arrow batches to any writer that is a ``DataSourceArrowWriter``, streaming or
  not, so the stand-in is a stream writer that is also an Arrow writer.
"""

from __future__ import annotations

from typing import Any

import pyspark
from pyspark.sql import datasource as _ds

#: The Spark version whose Python DataSource API has admission control and AvailableNow.
ADMISSION_CONTROL_SINCE = "4.2"
#: Options a stream reader can honour only with admission control.
RATE_LIMIT_OPTIONS = (
    "maxOffsetsPerTrigger",
    "minOffsetsPerTrigger",
    "maxTriggerDelay",
    "maxBytesPerTrigger",
)

_streaming_ds: Any
try:
    from pyspark.sql.streaming import datasource as _streaming_ds
except ImportError:  # pyspark < 4.2
    _streaming_ds = None

HAS_ADMISSION_CONTROL = _streaming_ds is not None


class _NoReadLimit:
    """Stand-in for pyspark 4.2's read limits where they do not exist (never instantiated)."""


class _NoAvailableNow:
    """Stand-in mixin for ``SupportsTriggerAvailableNow`` on pyspark < 4.2: adds nothing."""


if _streaming_ds is not None:
    ReadAllAvailable: Any = _streaming_ds.ReadAllAvailable
    ReadLimit: Any = _streaming_ds.ReadLimit
    ReadMaxBytes: Any = _streaming_ds.ReadMaxBytes
    ReadMaxRows: Any = _streaming_ds.ReadMaxRows
    ReadMinRows: Any = _streaming_ds.ReadMinRows
    SupportsTriggerAvailableNow: Any = _streaming_ds.SupportsTriggerAvailableNow
else:
    ReadAllAvailable = ReadLimit = ReadMaxBytes = ReadMaxRows = ReadMinRows = _NoReadLimit
    SupportsTriggerAvailableNow = _NoAvailableNow


class _NoFilter:
    """Stand-in for pyspark 4.1's filter classes on 4.0, which never pushes filters."""


HAS_FILTER_PUSHDOWN = hasattr(_ds, "Filter")
Filter: Any = getattr(_ds, "Filter", _NoFilter)
EqualTo: Any = getattr(_ds, "EqualTo", _NoFilter)
GreaterThan: Any = getattr(_ds, "GreaterThan", _NoFilter)
GreaterThanOrEqual: Any = getattr(_ds, "GreaterThanOrEqual", _NoFilter)
In: Any = getattr(_ds, "In", _NoFilter)
IsNotNull: Any = getattr(_ds, "IsNotNull", _NoFilter)
LessThan: Any = getattr(_ds, "LessThan", _NoFilter)
LessThanOrEqual: Any = getattr(_ds, "LessThanOrEqual", _NoFilter)

if hasattr(_ds, "DataSourceStreamArrowWriter"):
    DataSourceStreamArrowWriter: Any = _ds.DataSourceStreamArrowWriter
else:

    class DataSourceStreamArrowWriter(  # type: ignore[no-redef,misc]
        _ds.DataSourceStreamWriter, _ds.DataSourceArrowWriter
    ):
        """pyspark 4.0: a stream writer that 4.0's write worker feeds Arrow batches."""


def spark_version() -> str:
    """The running pyspark's version, for messages only."""
    return str(pyspark.__version__)


def needs_admission_control(what: str) -> str:
    """The refusal text for ``what`` (an option or AvailableNow) on a Spark without it."""
    return (
        f"{what} needs Spark {ADMISSION_CONTROL_SINCE} or newer: the Python data source API of "
        f"Spark {spark_version()} has no admission control (ReadLimit) or AvailableNow for "
        f"Python streaming sources, so sparklog cannot honour it there and refuses it rather "
        f"than ignore it. Upgrade to pyspark {ADMISSION_CONTROL_SINCE}+, or remove it (a "
        "query without it reads everything available in each micro-batch)"
    )
