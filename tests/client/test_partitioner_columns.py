"""Kafka's murmur2 partitioner: reference vectors from Kafka, and the vectorised column path."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from sparklog.client.partitioner import murmur2, partition_for_key, partitions_for_keys

# Kafka's UtilsTest.testMurmur2 vectors.
KAFKA_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


@pytest.mark.parametrize(("key", "expected"), KAFKA_VECTORS.items())
def test_murmur2_matches_kafka(key: bytes, expected: int) -> None:
    assert murmur2(key) == expected


def test_kafka_partition_is_positive_murmur_modulo() -> None:
    assert partition_for_key(b"foobar", 4) == (-790332482 & 0x7FFFFFFF) % 4
    assert all(0 <= partition_for_key(k, 7) < 7 for k in KAFKA_VECTORS)


def test_vectorised_partitions_equal_scalar_for_any_lengths_nulls_and_slices() -> None:
    rng = random.Random(7)
    keys = [None if rng.random() < 0.1 else rng.randbytes(rng.randint(0, 40)) for _ in range(2000)]
    column = pa.array(keys, pa.binary())
    for array in (column, column.slice(13, 1500), pa.chunked_array([column[:700], column[700:]])):
        got = partitions_for_keys(array, 12).tolist()
        values = array.to_pylist()
        assert got == [-1 if k is None else partition_for_key(k, 12) for k in values]


def test_string_keys_hash_as_their_utf8_bytes() -> None:
    got = partitions_for_keys(pa.array(["foobar", "21", None]), 5).tolist()
    assert got == [partition_for_key(b"foobar", 5), partition_for_key(b"21", 5), -1]
