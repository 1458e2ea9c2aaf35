"""What sparklog adds to the start of each Spark Python worker (issue 30, item 6).

Spark gives a Python planner worker a fixed time (10 s, not configurable) to
start and connect back; it must import pyspark's worker module and then the
data source.  For each worker this prints, in fresh interpreters (median of
``--runs``): the worker module's own import time (the baseline, measured in the
same run), what importing sparklog's part for that job adds, the ratio of the
two, and how many modules sparklog's part loads.

Usage: .venv/bin/python bench/spark_worker_imports.py [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

#: worker name -> (the pyspark module Spark runs, what sparklog then imports)
WORKERS = {
    "lookup": ("pyspark.sql.worker.lookup_data_sources", ["pyspark_sparklog"]),
    "stream planner": (
        "pyspark.sql.streaming.python_streaming_source_runner",
        ["pyspark_sparklog", "sparklog.spark.stream"],
    ),
    "batch planner": (
        "pyspark.sql.worker.plan_data_source_read",
        ["pyspark_sparklog", "sparklog.spark.batch"],
    ),
    "writer": (
        "pyspark.sql.worker.write_into_data_source",
        ["pyspark_sparklog", "sparklog.spark.sink"],
    ),
}

PROBE = """
import importlib, json, sys, time
t0 = time.perf_counter()
importlib.import_module({base!r})
t1 = time.perf_counter()
before = set(sys.modules)
for name in {imports!r}:
    importlib.import_module(name)
t2 = time.perf_counter()
print(json.dumps([t1 - t0, t2 - t1, len(set(sys.modules) - before)]))
"""


def measure(base: str, imports: list[str]) -> tuple[float, float, int]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(base=base, imports=imports)],
        capture_output=True,
        text=True,
        check=True,
    )
    worker_s, sparklog_s, modules = json.loads(out.stdout.strip().splitlines()[-1])
    return float(worker_s), float(sparklog_s), int(modules)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    print(f"{'worker':16} {'worker s':>9} {'+sparklog s':>12} {'ratio':>6} {'modules':>8}")
    for name, (base, imports) in WORKERS.items():
        runs = [measure(base, imports) for _ in range(args.runs)]
        worker_s = statistics.median(r[0] for r in runs)
        sparklog_s = statistics.median(r[1] for r in runs)
        modules = runs[-1][2]
        ratio = sparklog_s / worker_s
        print(f"{name:16} {worker_s:9.3f} {sparklog_s:12.3f} {ratio:6.2f} {modules:8d}")


if __name__ == "__main__":
    main()
