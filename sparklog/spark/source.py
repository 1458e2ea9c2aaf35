"""``format("sparklog")``: the PySpark data source tying options, readers and writers together.

Spark instantiates :class:`SparklogDataSource` with the query's options in
short-lived Python workers (schema, planning, writing) and pickles it to
executors, so it holds only the raw options; each method parses and validates
what it needs, raising errors whose messages reach the user unchanged.

Each Spark call runs in a fresh Python worker that must import this module
and connect back to the JVM within Spark's fixed time (docs/spark.md, "Python
worker start-up"), so each method imports only its own part: the data-source
lookup loads this module and the options, not the storage engine; the
streaming planner loads the stream reader, a write task the sink.
"""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from sparklog.errors import SparkOptionError
from sparklog.spark.options import (
    parse_sink_options,
    parse_source_options,
    parse_subscription_options,
)


class SparklogDataSource(DataSource):
    """Kafka-compatible source and sink over a sparklog root (see docs/spark.md)."""

    @classmethod
    def name(cls) -> str:
        return "sparklog"

    def schema(self) -> StructType:
        """Kafka's source schema; ``value`` is the topics' struct when they are typed."""
        from sparklog.spark.offsets import RootView
        from sparklog.spark.roots import cached_root
        from sparklog.spark.schema import source_schema

        root_url, storage_options, subscription, include_headers = parse_subscription_options(
            self.options
        )
        view = RootView(cached_root(root_url, storage_options), subscription)
        infos = view.refresh_topics()
        typed = {name: info.value_type for name, info in infos.items()}
        kinds = {str(t) for t in typed.values()}
        if len(kinds) > 1:
            described = ", ".join(f"{n}: {t or 'binary'}" for n, t in sorted(typed.items()))
            raise SparkOptionError(
                f"the subscribed topics have different value types ({described}); read topics "
                "with different value schemas in separate queries"
            )
        value_type = next(iter(typed.values())) if typed else None
        return source_schema(value_type, include_headers)

    def reader(self, schema: StructType) -> DataSourceReader:
        from sparklog.spark.batch import batch_reader

        return batch_reader(parse_source_options(self.options, streaming=False), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """The streaming reader; on pyspark < 4.2 the rate-limit options are refused.

        Without admission control Spark asks for the latest offsets without the
        batch's start, so a limit could not be applied exactly across restarts.
        """
        from sparklog.spark.compat import (
            HAS_ADMISSION_CONTROL,
            RATE_LIMIT_OPTIONS,
            needs_admission_control,
        )
        from sparklog.spark.stream import SparklogStreamReader

        options = parse_source_options(self.options, streaming=True)
        if not HAS_ADMISSION_CONTROL:
            given = {str(k).lower() for k in self.options}
            for key in RATE_LIMIT_OPTIONS:
                if key.lower() in given:
                    raise SparkOptionError(needs_admission_control(f"option {key!r}"))
        return SparklogStreamReader(options, schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        """The batch writer; exactly-once per (txnAppId, txnVersion) when both are set.

        Spark refuses its default save mode (ErrorIfExists) for every Python
        data source before calling this, naming Append; ``overwrite`` reaches
        here and is refused with the same fix.
        """
        from sparklog.spark.sink import SparklogBatchWriter, validate_sink_schema

        options = parse_sink_options(self.options)
        if overwrite:
            raise SparkOptionError(
                "save mode 'overwrite' is not supported: a topic is an append-only log; "
                'accepted: append (write .mode("append"))'
            )
        if options.txn_app_id is not None and options.txn_version is None:
            raise SparkOptionError(
                "option 'txnAppId' needs option 'txnVersion' in a batch write (a number that "
                "grows with every write of this app id, e.g. foreachBatch's batch id); a write "
                "whose version was already committed is skipped"
            )
        validate_sink_schema(schema, options)
        return SparklogBatchWriter(options)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        """The streaming writer; ``overwrite`` is complete mode, appended as Kafka's sink does.

        Update mode never reaches here: Spark refuses it for Python sinks (the
        recipe is foreachBatch with txnAppId/txnVersion, see docs/spark.md).
        """
        from sparklog.spark.sink import SparklogStreamWriter, validate_sink_schema

        options = parse_sink_options(self.options)
        if options.txn_version is not None:
            raise SparkOptionError(
                "option 'txnVersion' is for batch writes (df.write, e.g. inside foreachBatch); "
                "a streaming write is marked with its batch id"
            )
        validate_sink_schema(schema, options)
        return SparklogStreamWriter(options)
