"""Connectors (docs/connect.md): topics into Delta tables, PostgreSQL changes into topics.

* :mod:`sparklog.connect.delta`: exactly-once appends and merges of Arrow tables into a
  Delta table through delta-rs, deduplicated by Delta's app transaction ids; Spark's side
  (the ``foreachBatch`` function and the ``delta-sink`` query) is
  :mod:`sparklog.spark.delta_sink`, the only part that imports pyspark.
* :mod:`sparklog.connect.postgres`: a snapshot of PostgreSQL tables, then their changes
  from logical replication (``pgoutput``), as Debezium's envelope into one topic per table.
* :mod:`sparklog.connect.state`: each connector's state document in the root, which
  ``sparklog connect list|status`` read.
"""


def require(module: str) -> None:
    """Import ``module`` (deltalake, psycopg) or say which extra installs it, in one line."""
    import importlib

    from sparklog.errors import ConnectorConfigError

    try:
        importlib.import_module(module)
    except ImportError:
        raise ConnectorConfigError(
            f"the connectors need {module!r}, which is not installed: "
            "pip install 'sparklog[connect]'"
        ) from None
