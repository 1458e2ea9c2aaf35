"""Kafka's default partitioner: ``toPositive(murmur2(key)) % partitions``.

Keyed records must land in the partition Kafka's Java client would choose, so
that a pipeline moved from Kafka keeps per-key ordering and co-partitioning.
``murmur2`` is the scalar reference; ``kafka_partitions`` hashes a whole Arrow
column with numpy (keys grouped by length, four bytes at a time), because the
Spark sink partitions millions of rows and must not loop in Python per row.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

SEED = 0x9747B28C
M = 0x5BD1E995
MASK32 = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's 32-bit murmur2 of ``data``, as a signed int (``Utils.murmur2``)."""
    length = len(data)
    h = (SEED ^ length) & MASK32
    full = length - length % 4
    for i in range(0, full, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * M) & MASK32
        k ^= k >> 24
        k = (k * M) & MASK32
        h = (h * M) & MASK32
        h ^= k
    tail = length % 4
    if tail == 3:
        h ^= data[full + 2] << 16
    if tail >= 2:
        h ^= data[full + 1] << 8
    if tail >= 1:
        h ^= data[full]
        h = (h * M) & MASK32
    h ^= h >> 13
    h = (h * M) & MASK32
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def kafka_partition(key: bytes, num_partitions: int) -> int:
    """The partition Kafka's default partitioner picks for a non-null ``key``."""
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions


def _murmur2_fixed(rows: np.ndarray) -> np.ndarray:
    """murmur2 of each row of a (n, length) uint8 matrix, as uint32 (vectorised)."""
    n, length = rows.shape
    m = np.uint32(M)
    h = np.full(n, (SEED ^ length) & MASK32, dtype=np.uint32)
    full = length - length % 4
    if full:
        words = np.ascontiguousarray(rows[:, :full]).view("<u4").reshape(n, full // 4)
        for j in range(words.shape[1]):
            k = words[:, j] * m
            k ^= k >> np.uint32(24)
            k *= m
            h *= m
            h ^= k
    tail = length % 4
    if tail == 3:
        h ^= rows[:, full + 2].astype(np.uint32) << np.uint32(16)
    if tail >= 2:
        h ^= rows[:, full + 1].astype(np.uint32) << np.uint32(8)
    if tail >= 1:
        h ^= rows[:, full].astype(np.uint32)
        h *= m
    h ^= h >> np.uint32(13)
    h *= m
    h ^= h >> np.uint32(15)
    return h


def kafka_partitions(keys: pa.Array | pa.ChunkedArray, num_partitions: int) -> np.ndarray:
    """Kafka's partition for every key of a binary column; -1 where the key is null."""
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks()
    if not pa.types.is_binary(keys.type):
        keys = keys.cast(pa.binary())
    n = len(keys)
    out = np.full(n, -1, dtype=np.int32)
    if n == 0 or keys.null_count == n:
        return out
    lengths = pc.binary_length(keys).to_numpy(zero_copy_only=False)
    valid = keys.is_valid().to_numpy(zero_copy_only=False)
    data = np.frombuffer(keys.buffers()[2] or b"", dtype=np.uint8)
    starts = np.frombuffer(keys.buffers()[1], dtype=np.int32)[keys.offset : keys.offset + n]
    if keys.null_count == 0 and n and bool((lengths == lengths[0]).all()):
        # The common case (fixed-length keys, no nulls): the data buffer is an (n, length) matrix.
        length = int(lengths[0])
        first = int(starts[0])
        matrix = data[first : first + n * length].reshape(n, length)
        hashes = _murmur2_fixed(matrix)
        return ((hashes & np.uint32(0x7FFFFFFF)) % np.uint32(num_partitions)).astype(np.int32)
    for length in np.unique(lengths[valid]):
        length = int(length)
        rows = np.nonzero(valid & (lengths == length))[0]
        if length:
            index = starts[rows][:, None] + np.arange(length)[None, :]
            hashes = _murmur2_fixed(data[index])
        else:
            hashes = _murmur2_fixed(np.zeros((len(rows), 0), dtype=np.uint8))
        out[rows] = ((hashes & np.uint32(0x7FFFFFFF)) % np.uint32(num_partitions)).astype(np.int32)
    return out
