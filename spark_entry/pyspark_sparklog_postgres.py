"""Spark's entry point for ``format("sparklog-postgres")`` (found as ``pyspark_sparklog`` is)."""

from sparklog.spark.postgres_stream import PostgresStreamDataSource as DefaultSource

__all__ = ["DefaultSource"]
