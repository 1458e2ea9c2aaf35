"""In-memory tail of recently committed batches, so consumers at the head skip the root.

Per partition the cache holds one contiguous offset range ``[start, end)`` of
batches as committed; the offset column is added to what :meth:`TailCache.get`
returns, not at commit (a flush over 1,024 partitions built 1,024 offset
columns before acknowledging, most never read from here).  A commit that does not continue the
range (another writer committed in between) restarts it.  A global byte budget
evicts the oldest batches of the partition whose entry is oldest.  A batch is
counted at its data size plus :data:`BATCH_OVERHEAD_BYTES`: the many tiny
batches of keyed producers over many partitions cost far more than their data.
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from dataclasses import dataclass, field

import pyarrow as pa

from sparklog.storage.records import with_offset_column

PartitionKey = tuple[str, str, int]  # topic name, topic id, partition

#: memory a cached record batch holds besides its data: the C++ arrays, buffers (each
#: padded to 64 bytes) and Python wrapper; measured 7.7 KiB for a two-record batch of
#: 243 data bytes (bench/soak.py found the broker's RSS growing 1.7 MB/s without it,
#: the 64 MiB budget holding about 2 GiB)
BATCH_OVERHEAD_BYTES = 8192


@dataclass
class _Tail:
    start: int
    end: int
    batches: deque[tuple[int, pa.RecordBatch, int]] = field(
        default_factory=deque
    )  # first, batch, bytes
    size_bytes: int = 0


class TailCache:
    """Recently committed batches of many partitions within ``max_bytes``."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._tails: OrderedDict[PartitionKey, _Tail] = OrderedDict()
        self._size_bytes = 0

    def add(
        self,
        key: PartitionKey,
        base_offset: int,
        batches: list[pa.RecordBatch],
        size_bytes: int | None = None,
    ) -> None:
        """Record batches committed at ``base_offset`` (without their offset column).

        ``size_bytes``, if the caller knows it, is the batches' size, shared
        among them by rows; otherwise each batch's ``nbytes`` is taken.
        """
        if self.max_bytes <= 0:
            return
        rows = sum(b.num_rows for b in batches)
        with self._lock:
            tail = self._tails.get(key)
            if tail is None or tail.end != base_offset:
                if tail is not None:
                    self._size_bytes -= tail.size_bytes
                tail = _Tail(base_offset, base_offset)
                self._tails[key] = tail
            self._tails.move_to_end(key)
            for batch in batches:
                if not batch.num_rows:
                    continue
                data = batch.nbytes if size_bytes is None else size_bytes * batch.num_rows // rows
                size = data + BATCH_OVERHEAD_BYTES
                tail.batches.append((tail.end, batch, size))
                tail.end += batch.num_rows
                tail.size_bytes += size
                self._size_bytes += size
            self._evict()

    def _evict(self) -> None:
        while self._size_bytes > self.max_bytes and self._tails:
            key, tail = next(iter(self._tails.items()))
            if not tail.batches:
                self._tails.pop(key)
                continue
            first, batch, size = tail.batches.popleft()
            tail.start = first + batch.num_rows
            tail.size_bytes -= size
            self._size_bytes -= size
            if not tail.batches:
                self._tails.pop(key)

    def get(self, key: PartitionKey, offset: int, max_bytes: int) -> list[pa.RecordBatch] | None:
        """Batches from ``offset`` with their offset column (at least one, then up to
        ``max_bytes``); None on a miss."""
        with self._lock:
            tail = self._tails.get(key)
            if tail is None or not tail.start <= offset < tail.end:
                return None
            out: list[pa.RecordBatch] = []
            total = 0
            for first, batch, _ in tail.batches:
                last = first + batch.num_rows
                if last <= offset:
                    continue
                piece = batch.slice(offset - first) if offset > first else batch
                out.append(with_offset_column(max(offset, first), piece))
                total += piece.nbytes
                if total >= max_bytes:
                    break
            return out

    def trim(self, key: PartitionKey, log_start_offset: int) -> None:
        """Forget batches below the log start offset (after retention)."""
        with self._lock:
            tail = self._tails.get(key)
            if tail is None or tail.start >= log_start_offset:
                return
            self._size_bytes -= tail.size_bytes
            self._tails.pop(key)

    def drop(self, key: PartitionKey) -> None:
        with self._lock:
            tail = self._tails.pop(key, None)
            if tail is not None:
                self._size_bytes -= tail.size_bytes

    @property
    def size_bytes(self) -> int:
        return self._size_bytes
