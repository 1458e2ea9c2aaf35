"""Broker, topic, client and Spark keys are parsed by one module and refused in one wording."""

from __future__ import annotations

import pytest

from sparklog.errors import ConfigError, InvalidConfigError, SparkOptionError
from sparklog.settings import BOOLEAN, choice, choice_set, integer, parse_value


def test_each_layer_refuses_a_bad_integer_in_the_same_words(tmp_path):
    from sparklog.broker_lite.config import load_config
    from sparklog.client.producer import Producer
    from sparklog.spark.options import parse_source_options
    from sparklog.storage.config import validate_config

    with pytest.raises(InvalidConfigError) as broker:
        load_config(env={"SPARKLOG_LINGER_MS": "soon"})
    with pytest.raises(InvalidConfigError) as topic:
        validate_config({"retention.ms": "soon"})
    with pytest.raises(ConfigError) as client:
        Producer(str(tmp_path / "root"), linger_ms="soon")
    with pytest.raises(SparkOptionError) as spark:
        parse_source_options(
            {"root": str(tmp_path), "subscribe": "t", "maxOffsetsPerTrigger": "soon"},
            streaming=True,
        )
    assert str(broker.value) == (
        "config key 'linger_ms'='soon' (from environment SPARKLOG_LINGER_MS) is not accepted; "
        "accepted: an integer >= 0"
    )
    assert (
        str(topic.value)
        == "config 'retention.ms'='soon' is not accepted; accepted: an integer >= -1"
    )
    assert str(client.value) == "linger_ms='soon' is not accepted; accepted: an integer >= 0"
    assert str(spark.value) == (
        "option 'maxOffsetsPerTrigger'='soon' is not accepted; accepted: an integer >= 1"
    )
    assert not (tmp_path / "root").exists()  # refused before anything was created


@pytest.mark.parametrize(
    ("kind", "raw", "value"),
    [
        (integer(0), "7", 7),
        (integer(0), 7, 7),
        (integer(-1, 5), " -1 ", -1),
        (BOOLEAN, "Yes", True),
        (BOOLEAN, "off", False),
        (BOOLEAN, False, False),
        (choice("a", "B", fold_case=True), "b", "B"),
        (choice("all", "1", aliases={"-1": "all"}), "-1", "all"),
        (choice_set("delete", "compact"), "delete, compact", "compact,delete"),
    ],
)
def test_values_convert(kind, raw, value):
    assert parse_value("k", raw, kind) == value


@pytest.mark.parametrize(
    ("kind", "raw"),
    [
        (integer(0), "-1"),
        (integer(0, 9), 10),
        (integer(0), True),
        (integer(0), 1.5),
        (BOOLEAN, "maybe"),
        (choice("a", "b"), "A"),
        (choice_set("delete", "compact"), ""),
        (choice_set("delete", "compact"), "delete,shred"),
    ],
)
def test_bad_values_are_refused_with_what_is_accepted(kind, raw):
    with pytest.raises(InvalidConfigError, match=rf"accepted: {kind.accepted}$"):
        parse_value("k", raw, kind)
