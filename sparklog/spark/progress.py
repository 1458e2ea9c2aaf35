"""Kafka's lag metrics for a sparklog source, computed from a query's progress.

Spark's Kafka source reports ``minOffsetsBehindLatest``, ``maxOffsetsBehindLatest``
and ``avgOffsetsBehindLatest`` in ``progress.sources[].metrics`` through the
JVM interface ``ReportsSourceMetrics``.  PySpark 4.3's Python streaming source
API has no such hook (its JVM wrapper, ``PythonMicroBatchStream``, implements
neither that interface nor ``toString``, hence also the description with an
object hash), so the metrics stay empty.  The same figures follow from what a
progress event does carry: ``endOffset`` (the batch's end) and
``latestOffset`` (what sparklog's ``reportLatestOffset`` saw), which is what
:func:`offsets_behind_latest` computes; use it in a ``StreamingQueryListener``
or on ``query.lastProgress``.  Queries with option ``group`` also record the
group's committed offsets, so the lag shows in ``sparklog groups describe`` and
in the brokers' group metrics.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from sparklog.spark.offsets import decode_offsets


def _doc(raw: Any) -> dict[str, Any]:
    if raw is None:
        return {}
    if isinstance(raw, str):
        parsed = json.loads(raw)
        return parsed if isinstance(parsed, dict) else {}
    return dict(raw)


def _field(source: Any, name: str) -> Any:
    return source.get(name) if isinstance(source, Mapping) else getattr(source, name, None)


def offsets_behind_latest(source: Any) -> dict[str, float]:
    """Kafka's ``{min,max,avg}OffsetsBehindLatest`` of one ``progress["sources"][i]``.

    Empty when the progress has no latest offset (no batch yet).  Accepts the
    dicts of ``query.lastProgress["sources"]`` and a listener's
    ``event.progress.sources`` objects (offsets as JSON text or dicts).
    """
    latest = decode_offsets(_doc(_field(source, "latestOffset")))
    if not latest:
        return {}
    end = decode_offsets(_doc(_field(source, "endOffset")))
    behind = [max(offset - end.get(tp, 0), 0) for tp, offset in sorted(latest.items())]
    return {
        "minOffsetsBehindLatest": float(min(behind)),
        "maxOffsetsBehindLatest": float(max(behind)),
        "avgOffsetsBehindLatest": sum(behind) / len(behind),
    }
