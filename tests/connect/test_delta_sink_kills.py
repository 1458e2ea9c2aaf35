"""Topic -> Delta exactly-once: the Spark driver SIGKILLed around the Delta write, restarted.

Kills alternate between "rows computed, nothing written" and "Delta commit made,
Spark's checkpoint not" (the replay that must be skipped by the table's app
transaction version). The default run makes 2 kills, one of each kind (each
restart costs a Spark start); the soak (``SPARKLOG_SOAK=1``) 10, and
``SPARKLOG_CONNECT_KILLS`` sets the default run's.
After the last run the table holds every topic record exactly once.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pytest
from deltalake import DeltaTable

from sparklog.storage import make_batch, open_root
from tests.spark.exactly_once_support import produce_spread, run_driver

pytestmark = pytest.mark.slow

KILLS = int(os.environ.get("SPARKLOG_CONNECT_KILLS", "2"))
PER_BATCH = 30


def produce(root, start: int, count: int) -> None:
    produce_spread(
        root,
        "events",
        range(start, start + count),
        lambda ids: make_batch(
            [f"v{i}".encode() for i in ids], keys=[f"k{i}".encode() for i in ids]
        ),
    )


@pytest.mark.parametrize(
    "kills",
    [pytest.param(KILLS, id="default"), pytest.param(10, marks=pytest.mark.soak, id="soak")],
)
def test_killed_delta_sink_lands_every_record_once(tmp_path: Path, kills: int) -> None:
    url = f"file://{tmp_path}/root"
    root = open_root(url)
    root.create_topic("events", 3)
    produce(root, 0, 100)
    total = 100
    table = str(tmp_path / "events_delta")
    checkpoint = tmp_path / "ck"
    args = ("events", table, str(PER_BATCH))
    driver = "tests.connect.delta_driver"
    for n in range(kills):
        point = "delta.after_commit" if n % 2 == 0 else "delta.before_commit"
        version = DeltaTable(table).transaction_version("delta-kills") if n else None
        batch = 0 if version is None else version + 1
        run_driver(url, checkpoint, f"{point}:{batch}", module=driver, args=args)
        produce(root, total, 20)
        total += 20
    assert run_driver(url, checkpoint, None, module=driver, args=args) == 0
    values = Counter(DeltaTable(table).to_pyarrow_table().column("value").to_pylist())
    expected = Counter(f"v{i}".encode() for i in range(total))
    assert values == expected, (
        f"missing {sorted(expected - values)[:5]}, duplicated {sorted(values - expected)[:5]}"
    )
    assert sum(values.values()) == sum(
        root.topic("events").partition(p).high_watermark for p in range(3)
    )
