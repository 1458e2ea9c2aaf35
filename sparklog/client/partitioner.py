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
            k ^= k >> np.uint32(R)
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


def murmur2_array(keys: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """murmur2 of every non-null key as uint32 (null keys give 0; mask them yourself).

    Keys of one length form an (n, length) byte matrix hashed a 32-bit word
    column at a time; fixed-length keys without nulls (the common case) use the
    data buffer itself as that matrix, with no copy.
    """
    import pyarrow.compute as pc

    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks()
    if not pa.types.is_binary(keys.type):
        keys = keys.cast(pa.binary())
    n = len(keys)
    out = np.zeros(n, dtype=np.uint32)
    if n == 0 or keys.null_count == n:
        return out
    lengths = pc.fill_null(pc.binary_length(keys), -1).to_numpy(zero_copy_only=False)
    data = np.frombuffer(keys.buffers()[2] or b"", dtype=np.uint8)
    starts = np.frombuffer(keys.buffers()[1], dtype=np.int32)[keys.offset : keys.offset + n]
    if keys.null_count == 0 and bool((lengths == lengths[0]).all()):
        length, first = int(lengths[0]), int(starts[0])
        return _murmur2_fixed(data[first : first + n * length].reshape(n, length))
    for length in np.unique(lengths[lengths >= 0]):
        rows = np.nonzero(lengths == length)[0]
        index = starts[rows][:, None].astype(np.int64) + np.arange(int(length))[None, :]
        out[rows] = _murmur2_fixed(data[index].reshape(len(rows), int(length)))
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
