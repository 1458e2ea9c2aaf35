"""Chaos benchmark: the long versions of tests/chaos' scenarios, with their figures.

Run:  .venv/bin/python bench/chaos.py [--kills 20] [--outages 5] [--roots file,s3]

Real broker processes on a local root and on S3 (moto's server, behind the
fault-injecting proxy of tests/chaos/proxy.py, with moto's conditional PUT
serialised so it is atomic as on S3). An idempotent ``acks=all`` producer runs
through every scenario; after each one the root is read back and checked.
Prints one JSON line per scenario and a table: faults injected, records
acknowledged, lost, misplaced, duplicated, offset gaps, records reported
failed that were stored (all must be 0), outcome-unknown reports, time until
produce resumed after each fault (max and median), and the largest broker RSS.
The baseline is a fault-free run of the same workload in the same run: its
time to acknowledge ``PROGRESS_RECORDS`` records is the ratio's denominator
for the recovery times.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.chaos import scenarios  # noqa: E402
from tests.chaos.conftest import serialised_moto_puts  # noqa: E402
from tests.support.s3 import MotoS3  # noqa: E402


def baseline_s(setup: scenarios.Setup) -> float:
    """Seconds a fault-free cluster takes to acknowledge PROGRESS_RECORDS records."""
    figures = scenarios.Figures("baseline", setup.kind)
    with scenarios.brokers(setup, 3) as cluster:
        work = scenarios._start_workload(cluster, figures, 60)
        times = [scenarios._progress(work, time.monotonic(), 60, "baseline") for _ in range(5)]
        scenarios._finish(work, setup, figures)
    return sorted(times)[len(times) // 2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=20, help="leader SIGKILLs per root")
    parser.add_argument("--pauses", type=int, default=5, help="leader SIGSTOPs per root")
    parser.add_argument("--outages", type=int, default=3, help="storage outages per kind (S3)")
    parser.add_argument("--fault-s", type=float, default=5.0, help="length of a storage outage")
    parser.add_argument("--roots", default="file,s3", help="comma-separated: file, s3")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="sparklog-chaos-"))
    moto = MotoS3.start()
    rows: list[dict] = []
    n = 0

    def setup(kind: str) -> scenarios.Setup:
        nonlocal n
        n += 1
        path = work / f"{kind}-{n}"
        path.mkdir()
        return scenarios.file_setup(path) if kind == "file" else scenarios.s3_setup(path, moto)

    def run(
        kind: str, scenario: Callable[[scenarios.Setup], scenarios.Figures], base: float
    ) -> None:
        chosen = setup(kind)
        try:
            figures = scenario(chosen)
        finally:
            if chosen.proxy is not None:
                chosen.proxy.stop()
        row = figures.summary()
        if row["recover_max_s"] is not None:
            row["recover_max_vs_baseline"] = round(row["recover_max_s"] / base, 1)
        row["baseline_s"] = round(base, 2)
        rows.append(row)
        print(json.dumps(row), flush=True)

    try:
        with serialised_moto_puts():
            for kind in [k.strip() for k in args.roots.split(",") if k.strip()]:
                base = baseline_s(setup(kind))
                run(kind, lambda s: scenarios.leader_kills(s, args.kills, recover_s=90), base)
                run(kind, lambda s: scenarios.leader_pauses(s, args.pauses, recover_s=90), base)
                run(kind, lambda s: scenarios.clock_skew(s, -6_000, rounds=10), base)
                run(kind, lambda s: scenarios.hostile_requests(s, idle_connections=1_000), base)
                run(kind, scenarios.damaged_topic, base)
                if kind == "s3":
                    for mode in ("blackhole", "reset", "drop"):
                        run(
                            kind,
                            lambda s, m=mode: scenarios.storage_faults(
                                s, m, args.outages, fault_s=args.fault_s, recover_s=90
                            ),
                            base,
                        )
    finally:
        moto.stop()
        shutil.rmtree(work, ignore_errors=True)
    print()
    header = (
        "| scenario | root | faults | acked | lost | dup | gaps | failed but stored | unknown "
        "| resumed max (median) s | x baseline | RSS max MiB |"
    )
    print(header)
    print("|---" * 12 + "|")
    for r in rows:
        print(
            f"| {r['scenario']} | {r['root']} | {r['faults']} | {r.get('acked')} | {r.get('lost')} "
            f"| {r.get('duplicates')} | {r.get('gaps')} | {r.get('failed_but_stored')} "
            f"| {r.get('unknown')} | {r['recover_max_s']} ({r['recover_median_s']}) "
            f"| {r.get('recover_max_vs_baseline')} | {r['rss_max_mib']} |"
        )


if __name__ == "__main__":
    main()
