"""CLI startup: how long ``sparklog topics list`` on a local root and through a broker takes.

Each command runs ``--runs`` times as a fresh process; the best wall time and the best
CPU time (user + system, which a shared machine's load inflates less) are printed,
with ratios against a baseline measured in the same run (an empty interpreter).
Beside the metadata commands (``topics list``, ``groups list``: topic documents and
group logs only, which on a local root load neither pyarrow, numpy nor fsspec) are
what they no longer pay (importing pyarrow, fsspec) and a command that reads the
partition logs and so does load pyarrow (``topics describe``).  Modules are compiled
once (a bytecode cache in the temporary folder), as in an installed package.
Then the same metadata commands through a broker process on that root (issue 29's
target: at most 0.3 s of CPU for ``topics list``): they take the small request path
(one Flight DoAction over grpcio, no pyarrow), beside ``import pyarrow.flight``, what
the full Flight client costs to load.

    PYTHONPATH=. python bench/cli_startup.py --runs 10
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.kafka_bench import start_broker  # noqa: E402


def measure(command: list[str], runs: int, env: dict[str, str]) -> tuple[float, float]:
    """(best wall seconds, best CPU seconds) of ``runs`` fresh runs of ``command``."""
    walls, cpus = [], []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        done = subprocess.run(command, env=env, capture_output=True, check=False)
        walls.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(command)} failed: {done.stderr.decode()[-2000:]}")
    return min(walls), min(cpus)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="fresh processes per command")
    args = parser.parse_args()
    py = sys.executable
    with tempfile.TemporaryDirectory(prefix="sparklog-startup-") as folder:
        # compiled modules cached, as pip leaves an installed package (a source tree run
        # with PYTHONDONTWRITEBYTECODE compiles every module again, every run)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env.update(PYTHONPATH=str(REPO), PYTHONPYCACHEPREFIX=str(Path(folder) / "pycache"))
        root = str(Path(folder) / "root")
        cli = [py, "-m", "sparklog.cli", "-a", root]
        for name in ("orders", "payments", "clicks", "audit"):
            subprocess.run([*cli, "topics", "create", name, "-p", "3"], env=env, check=True,
                           capture_output=True)  # fmt: skip
        # a group with committed offsets, so groups list reads a group log
        subprocess.run([*cli, "groups", "reset-offsets", "billing", "-t", "orders",
                        "--to-earliest", "--execute"], env=env, check=True,
                       capture_output=True)  # fmt: skip
        rows = [
            ("python -c pass", [py, "-c", "pass"]),
            ("import pyarrow", [py, "-c", "import pyarrow"]),
            ("import fsspec (+asyn)", [py, "-c", "import fsspec.asyn"]),
            ("import sparklog.cli.app", [py, "-c", "import sparklog.cli.app"]),
            ("sparklog --help", [py, "-m", "sparklog.cli", "--help"]),
            ("sparklog topics list", [*cli, "topics", "list"]),
            ("sparklog groups list", [*cli, "groups", "list"]),
            ("sparklog topics describe", [*cli, "topics", "describe", "orders"]),
        ]
        results = {label: measure(command, args.runs, env) for label, command in rows}
        broker, address, _ = start_broker(
            root, Path(folder) / "broker.log", {"PYTHONPYCACHEPREFIX": env["PYTHONPYCACHEPREFIX"]}
        )
        try:
            via = [py, "-m", "sparklog.cli", "-a", address]
            for label, command in (
                ("import pyarrow.flight", [py, "-c", "import pyarrow.flight"]),
                ("broker: topics list", [*via, "topics", "list"]),
                ("broker: groups list", [*via, "groups", "list"]),
            ):
                results[label] = measure(command, args.runs, env)
        finally:
            broker.terminate()
            broker.wait(timeout=60)
    _, empty_cpu = results["python -c pass"]
    with open("/proc/loadavg") as handle:
        load = handle.read().split()[0]
    print(f"best of {args.runs} fresh processes; load average {load} on {os.cpu_count()} cores")
    print(f"{'command':<26}{'wall ms':>9}{'cpu ms':>9}{'cpu / empty':>13}")
    for label, (wall, cpu) in results.items():
        print(f"{label:<26}{wall * 1000:>9.0f}{cpu * 1000:>9.0f}{cpu / empty_cpu:>13.1f}")
    _, broker_cpu = results["broker: topics list"]
    verdict = "met" if broker_cpu <= 0.3 else "not met"
    print(f"topics list through a broker: {broker_cpu:.2f} s of CPU (target <= 0.3 s: {verdict})")


if __name__ == "__main__":
    main()
