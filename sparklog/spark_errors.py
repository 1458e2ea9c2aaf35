"""Errors raised by the Spark data source (``format("sparklog")``).

Spark wraps them in its own exceptions, keeping the message; so every message
names the offending option, column or range and what is accepted.
"""

from __future__ import annotations


class SparkSourceError(Exception):
    """Root of every error of the sparklog Spark data source."""

    retriable: bool = False


class SparkOptionError(SparkSourceError, ValueError):
    """An option that is missing, unknown or has a value that is not accepted."""


class SinkColumnError(SparkSourceError, ValueError):
    """A DataFrame written to sparklog lacks ``value`` or has a column of a wrong type."""


class DataLossError(SparkSourceError):
    """Offsets the query needs are gone (retention, deleted topic) and failOnDataLoss=true."""
