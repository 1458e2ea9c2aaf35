"""Topic -> Delta table with real Spark: typed, JSON and raw values, partitions, upsert.

A sparklog topic is read by ``readStream`` and landed through
:class:`sparklog.spark.delta_sink.DeltaForeachBatch` (delta-rs), then read back with
``deltalake`` and with Spark's own Parquet reader.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from sparklog.errors import ConnectorConfigError
from sparklog.spark.delta_sink import DeltaForeachBatch, start_delta_sink
from sparklog.storage import make_batch, open_root
from tests.spark.spark_support import spark  # noqa: F401

pytestmark = pytest.mark.slow

ORDER = pa.struct([("id", pa.int64()), ("item", pa.string()), ("price", pa.float64())])


def run_once(spark, sink: DeltaForeachBatch, url: str, topic: str, checkpoint: Path) -> None:  # noqa: F811
    query = start_delta_sink(
        spark,
        sink,
        topic=topic,
        source_options={"root": url},
        checkpoint=str(checkpoint),
        once=True,
        max_offsets_per_trigger=40,
    )
    query.awaitTermination()
    assert query.exception() is None


def test_typed_topic_lands_as_typed_partitioned_columns(spark, tmp_path: Path) -> None:  # noqa: F811
    url = f"file://{tmp_path}/root"
    root = open_root(url)
    root.create_topic("orders", 2, value_type=ORDER)
    topic = root.topic("orders")
    for p in range(2):
        ids = range(p * 50, p * 50 + 50)
        values = [{"id": i, "item": f"item{i}", "price": i / 2} for i in ids]
        topic.produce(
            {p: make_batch(values, keys=[f"k{i}".encode() for i in ids], value_type=ORDER)}
        )
    table = str(tmp_path / "orders_delta")
    sink = DeltaForeachBatch(table, app_id="orders-to-delta", partition_by=["_partition"])
    run_once(spark, sink, url, "orders", tmp_path / "ck")

    landed = DeltaTable(table)
    data = landed.to_pyarrow_table()
    assert data.schema.field("id").type == pa.int64()
    assert data.schema.field("price").type == pa.float64()
    assert sorted(data.column("id").to_pylist()) == list(range(100))
    assert landed.metadata().partition_columns == ["_partition"]
    # one Delta commit per micro-batch (40 records each): the last batch id is recorded
    assert landed.transaction_version("orders-to-delta") == 2
    by_parquet = spark.read.parquet(table)
    assert by_parquet.count() == 100
    assert sorted(r.id for r in by_parquet.collect()) == list(range(100))
    assert {(r.id, r._partition) for r in by_parquet.collect()} == {
        (i, i // 50) for i in range(100)
    }

    # a second run after more records appends only those
    topic.produce({0: make_batch([{"id": 100, "item": "x", "price": 1.0}], value_type=ORDER)})
    run_once(spark, sink, url, "orders", tmp_path / "ck")
    assert DeltaTable(table).to_pyarrow_table().num_rows == 101


def test_json_values_upserted_by_key_with_tombstones(spark, tmp_path: Path) -> None:  # noqa: F811
    url = f"file://{tmp_path}/root"
    root = open_root(url)
    root.create_topic("users", 1)
    topic = root.topic("users")

    def put(pairs: list[tuple[int, dict | None]]) -> None:
        topic.produce(
            {
                0: make_batch(
                    [None if v is None else json.dumps(v).encode() for _, v in pairs],
                    keys=[f"u{k}".encode() for k, _ in pairs],
                )
            }
        )

    put([(i, {"name": f"n{i}", "age": i}) for i in range(30)])
    put([(i, {"name": f"m{i}", "age": 100 + i}) for i in range(0, 30, 3)])  # updates
    put([(i, None) for i in range(1, 30, 3)])  # deletes (tombstones)
    table = str(tmp_path / "users_delta")
    sink = DeltaForeachBatch(
        table,
        app_id="users",
        value_format="json",
        value_schema="name STRING, age INT",
        mode="upsert",
    )
    run_once(spark, sink, url, "users", tmp_path / "ck")
    put([(2, {"name": "late", "age": 7}), (0, None)])
    run_once(spark, sink, url, "users", tmp_path / "ck")

    expected: dict[bytes, tuple[str, int]] = {}
    for i in range(30):
        expected[f"u{i}".encode()] = (f"n{i}", i)
    for i in range(0, 30, 3):
        expected[f"u{i}".encode()] = (f"m{i}", 100 + i)
    for i in range(1, 30, 3):
        del expected[f"u{i}".encode()]
    expected[b"u2"] = ("late", 7)
    del expected[b"u0"]
    rows = DeltaTable(table).to_pyarrow_table().to_pylist()
    assert {r["_key"]: (r["name"], r["age"]) for r in rows} == expected
    assert len(rows) == len(expected)


def test_bad_settings_are_refused_naming_them(spark, tmp_path: Path) -> None:  # noqa: F811
    with pytest.raises(ConnectorConfigError, match="value format 'yaml' not accepted"):
        DeltaForeachBatch(str(tmp_path / "t"), app_id="a", value_format="yaml")
    with pytest.raises(ConnectorConfigError, match="needs a value schema"):
        DeltaForeachBatch(str(tmp_path / "t"), app_id="a", value_format="json")
    with pytest.raises(ConnectorConfigError, match="mode 'merge' not accepted"):
        DeltaForeachBatch(str(tmp_path / "t"), app_id="a", mode="merge")  # type: ignore[arg-type]


def test_without_delta_spark_jars_the_delta_rs_writer_is_chosen(spark, tmp_path: Path) -> None:  # noqa: F811
    """Only the detection and the choice run here: no delta-spark jars can be downloaded."""
    from sparklog.spark.delta_writers import DELTA_CLASS, has_jvm_class

    assert has_jvm_class(spark, "org.apache.spark.sql.SparkSession")  # the lookup works
    assert not has_jvm_class(spark, DELTA_CLASS)  # and delta-spark is not loaded here
    table = str(tmp_path / "t")
    assert DeltaForeachBatch(table, app_id="a").resolved_writer(spark) == "delta-rs"
    assert DeltaForeachBatch(table, app_id="a", writer="delta-rs").resolved_writer(spark) == (
        "delta-rs"
    )
    with pytest.raises(ConnectorConfigError, match="'delta-spark' asked for, but io.delta"):
        DeltaForeachBatch(table, app_id="a", writer="delta-spark").resolved_writer(spark)
    with pytest.raises(ConnectorConfigError, match="Delta writer 'spark' not accepted"):
        DeltaForeachBatch(table, app_id="a", writer="spark")


def test_postgres_table_mirrored_into_delta_through_a_topic(
    spark,  # noqa: F811
    postgres,
    tmp_path: Path,
) -> None:
    """PostgreSQL -> topic (Debezium records) -> Delta (upsert): Delta equals the table."""
    import psycopg

    from sparklog.connect.postgres import PostgresSource, PostgresSourceConfig

    with psycopg.connect(postgres.dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE items (id int PRIMARY KEY, name text, qty int)")
        conn.execute("INSERT INTO items SELECT g, 'n' || g, g FROM generate_series(1, 50) g")
    url = f"file://{tmp_path}/root"
    root = open_root(url)
    config = PostgresSourceConfig(postgres.dsn, ["items"], "pg", name="pg-items")
    PostgresSource(root, config).run(until_caught_up=True)  # the snapshot
    with psycopg.connect(postgres.dsn, autocommit=True) as conn:
        conn.execute("UPDATE items SET qty = qty * 10 WHERE id % 3 = 0")
        conn.execute("DELETE FROM items WHERE id % 5 = 0")
        conn.execute("INSERT INTO items VALUES (51, 'new', 1)")
    PostgresSource(root, config).run(until_caught_up=True)  # the changes
    table = str(tmp_path / "items_delta")
    sink = DeltaForeachBatch(
        table,
        app_id="items",
        value_format="debezium",
        value_schema="id INT, name STRING, qty INT",
        mode="upsert",
    )
    run_once(spark, sink, url, "pg.public.items", tmp_path / "ck")
    with psycopg.connect(postgres.dsn) as conn:
        expected = sorted(conn.execute("SELECT id, name, qty FROM items").fetchall())
    landed = DeltaTable(table).to_pyarrow_table().select(["id", "name", "qty"])
    assert sorted(tuple(r.values()) for r in landed.to_pylist()) == expected
