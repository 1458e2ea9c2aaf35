"""Draw docs/benchmarks.png: every benchmark's ratio to its same-run baseline.

Run:  .venv/bin/python bench/plot_benchmarks.py

The ratios are the ones recorded in docs/benchmarks.md (the run quoted there, or
for storage the median of its latest five runs); rerun the benchmarks, update both,
and redraw.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

# (label, ratio to the same-run baseline, target or None) as recorded in docs/benchmarks.md
RATIOS = [
    ("storage append / pyarrow IPC write", 0.75, 0.7),
    ("storage read / pyarrow IPC read", 0.77, 0.7),
    ("open 100k commits / 10 commits (lower is better)", 0.84, 1.2),
    ("broker produce / storage append", 0.33, None),
    ("broker fetch / plain Flight DoGet", 1.04, None),
    ("client send_batch (embedded) / storage append", 1.37, None),
    ("client poll_batches (embedded) / storage read", 0.50, None),
    ("Spark batch read / Python source from memory", 1.11, 0.9),
    ("Spark batch read / Parquet source", 1.26, None),
    ("Spark stream, 10 batches / Python source from memory", 0.79, 0.9),
    ("Spark sink / Parquet writer", 0.91, None),
]


def main() -> None:
    labels = [r[0] for r in RATIOS][::-1]
    values = [r[1] for r in RATIOS][::-1]
    targets = [r[2] for r in RATIOS][::-1]
    fig, ax = plt.subplots(figsize=(9, 5))
    bars = ax.barh(labels, values, color="#4C72B0")
    for i, target in enumerate(targets):
        if target is not None:
            ax.plot([target, target], [i - 0.4, i + 0.4], color="#C44E52", linewidth=2)
    for bar, value in zip(bars, values, strict=False):
        ax.text(value + 0.02, bar.get_y() + bar.get_height() / 2, f"{value:.2f}", va="center")
    ax.axvline(1.0, color="grey", linestyle=":", linewidth=1)
    ax.set_xlabel("ratio to the baseline measured in the same run (red: target)")
    ax.set_title("sparklog benchmarks, 2-core machine")
    fig.tight_layout()
    out = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.png"
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
