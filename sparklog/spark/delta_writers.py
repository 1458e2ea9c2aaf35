"""Which Delta writer a Delta sink uses: Spark's own (delta-spark) where its jars are loaded.

``writer="auto"`` (the default) picks ``delta-spark`` when delta-spark's classes
(``io.delta.tables.DeltaTable``) are on the session's JVM classpath, as on
Databricks-style clusters, and ``delta-rs`` otherwise (as here: no Maven, no jars).
Both write the same table exactly-once with the same app transaction ids
(``txnAppId``/``txnVersion``): one connector, one set of options.
"""

from __future__ import annotations

from typing import Any

from sparklog.errors import ConnectorConfigError

WRITERS = ("auto", "delta-rs", "delta-spark")
DELTA_CLASS = "io.delta.tables.DeltaTable"


def has_jvm_class(spark: Any, name: str) -> bool:
    """True if the session's JVM can load class ``name`` (False under Spark Connect)."""
    context = getattr(spark, "sparkContext", None)
    try:
        jvm = context._jvm if context is not None else None
    except Exception:  # Spark Connect sessions have no JVM here
        return False
    if jvm is None:
        return False
    try:
        loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
        jvm.java.lang.Class.forName(name, False, loader)
    except Exception:  # py4j's ClassNotFoundException
        return False
    return True


def validate_writer(writer: str) -> str:
    if writer not in WRITERS:
        raise ConnectorConfigError(
            f"Delta writer {writer!r} not accepted; accepted: {', '.join(WRITERS)}"
        )
    return writer


def resolve_writer(spark: Any, writer: str = "auto") -> str:
    """``delta-spark`` or ``delta-rs`` here; ``delta-spark`` asked for but absent is an error."""
    validate_writer(writer)
    present = has_jvm_class(spark, DELTA_CLASS)
    if writer == "delta-spark" and not present:
        raise ConnectorConfigError(
            f"Delta writer 'delta-spark' asked for, but {DELTA_CLASS} is not on Spark's "
            "classpath (start Spark with the delta-spark package, or use writer 'auto' or "
            "'delta-rs')"
        )
    if writer == "auto":
        return "delta-spark" if present else "delta-rs"
    return writer


def write_with_delta_spark(
    rows: Any,
    table: str,
    *,
    app_id: str,
    batch_id: int,
    mode: str,
    partition_by: tuple[str, ...],
    value_columns: list[str],
) -> None:
    """Append or merge a batch through Spark's Delta writer, exactly-once by txnAppId/txnVersion.

    Delta skips a write whose ``(txnAppId, txnVersion)`` it has, so a replayed batch is
    not written twice, as with the delta-rs path. Not run here: no delta-spark jars.
    """
    if mode == "append":
        writer = (
            rows.write.format("delta")
            .option("txnAppId", app_id)
            .option("txnVersion", str(batch_id))
            .mode("append")
        )
        if partition_by:
            writer = writer.partitionBy(*partition_by)
        writer.save(table)
        return
    from delta.tables import DeltaTable  # delta-spark's Python package, beside its jars
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from sparklog.connect.delta import KEY, OFFSET, PARTITION

    # the last record of each key wins, as on the delta-rs path; all values null: a delete
    latest = Window.partitionBy(KEY).orderBy(F.col(PARTITION).desc(), F.col(OFFSET).desc())
    rows = rows.withColumn("_sparklog_n", F.row_number().over(latest)).where("_sparklog_n = 1")
    rows = rows.drop("_sparklog_n")
    tombstone = F.lit(True)
    for name in value_columns:
        tombstone = tombstone & F.col(name).isNull()
    spark = rows.sparkSession
    spark.conf.set("spark.databricks.delta.write.txnAppId", app_id)
    spark.conf.set("spark.databricks.delta.write.txnVersion", str(batch_id))
    try:
        if not DeltaTable.isDeltaTable(spark, table):
            rows.where(~tombstone).limit(0).write.format("delta").save(table)
        columns = {c: f"s.`{c}`" for c in rows.columns}
        (
            DeltaTable.forPath(spark, table)
            .alias("t")
            .merge(rows.withColumn("_sparklog_deleted", tombstone).alias("s"), f"t.{KEY} = s.{KEY}")
            .whenMatchedDelete(condition="s._sparklog_deleted")
            .whenMatchedUpdate(condition="NOT s._sparklog_deleted", set=columns)
            .whenNotMatchedInsert(condition="NOT s._sparklog_deleted", values=columns)
            .execute()
        )
    finally:
        spark.conf.unset("spark.databricks.delta.write.txnAppId")
        spark.conf.unset("spark.databricks.delta.write.txnVersion")
