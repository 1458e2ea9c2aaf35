"""Where an append's time goes: per-step medians of `Topic.append` beside plain pyarrow IPC.

Run:  .venv/bin/python bench/append_steps.py [--rounds N]

Times, per append of 50,000 records (the storage benchmark's batches), the steps
of ``Topic.append`` (normalise, write the object, commit) by wrapping them, and
the baseline's two (create the file, write the IPC file), in alternating rounds.
It also prints what making an empty file costs on this disk right now: an
append makes two files (its object and its commit), the baseline one, and that
cost moves from hour to hour on the test machine.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import sparklog.storage.topics as topics_module
from sparklog.storage import open_root

sys.path.insert(0, str(Path(__file__).resolve().parent))
from storage_bench import make_records


def file_creation_us(folder: Path, count: int = 200) -> float:
    folder.mkdir()
    started = time.perf_counter()
    for i in range(count):
        os.close(os.open(folder / str(i), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
    spent = time.perf_counter() - started
    shutil.rmtree(folder)
    return spent / count * 1e6


def timed(steps: dict[str, list[float]], name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            steps[name].append(time.perf_counter() - started)

    return wrapper


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=12)
    args = parser.parse_args()
    batches = [make_records(50_000, i) for i in range(40)]
    raw: dict[str, list[float]] = defaultdict(list)
    log: dict[str, list[float]] = defaultdict(list)
    topics_module.normalize = timed(log, "normalize", topics_module.normalize)
    topics_module.write_object = timed(log, "write object", topics_module.write_object)
    topics_module.Topic.commit = timed(log, "commit", topics_module.Topic.commit)  # type: ignore[method-assign]
    with tempfile.TemporaryDirectory(prefix="sparklog-steps-") as tmp:
        work = Path(tmp)
        print(f"making an empty file here: {file_creation_us(work / 'probe'):.0f} us")
        (work / "raw").mkdir()
        for _ in range(args.rounds):
            for old in (work / "raw").iterdir():
                old.unlink()
            for i, batch in enumerate(batches):
                t0 = time.perf_counter()
                sink = pa.OSFile(str(work / "raw" / f"{i}.arrow"), "wb")
                t1 = time.perf_counter()
                with pa.ipc.new_file(sink, batch.schema) as writer:
                    writer.write_batch(batch)
                sink.close()
                t2 = time.perf_counter()
                raw["create file"].append(t1 - t0)
                raw["write"].append(t2 - t1)
                raw["total"].append(t2 - t0)
            shutil.rmtree(work / "log", ignore_errors=True)
            open_root(str(work / "log")).create_topic("bench", 1)
            topic = open_root(str(work / "log")).topic("bench")
            for batch in batches:
                t0 = time.perf_counter()
                topic.append(0, batch)
                log["total"].append(time.perf_counter() - t0)
    for title, steps in (("pyarrow IPC", raw), ("Topic.append", log)):
        shown = " | ".join(
            f"{name} {statistics.median(times) * 1e6:,.0f}" for name, times in steps.items()
        )
        print(f"{title:13s} median us per append: {shown}")
    ratio = statistics.median(raw["total"]) / statistics.median(log["total"])
    print(f"ratio of medians (baseline / append): {ratio:.2f}")


if __name__ == "__main__":
    main()
