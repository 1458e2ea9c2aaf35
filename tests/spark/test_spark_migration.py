"""docs/spark.md's migration guide, run: three Kafka pipelines moved with only its steps.

The page holds each pipeline twice, as written for format("kafka") and for
format("sparklog").  These tests check that the sparklog version is the Kafka
version with the documented steps applied (and nothing else), then run it on
small data through a real local[2] Spark session and check what it wrote.
"""

# ruff: noqa: F811  (pytest fixtures imported from spark_support are parameters here)

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

from sparklog.storage import make_batch, open_root
from tests.spark.spark_data import BASE_TS_MS, fill
from tests.spark.spark_support import REPO, spark, wait_for  # noqa: F401

BLOCK = re.compile(r"<!-- pipeline: (\w+) (kafka|sparklog) -->\s*```python\n(.*?)```", re.DOTALL)
BOOTSTRAP = '"host1:port1,host2:port2"'


def pipelines() -> dict[tuple[str, str], str]:
    text = (REPO / "docs" / "spark.md").read_text()
    return {(name, kind): code for name, kind, code in BLOCK.findall(text)}


def migrate(kafka_code: str) -> str:
    """The guide's mechanical steps 1-3: format, bootstrap servers -> root, append mode."""
    code = kafka_code.replace('format("kafka")', 'format("sparklog")')
    code = code.replace(f'.option("kafka.bootstrap.servers", {BOOTSTRAP})', '.option("root", root)')
    code = code.replace(f'"kafka.bootstrap.servers": {BOOTSTRAP}', '"root": root')
    lines = code.split("\n")
    out = []
    for line in lines:
        if line.strip() == ".save()":
            out.append(line.replace(".save()", '.mode("append")'))
        elif line.endswith(".save()") and ".mode(" not in line:
            line = line[: -len(".save()")] + '.mode("append").save()'
        out.append(line)
    return "\n".join(out)


def run(code: str, spark: Any, url: str, checkpoints: Path) -> dict[str, Any]:
    namespace: dict[str, Any] = {"spark": spark, "root": url, "checkpoints": str(checkpoints)}
    exec(compile(code, "docs/spark.md", "exec"), namespace)  # the docs' own code
    return namespace


def values(root: Any, name: str) -> list[bytes]:
    topic = root.topic(name)
    return [
        v
        for p in range(topic.partitions)
        for v in topic.partition(p).read(0).column("value").to_pylist()
    ]


def test_the_page_holds_three_pipelines_changed_only_by_its_steps() -> None:
    blocks = pipelines()
    assert {name for name, _ in blocks} == {"guide", "clicks", "router"}
    assert migrate(blocks[("guide", "kafka")]) == blocks[("guide", "sparklog")]
    assert migrate(blocks[("router", "kafka")]) == blocks[("router", "sparklog")]
    # Step 4: only the writer of the update-mode pipeline becomes the foreachBatch recipe.
    kafka, moved = migrate(blocks[("clicks", "kafka")]), blocks[("clicks", "sparklog")]
    head = kafka[: kafka.index("query =")]
    assert moved.startswith(head)
    assert "foreachBatch(write_counts)" in moved and '.option("txnVersion", batch_id)' in moved


def test_pipeline_1_the_integration_guide(spark, tmp_path) -> None:
    url = f"file://{tmp_path}/root"
    root = open_root(url)
    fill(root, "topic1", partitions=2, batches=1, per_batch=60)
    root.create_topic("topic2", 1)  # JSON offsets name every partition, as Kafka requires
    root.create_topic("copies", 1)
    namespace = run(pipelines()[("guide", "sparklog")], spark, url, tmp_path / "ck")
    assert Counter(values(root, "topic2")) == Counter(values(root, "topic1"))
    ranges = namespace["ranges"]
    per_topic = Counter((r.topic, r.partition) for r in ranges.collect())
    assert per_topic == {("topic1", 0): 50 - 23, ("topic1", 1): 60, ("topic2", 0): 120}
    copies = values(root, "copies")
    assert len(copies) == 240 and Counter(copies) == Counter(values(root, "topic1")) + Counter(
        values(root, "topic2")
    )


def test_pipeline_2_json_events_windows_update_through_foreach_batch(spark, tmp_path) -> None:
    url = f"file://{tmp_path}/root"
    root = open_root(url)
    root.create_topic("clicks", 2)
    root.create_topic("click-counts", 2)
    actions = ["view", "buy", "view", "view", "buy", "view"]
    events = [
        json.dumps({"user": f"u{i}", "action": a, "ts": f"2023-11-14T22:1{i}:00Z"}).encode()
        for i, a in enumerate(actions)
    ]
    root.topic("clicks").produce({0: make_batch(events[:3]), 1: make_batch(events[3:])})
    run(pipelines()[("clicks", "sparklog")], spark, url, tmp_path / "ck")
    final: dict[str, int] = {}
    for raw in values(root, "click-counts"):
        doc = json.loads(raw)
        key = f"{doc['window']['start']}/{doc['action']}"
        final[key] = max(final.get(key, 0), doc["count"])
    # 22:10-22:15: view x3 (u0, u2, u3), buy x2 (u1, u4); 22:15-22:20: view (u5).
    assert final == {
        "2023-11-14T22:10:00.000Z/view": 3,
        "2023-11-14T22:10:00.000Z/buy": 2,
        "2023-11-14T22:15:00.000Z/view": 1,
    }


def test_pipeline_3_order_router_with_backfill(spark, tmp_path) -> None:
    url = f"file://{tmp_path}/root"
    root = open_root(url)
    root.create_topic("orders", 2)
    for name in ("orders-eu", "orders-us"):
        root.create_topic(name, 1)

    def order(i: int) -> bytes:
        return json.dumps({"id": i, "region": "eu" if i % 3 else "us"}).encode()

    old = [order(i) for i in range(30)]
    old_ts = [BASE_TS_MS + i for i in range(30)]
    root.topic("orders").produce(
        {
            0: make_batch(old[:15], timestamps_ms=old_ts[:15]),
            1: make_batch(old[15:], timestamps_ms=old_ts[15:]),
        }
    )
    namespace = run(pipelines()[("router", "sparklog")], spark, url, tmp_path / "ck")
    live = namespace["live"]
    try:
        wait_for(lambda: live.lastProgress is not None, what="the live query's first trigger")
        new = [order(i) for i in range(30, 45)]
        root.topic("orders").produce({0: make_batch(new)})
        wait_for(
            lambda: len(values(root, "orders-eu")) + len(values(root, "orders-us")) >= 45,
            what="the new orders routed",
        )
    finally:
        live.stop()
    routed = {
        region: sorted(json.loads(v)["id"] for v in values(root, f"orders-{region}"))
        for region in ("eu", "us")
    }
    assert routed == {
        "eu": [i for i in range(45) if i % 3],
        "us": [i for i in range(45) if not i % 3],
    }
