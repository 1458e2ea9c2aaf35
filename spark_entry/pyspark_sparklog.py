"""Spark's entry point for ``format("sparklog")``.

Spark registers every top-level module named ``pyspark_<name>`` that exposes a
``DefaultSource`` when a session first looks up a Python data source, so
installing sparklog is enough: no ``spark.dataSource.register`` call needed.
"""

from sparklog.spark.source import SparklogDataSource as DefaultSource

__all__ = ["DefaultSource"]
