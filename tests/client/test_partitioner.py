"""The keyed partitioner must agree with Kafka's murmur2 exactly.

Reference values are not computed here: they come from Kafka's own tests and
from other clients' tests that compare against the Java client:
* apache/kafka clients/.../utils/UtilsTest.java ``testMurmur2`` (as quoted in
  kafka_ex test/kafka_ex/utils/murmur_test.exs);
* akka's Murmur2Spec, "expected correct hash values from the kafka murmur2 impl";
* kafka-python test/test_partitioner.py ``test_murmur2_java_compatibility``
  ("compare with output from Kafka's org.apache.kafka.clients.producer.Partitioner",
  1000 partitions).
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparklog.client.partitioner import (
    StickyPartitioner,
    murmur2,
    murmur2_array,
    partition_for_key,
    partitions_for_keys,
)

KAFKA_UTILS_TEST = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}
AKKA_SPEC = {
    b"1": -1993445489,
    b"12": 126087238,
    b"123": -267702483,
    b"1234": -1614185708,
    b"12345": -1188365604,
}
JAVA_PARTITION_OF_1000 = {
    b"": 681,
    b"a": 524,
    b"ab": 434,
    b"abc": 107,
    b"123456789": 566,
    b"\x00 ": 742,
}


@pytest.mark.parametrize("key,expected", [*KAFKA_UTILS_TEST.items(), *AKKA_SPEC.items()])
def test_murmur2_matches_kafka(key, expected):
    assert murmur2(key) == expected


@pytest.mark.parametrize("key,expected", JAVA_PARTITION_OF_1000.items())
def test_partition_matches_java_producer(key, expected):
    assert partition_for_key(key, 1000) == expected


def test_vectorised_hash_matches_known_pairs():
    keys = [*KAFKA_UTILS_TEST, *AKKA_SPEC, None]
    hashes = murmur2_array(pa.array(keys, pa.binary()))
    expected = [*KAFKA_UTILS_TEST.values(), *AKKA_SPEC.values()]
    assert [int(h) - (1 << 32) if h >= 1 << 31 else int(h) for h in hashes[:-1]] == expected
    parts = partitions_for_keys(pa.array([*JAVA_PARTITION_OF_1000, None], pa.binary()), 1000)
    assert parts.tolist() == [*JAVA_PARTITION_OF_1000.values(), -1]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.none(), st.binary(max_size=40)), max_size=30))
def test_vectorised_agrees_with_scalar(keys):
    parts = partitions_for_keys(pa.array(keys, pa.binary()), 7).tolist()
    assert parts == [-1 if k is None else partition_for_key(k, 7) for k in keys]


def test_sliced_arrays_hash_their_own_rows():
    array = pa.array([b"x", b"21", b"foobar"], pa.binary()).slice(1)
    assert partitions_for_keys(array, 1000).tolist() == [
        partition_for_key(b"21", 1000),
        partition_for_key(b"foobar", 1000),
    ]


def test_chunked_arrays_hash_every_chunk():
    column = pa.array([b"21", None, b"foobar", b"abc"], pa.binary())
    chunked = pa.chunked_array([column[:1], column[1:]])
    assert partitions_for_keys(chunked, 12).tolist() == partitions_for_keys(column, 12).tolist()


def test_string_keys_hash_as_their_utf8_bytes():
    got = partitions_for_keys(pa.array(["foobar", "21", None]), 5).tolist()
    assert got == [partition_for_key(b"foobar", 5), partition_for_key(b"21", 5), -1]


def test_sticky_partitioner_sticks_then_moves():
    sticky = StickyPartitioner()
    first = sticky.partition("t", 5)
    assert all(sticky.partition("t", 5) == first for _ in range(20))
    moved = sticky.on_new_batch("t", 5, first)
    assert moved != first and 0 <= moved < 5
    assert sticky.partition("t", 5) == moved
    assert sticky.partition("u", 1) == 0
    assert sticky.on_new_batch("u", 1, 0) == 0
