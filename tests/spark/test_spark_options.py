"""Option parsing and read planning of format("sparklog"), without a Spark session."""

from __future__ import annotations

import itertools

import pytest

from sparklog.errors import SparkOptionError
from sparklog.spark.options import (
    OffsetSpec,
    parse_duration_ms,
    parse_sink_options,
    parse_source_options,
)
from sparklog.spark.plan import (
    ReadRange,
    limit_by_bytes,
    limit_by_offsets,
    plan_tasks,
    split_budget,
)

BASE = {"root": "file:///tmp/x", "subscribe": "t"}


def parse(streaming: bool = True, **extra: str):
    return parse_source_options({**BASE, **extra}, streaming=streaming)


def test_defaults_follow_kafka() -> None:
    stream, batch = parse(), parse(streaming=False)
    assert stream.starting == OffsetSpec("latest") and stream.ending is None
    assert batch.starting == OffsetSpec("earliest") and batch.ending == OffsetSpec("latest")
    assert stream.fail_on_data_loss and not stream.include_headers
    assert stream.max_trigger_delay_ms == 15 * 60_000


def test_options_are_case_insensitive_and_typed() -> None:
    opts = parse(
        MAXOFFSETSPERTRIGGER="100",
        minoffsetspertrigger="10",
        maxTriggerDelay="2s",
        maxBytesPerTrigger="4096",
        failOnDataLoss="False",
        includeHeaders="true",
        minPartitions="8",
        group="g1",
        **{"storage.client_kwargs.endpoint_url": "http://h:1", "storage.anon": "true"},
    )
    assert opts.max_offsets_per_trigger == 100 and opts.min_offsets_per_trigger == 10
    assert opts.max_trigger_delay_ms == 2000 and opts.max_bytes_per_trigger == 4096
    assert not opts.fail_on_data_loss and opts.include_headers and opts.min_partitions == 8
    assert opts.group == "g1"
    assert opts.storage_options == {"client_kwargs": {"endpoint_url": "http://h:1"}, "anon": True}


def test_offset_specs_follow_kafka_precedence() -> None:
    opts = parse(
        startingOffsets='{"t":{"0":5,"1":-2}}',
        startingOffsetsByTimestamp='{"t":{"0":1000}}',
        startingTimestamp="2000",
    )
    assert opts.starting == OffsetSpec("timestamp", timestamp_ms=2000)
    opts = parse(startingOffsets='{"t":{"0":5,"1":-2}}')
    assert opts.starting.offsets == {"t": {0: 5, 1: -2}}
    batch = parse(streaming=False, endingOffsetsByTimestamp='{"t":{"0":9}}')
    assert batch.ending == OffsetSpec("timestamps", timestamps={"t": {0: 9}})


def test_subscriptions() -> None:
    assert parse().subscription.topics == ("t",)
    pattern = parse_source_options(
        {"root": "/r", "subscribePattern": "ev.*"}, streaming=True
    ).subscription
    assert pattern.matches("events") and pattern.matches("xevents") and not pattern.matches("e")
    assign = parse_source_options(
        {"root": "/r", "assign": '{"b":[1,0],"a":[2]}'}, streaming=True
    ).subscription
    assert assign.assign == (("a", (2,)), ("b", (0, 1)))


def test_durations() -> None:
    assert parse_duration_ms("d", "500") == 500
    assert parse_duration_ms("d", "15m") == 900_000
    assert parse_duration_ms("d", "1h") == 3_600_000


@pytest.mark.parametrize(
    ("options", "streaming", "message"),
    [
        ({"root": "/r"}, True, "exactly one of the options 'subscribe', 'subscribePattern'"),
        ({**BASE, "assign": '{"t":[0]}'}, True, "got subscribe, assign"),
        ({"subscribe": "t"}, True, "option 'root' is required"),
        ({**BASE, "startingOffset": "earliest"}, True, "unknown source option 'startingoffset'"),
        ({**BASE, "maxOffsetsPerTrigger": "0"}, True, "'maxOffsetsPerTrigger'='0'"),
        ({**BASE, "maxOffsetsPerTrigger": "lots"}, True, "accepted: an integer >= 1"),
        ({**BASE, "failOnDataLoss": "maybe"}, True, "accepted: true, false"),
        ({**BASE, "maxTriggerDelay": "soon"}, True, "'maxTriggerDelay'='soon'"),
        ({**BASE, "startingOffsets": "newest"}, True, "'startingOffsets'='newest'"),
        ({**BASE, "startingOffsets": '{"t":{"0":-3}}'}, True, "integer >= -2"),
        ({**BASE, "endingOffsets": "latest"}, True, "for batch queries only"),
        ({**BASE, "startingOffsets": "latest"}, False, "not accepted for batch queries"),
        ({**BASE, "startingOffsets": '{"t":{"0":-1}}'}, False, "-1 (latest)"),
        ({**BASE, "endingOffsets": "earliest"}, False, "'endingOffsets'='earliest'"),
        (
            {**BASE, "minOffsetsPerTrigger": "10", "maxOffsetsPerTrigger": "5"},
            True,
            "'minOffsetsPerTrigger'=10 is higher than 'maxOffsetsPerTrigger'=5",
        ),
        (
            {**BASE, "startingOffsets": '{"t":{"0":9}}', "endingOffsets": '{"t":{"0":5}}'},
            False,
            "start offset 9 is greater than the end offset 5 for topic 't' partition 0",
        ),
        ({**BASE, "kafka.auto.offset.reset": "earliest"}, True, "Instead set the source option"),
        ({**BASE, "kafka.key.deserializer": "x"}, True, "'key.deserializer' is not supported"),
        ({**BASE, "kafka.value.deserializer": "x"}, False, "'value.deserializer' is not"),
        ({**BASE, "kafka.enable.auto.commit": "true"}, True, "'enable.auto.commit' is not"),
        ({**BASE, "kafka.interceptor.classes": "x"}, True, "'interceptor.classes' is not"),
        ({**BASE, "group": "a", "kafka.group.id": "b"}, True, "'group'='a' and 'kafka.group.id'"),
        ({**BASE, "maxRecordsPerPartition": "0"}, False, "'maxRecordsPerPartition'='0'"),
        ({"root": "/r", "subscribePattern": "("}, True, "not a valid regular expression"),
        ({"root": "/r", "assign": '{"t":"0"}'}, True, "option 'assign': topic 't'"),
        ({**BASE, "group": ""}, True, "option 'group'='' is not accepted"),
        ({**BASE, "broker": "nohost"}, True, "accepted: host:port"),
        ({**BASE, "startingOffsetsByTimestampStrategy": "x"}, True, "accepted: error, latest"),
    ],
)
def test_bad_source_options_name_the_option(options, streaming, message) -> None:
    with pytest.raises(SparkOptionError, match=None) as info:
        parse_source_options(options, streaming=streaming)
    assert message in str(info.value)


def test_kafka_client_options_are_accepted_and_bootstrap_is_the_broker() -> None:
    opts = parse(**{"kafka.bootstrap.servers": "h:9092", "kafka.security.protocol": "SSL"})
    assert opts.broker == "h:9092"


def test_kafka_group_id_names_the_group_but_only_group_resumes() -> None:
    kafka = parse(**{"kafka.group.id": "g1"})
    assert kafka.group == "g1" and not kafka.group_resumes  # Kafka's meaning: progress only
    assert parse(group="g1").group_resumes
    both = parse(**{"kafka.group.id": "g1", "group": "g1"})
    assert both.group == "g1" and both.group_resumes


@pytest.mark.parametrize(
    ("kafka_codec", "stored"),
    [("gzip", "zstd"), ("snappy", "lz4"), ("LZ4", "lz4"), ("zstd", "zstd"), ("none", "none")],
)
def test_kafka_compression_type_compresses_with_the_nearest_arrow_codec(kafka_codec, stored):
    opts = parse_sink_options({"root": "/r", "kafka.compression.type": kafka_codec})
    assert opts.compression == stored


def test_unknown_kafka_compression_type_is_refused() -> None:
    with pytest.raises(SparkOptionError, match=r"'kafka.compression.type'='brotli'.*accepted: "):
        parse_sink_options({"root": "/r", "kafka.compression.type": "brotli"})


def test_subscribe_pattern_is_trimmed_like_spark() -> None:
    sub = parse_source_options({"root": "/r", "subscribePattern": " ^t1$ "}, streaming=True)
    assert sub.subscription.pattern == "^t1$" and sub.subscription.matches("t1")


@pytest.mark.parametrize("pattern", [r"\p{Alpha}+", r"\Qa.b\E", "[a-z&&[^x]]", r"t\z"])
def test_java_only_regex_syntax_is_refused_naming_pythons_dialect(pattern) -> None:
    with pytest.raises(SparkOptionError, match=r"Python regular expression \(the re module\)"):
        parse_source_options({"root": "/r", "subscribePattern": pattern}, streaming=True)


def test_batch_reads_ignore_streaming_rate_options_with_a_warning(caplog) -> None:
    """Kafka's connector ignores them in batch queries, so one options dict serves both."""
    shared = {"maxOffsetsPerTrigger": "5", "minOffsetsPerTrigger": "2", "maxTriggerDelay": "1s"}
    with caplog.at_level("WARNING", logger="sparklog.spark.options"):
        opts = parse(streaming=False, **shared)
    assert opts.max_offsets_per_trigger is None and opts.min_offsets_per_trigger is None
    warned = [r.getMessage() for r in caplog.records]
    assert "maxOffsetsPerTrigger option ignored in batch queries" in warned
    assert "maxTriggerDelay option ignored in batch queries" in warned
    assert parse(**shared).max_offsets_per_trigger == 5


def test_subscribe_pattern_searches_like_kafka() -> None:
    """Kafka's connector uses Matcher.find: an unanchored pattern matches inside names."""
    sub = parse_source_options({"root": "/r", "subscribePattern": "orders"}, streaming=True)
    assert sub.subscription.matches("eu.orders.v1") and not sub.subscription.matches("order")
    anchored = parse_source_options({"root": "/r", "subscribePattern": "^ev"}, streaming=True)
    assert anchored.subscription.matches("events") and not anchored.subscription.matches("xev")


def test_max_records_per_partition_caps_every_task() -> None:
    opts = parse(streaming=False, maxRecordsPerPartition="30")
    assert opts.max_records_per_partition == 30
    ranges = [layout(0, 100, 10), ReadRange("t", 1, 5, 20, (5, 20), (0, 150))]
    tasks = plan_tasks(ranges, min_partitions=None, cores=2, max_records=30)
    sizes = [sum(r.end - r.start for r in task) for task in tasks]
    assert max(sizes) <= 30 and sum(sizes) == 115 and len(tasks) == 5
    offsets = sorted(o for task in tasks for r in task for o in range(r.start, r.end))
    assert offsets == sorted([*range(100), *range(5, 20)])


def test_sink_options() -> None:
    opts = parse_sink_options({"root": "/r", "topic": "out", "kafka.compression.type": "zstd"})
    assert opts.topic == "out" and opts.compression == "zstd"
    with pytest.raises(SparkOptionError, match="'compression'='gzip'"):
        parse_sink_options({"root": "/r", "compression": "gzip"})
    with pytest.raises(SparkOptionError, match="unknown sink option 'subscribe'"):
        parse_sink_options({"root": "/r", "subscribe": "t"})
    with pytest.raises(SparkOptionError, match="'key.serializer' is not supported"):
        parse_sink_options({"root": "/r", "kafka.key.serializer": "x"})
    with pytest.raises(SparkOptionError, match="'txnVersion' needs option 'txnAppId'"):
        parse_sink_options({"root": "/r", "txnVersion": "3"})
    txn = parse_sink_options({"root": "/r", "txnAppId": "job", "txnVersion": "3"})
    assert (txn.txn_app_id, txn.txn_version) == ("job", 3)


# -- planning -----------------------------------------------------------------


def layout(start: int, end: int, bytes_per_offset: int) -> ReadRange:
    return ReadRange("t", 0, start, end, (start, end), (0, (end - start) * bytes_per_offset))


def test_small_ranges_are_packed_into_one_task() -> None:
    ranges = [ReadRange("t", p, 0, 10, (0, 10), (0, 1000)) for p in range(8)]
    tasks = plan_tasks(ranges, min_partitions=None, cores=2)
    assert len(tasks) == 1 and len(tasks[0]) == 8


def test_a_backlog_becomes_one_task_per_core_of_equal_bytes() -> None:
    big = ReadRange("t", 0, 0, 1_000_000, (0, 1_000_000), (0, 200 << 20))
    tasks = plan_tasks([big], min_partitions=None, cores=2)
    assert len(tasks) == 2
    pieces = sorted(r for t in tasks for r in [(t[0].start, t[0].end)])
    assert pieces == [(0, 500_000), (500_000, 1_000_000)]


def test_min_partitions_splits_big_ranges_without_losing_offsets() -> None:
    ranges = [layout(0, 1000, 100), layout(0, 10, 100)]
    ranges[1] = ReadRange("t", 1, 0, 10, (0, 10), (0, 1000))
    tasks = plan_tasks(ranges, min_partitions=5, cores=2)
    assert len(tasks) == 5
    covered = sorted((r.partition, r.start, r.end) for t in tasks for r in t)
    p0 = [(s, e) for p, s, e in covered if p == 0]
    assert p0[0][0] == 0 and p0[-1][1] == 1000
    assert all(a[1] == b[0] for a, b in itertools.pairwise(p0))


def test_split_budget_is_proportional_and_exact() -> None:
    share = split_budget({("a", 0): 300, ("a", 1): 100, ("b", 0): 0}, 100)
    assert share == {("a", 0): 75, ("a", 1): 25}
    assert split_budget({("a", 0): 3}, 100) == {("a", 0): 3}


def test_limit_by_offsets_splits_by_backlog() -> None:
    ends = limit_by_offsets({("t", 0): 10, ("t", 1): 0}, {("t", 0): 310, ("t", 1): 100}, 40)
    assert ends == {("t", 0): 40, ("t", 1): 10}


def test_limit_by_bytes_always_progresses() -> None:
    r = layout(0, 10, 1000)
    assert limit_by_bytes({("t", 0): r}, 10) == {("t", 0): 1}
    assert limit_by_bytes({("t", 0): r}, 5000) == {("t", 0): 5}


def test_storage_options_follow_the_clients_rule_json_values_included() -> None:
    """One rule for ``storage.<key>`` (Spark) and ``key=value`` (CLI, env): JSON values too."""
    from sparklog.storage_options import parse_storage_options

    opts = parse(
        **{"storage.config_kwargs": '{"retries": {"max_attempts": 3}}', "storage.anon": "false"}
    )
    expected = {"config_kwargs": {"retries": {"max_attempts": 3}}, "anon": False}
    assert opts.storage_options == expected
    assert (
        parse_storage_options(['config_kwargs={"retries": {"max_attempts": 3}}', "anon=false"])
        == expected
    )
    with pytest.raises(SparkOptionError, match="'storage.config_kwargs'.*not valid JSON"):
        parse(**{"storage.config_kwargs": "{retries"})


def test_kafka_isolation_level_is_honoured_default_read_uncommitted() -> None:
    # Kafka's connector defaults to read_uncommitted (tests/storage/test_txn_markers.py
    # reads with both levels)
    assert parse().read_committed is False
    assert parse(**{"kafka.isolation.level": "read_uncommitted"}).read_committed is False
    assert parse(**{"kafka.isolation.level": "READ_COMMITTED"}).read_committed is True
    with pytest.raises(SparkOptionError, match="not accepted"):
        parse(**{"kafka.isolation.level": "serializable"})
