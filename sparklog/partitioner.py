"""Kafka's default partitioner: murmur2 of the key bytes for keyed records, sticky for null keys.

``murmur2`` is bit-for-bit the function in Kafka's ``Utils.murmur2`` (seed
0x9747b28c), and ``partition_for_key`` is ``toPositive(murmur2(key)) %
partitions`` as in ``BuiltInPartitioner.partitionForKey``, so keyed records land
where a Java Kafka producer would put them.  ``murmur2_array`` computes the same
hash for a whole Arrow column at once (numpy, grouped by key length) for
columnar ``send_batch``.
"""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

SEED = 0x9747B28C
M = 0x5BD1E995
R = 24
MASK32 = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 of ``data`` as a signed 32-bit int, as Java's ``Utils.murmur2`` returns."""
    length = len(data)
    h = (SEED ^ length) & MASK32
    whole = length - (length % 4)
    for i in range(0, whole, 4):
        k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)
        k = (k * M) & MASK32
        k ^= k >> R
        k = (k * M) & MASK32
        h = (h * M) & MASK32
        h ^= k
    tail = length % 4
    if tail == 3:
        h ^= data[whole + 2] << 16
    if tail >= 2:
        h ^= data[whole + 1] << 8
    if tail >= 1:
        h ^= data[whole]
        h = (h * M) & MASK32
    h ^= h >> 13
    h = (h * M) & MASK32
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(number: int) -> int:
    """Kafka's ``Utils.toPositive``: clear the sign bit (not abs())."""
    return number & 0x7FFFFFFF


def partition_for_key(key: bytes, partitions: int) -> int:
    return to_positive(murmur2(key)) % partitions


def murmur2_array(keys: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """murmur2 of every non-null key as uint32 (null keys give 0; mask them yourself)."""
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks()
    if not pa.types.is_binary(keys.type):
        keys = keys.cast(pa.binary())
    n = len(keys)
    out = np.zeros(n, dtype=np.uint32)
    if n == 0:
        return out
    lengths = pc.fill_null(pc.binary_length(keys), -1).to_numpy(zero_copy_only=False)
    buffers = keys.buffers()
    offsets = np.frombuffer(buffers[1], dtype=np.int32)[keys.offset : keys.offset + n + 1]
    raw = (
        np.frombuffer(buffers[2], dtype=np.uint8)
        if buffers[2] is not None
        else np.zeros(0, np.uint8)
    )
    m = np.uint32(M)
    for length in np.unique(lengths):
        if length < 0:
            continue
        rows = np.nonzero(lengths == length)[0]
        starts = offsets[rows].astype(np.int64)
        h = np.full(len(rows), (SEED ^ int(length)) & MASK32, dtype=np.uint32)
        whole = int(length) - int(length) % 4
        with np.errstate(over="ignore"):
            for i in range(0, whole, 4):
                b = [raw[starts + i + j].astype(np.uint32) for j in range(4)]
                k = b[0] | (b[1] << 8) | (b[2] << 16) | (b[3] << 24)
                k = k * m
                k ^= k >> np.uint32(R)
                k = k * m
                h = h * m
                h ^= k
            tail = int(length) % 4
            if tail == 3:
                h ^= raw[starts + whole + 2].astype(np.uint32) << 16
            if tail >= 2:
                h ^= raw[starts + whole + 1].astype(np.uint32) << 8
            if tail >= 1:
                h ^= raw[starts + whole].astype(np.uint32)
                h = h * m
            h ^= h >> np.uint32(13)
            h = h * m
            h ^= h >> np.uint32(15)
        out[rows] = h
    return out


def partitions_for_keys(keys: pa.Array | pa.ChunkedArray, partitions: int) -> np.ndarray:
    """Kafka's partition of every key (int64); -1 where the key is null."""
    hashes = murmur2_array(keys)
    parts = (hashes & np.uint32(0x7FFFFFFF)).astype(np.int64) % partitions
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks()
    if keys.null_count:
        parts[keys.is_null().to_numpy(zero_copy_only=False)] = -1
    return parts


class StickyPartitioner:
    """Null-key records stick to one partition per topic until its batch is sent (KIP-480).

    Sticking fills batches faster than round-robin, which on object storage
    means fewer, larger objects; switching on every new batch spreads load.
    """

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()
        self._current: dict[str, int] = {}

    def partition(self, topic: str, partitions: int) -> int:
        current = self._current.get(topic)
        if current is None or current >= partitions:
            current = self._rng.randrange(partitions)
            self._current[topic] = current
        return current

    def on_new_batch(self, topic: str, partitions: int, previous: int) -> int:
        """Move to another partition once ``previous``'s batch is full or sent."""
        if self._current.get(topic) != previous:
            return self._current.get(topic, previous)
        if partitions <= 1:
            return 0
        choice = self._rng.randrange(partitions - 1)
        nxt = choice if choice < previous else choice + 1
        self._current[topic] = nxt
        return nxt
