"""Segment objects: immutable Arrow IPC files holding batches for many partitions.

One flush writes one object per topic (or one for several topics:
:mod:`sparklog.storage.shared_objects`).  Inside a topic's object, each partition's record
batches are contiguous, so a partition's share of the object is one byte range:
a *segment*.  The object is a valid Arrow IPC file (any Arrow tool reads it);
its schema's metadata (key ``sparklog.partitions``) names each partition's batch
range.  Objects written before pyarrow 19 was supported carry the same directory
in the IPC *file footer's* metadata instead, which only pyarrow >= 21 writes and
reads; :func:`partition_directory` reads either.  No offsets are stored
(offsets are assigned at commit), except in objects written by compaction,
which carry an ``offset`` column because compaction leaves gaps.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, replace
from queue import SimpleQueue
from typing import Any

import numpy as np
import pyarrow as pa
import xxhash

from sparklog.clock import now_ms
from sparklog.errors import CorruptRecordError, InvalidConfigurationError
from sparklog.storage.background import background_pool, outcome
from sparklog.storage.objectstore import ObjectStore, Writable
from sparklog.storage.records import OFFSET_FIELD, int64_values

COMPRESSIONS = ("none", "lz4", "zstd")
#: The per-partition batch directory's key: in the file schema's metadata (written by
#: every pyarrow sparklog supports), or in the IPC file footer's (older objects).
FOOTER_KEY = b"sparklog.partitions"


def partition_directory(data: bytes) -> dict[int, dict[str, int]]:
    """A whole object's per-partition batch directory: partition -> first_batch, batch_count, rows.

    Read from the file schema's metadata (objects written now), else from the
    IPC file footer's metadata (objects written with pyarrow >= 21 before the
    directory moved; reading those needs pyarrow >= 21 too).
    """
    reader = pa.ipc.open_file(pa.py_buffer(data))
    raw = (reader.schema.metadata or {}).get(FOOTER_KEY)
    if raw is None:
        footer = getattr(reader, "metadata", None) or {}  # RecordBatchFileReader.metadata: 21+
        raw = footer.get(FOOTER_KEY)
    if raw is None:
        raise CorruptRecordError(f"the object holds no {FOOTER_KEY.decode()} directory")
    return {int(p): entry for p, entry in json.loads(raw).items()}


@dataclass(frozen=True)
class Segment:
    """A partition's byte range inside one object, as a log commit records it.

    ``base_offset`` is -1 while the segment is staged (written, not committed).
    ``offset_span`` is how many offsets the segment covers; it equals
    ``record_count`` except after compaction, which leaves gaps.
    """

    object_key: str
    byte_start: int
    byte_end: int
    batch_count: int
    record_count: int
    offset_span: int
    min_timestamp_ms: int
    max_timestamp_ms: int
    checksum: int
    created_ms: int
    base_offset: int = -1
    has_offsets: bool = False
    schema_id: str = ""

    @property
    def size_bytes(self) -> int:
        return self.byte_end - self.byte_start

    @property
    def end_offset(self) -> int:
        """One past the last offset the segment covers."""
        return self.base_offset + self.offset_span

    def at(self, base_offset: int) -> Segment:
        return replace(self, base_offset=base_offset)

    def to_json(self) -> dict[str, Any]:
        # the fields are flat scalars: a shallow copy is asdict() without its deep walk
        return dict(self.__dict__)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Segment:
        return cls(**data)


SEGMENT_ARROW_SCHEMA = pa.schema(
    [
        ("object_key", pa.string()),
        ("byte_start", pa.int64()),
        ("byte_end", pa.int64()),
        ("batch_count", pa.int64()),
        ("record_count", pa.int64()),
        ("offset_span", pa.int64()),
        ("min_timestamp_ms", pa.int64()),
        ("max_timestamp_ms", pa.int64()),
        ("checksum", pa.int64()),
        ("created_ms", pa.int64()),
        ("base_offset", pa.int64()),
        ("has_offsets", pa.bool_()),
        ("schema_id", pa.string()),
    ]
)


def segments_to_table(segments: Sequence[Segment]) -> pa.Table:
    columns = {name: [getattr(s, name) for s in segments] for name in SEGMENT_ARROW_SCHEMA.names}
    return pa.table(columns, schema=SEGMENT_ARROW_SCHEMA)


def segments_from_table(table: pa.Table) -> list[Segment]:
    """Column by column (a third of ``to_pylist``'s per-row dicts: an executor plans
    every segment of its range again, thousands for a log of small flushes)."""
    names = table.schema.names
    columns = [table.column(name).to_pylist() for name in names]
    return [Segment(**dict(zip(names, row, strict=True))) for row in zip(*columns, strict=True)]


def _check_compression(compression: str) -> str | None:
    if compression not in COMPRESSIONS:
        raise InvalidConfigurationError(
            f"compression {compression!r} is not supported; accepted: {', '.join(COMPRESSIONS)}"
        )
    return None if compression == "none" else compression


def object_key_for(created_ms: int) -> str:
    day = dt.datetime.fromtimestamp(created_ms / 1000, tz=dt.UTC).strftime("%Y%m%d")
    return f"objects/{day}/{uuid.uuid4().hex}.arrow"


@dataclass(frozen=True)
class Section:
    """One topic's share of an object: its partitions' batches and how to write them."""

    parts: Mapping[int, Sequence[pa.RecordBatch]]
    schema: pa.Schema
    compression: str = "none"
    schema_id: str = ""
    has_offsets: bool = False


def write_object(
    store: ObjectStore,
    parts: Mapping[int, Sequence[pa.RecordBatch]],
    schema: pa.Schema,
    *,
    compression: str = "none",
    schema_id: str = "",
    has_offsets: bool = False,
) -> dict[int, Segment]:
    """Upload one object holding every partition's batches; return staged segments.

    ``store`` is rooted at the topic's id directory.  The object is written
    create-only under a fresh UUID; nothing is visible to readers until the
    segments are committed to partition logs.
    """
    created = now_ms()
    key = object_key_for(created)
    section = Section(parts, schema, compression, schema_id, has_offsets)
    return write_sections(store, key, [section], created_ms=created)[0]


def write_sections(
    store: ObjectStore,
    key: str,
    sections: Sequence[Section],
    *,
    created_ms: int,
    segment_key: str | None = None,
    trailer: Callable[[list[tuple[int, int]]], bytes] | None = None,
) -> list[dict[int, Segment]]:
    """Upload one object of consecutive sections; each section's staged segments.

    Each section is a whole Arrow IPC file (its schema's metadata holds its
    partition directory), so an object of one section is format 2's topic
    object, and a segment's byte range is IPC messages read with its topic's
    schema wherever the section starts.  ``trailer`` (bytes after the last
    section, outside every segment, made from each section's byte span) is how
    an object shared by several topics names them.  Segments record
    ``segment_key`` (default ``key``) as their object.
    """
    codecs = [_check_compression(section.compression) for section in sections]
    plans = [_plan_section(section) for section in sections]
    spans: list[dict[int, tuple[int, int, int, int, int]]] = [{} for _ in sections]
    bounds = [
        timestamp_bounds(section.parts, order)
        for section, (order, _) in zip(sections, plans, strict=True)
    ]

    def serialize(target: Writable) -> None:
        hashing = _HashingWriter(target)
        try:
            # Arrow writes an IPC message as many small chunks (about 20 for a small
            # batch); buffered natively and handed over once per partition, a
            # flush of 1,024 small partitions makes 1,024 Python writes, not 20,000.
            sink = pa.BufferedOutputStream(
                pa.PythonFile(hashing, mode="w"), buffer_size=_SMALL_CHUNK_BYTES
            )
            section_spans: list[tuple[int, int]] = []
            for i, section in enumerate(sections):
                order, footer = plans[i]
                # the directory goes in the schema's metadata: pyarrow < 21 cannot write
                # footer metadata
                directory = {FOOTER_KEY: json.dumps(footer).encode()}
                schema = section.schema
                file_schema = schema.with_metadata({**(schema.metadata or {}), **directory})
                if hashing.position % 8:  # a section starts 8-aligned, as a file does
                    sink.write(bytes(8 - hashing.position % 8))
                    sink.flush()
                section_start = hashing.position
                # magic + schema message precede batch one
                position = hashing.position + 8 + file_schema.serialize().size
                options = pa.ipc.IpcWriteOptions(compression=codecs[i])
                writer = pa.ipc.new_file(sink, file_schema, options=options)
                for p in order:
                    start = position
                    hashing.begin(start)
                    for batch in section.parts[p]:
                        if batch.num_rows:
                            writer.write_batch(batch)
                    sink.flush()
                    position = hashing.position
                    hashing.end()
                    if not hashing.message_at_start:
                        raise CorruptRecordError(
                            f"object {key!r} was laid out unexpectedly (no message at byte {start})"
                        )
                    ts_min, ts_max = bounds[i][p]
                    spans[i][p] = (start, position, footer[str(p)]["rows"], ts_min, ts_max)
                writer.close()
                sink.flush()
                section_spans.append((section_start, hashing.position))
            if trailer is not None:
                sink.write(trailer(section_spans))
            sink.flush()
        finally:
            checksums.extend(hashing.finish())

    checksums: list[int] = []
    store.create_streamed(key, serialize)
    out: list[dict[int, Segment]] = []
    hashes = iter(checksums)
    for i, section in enumerate(sections):
        order, footer = plans[i]
        segments = {}
        for p in order:
            start, end, rows, ts_lo, ts_hi = spans[i][p]
            segments[p] = Segment(
                object_key=segment_key or key,
                byte_start=start,
                byte_end=end,
                batch_count=footer[str(p)]["batch_count"],
                record_count=rows,
                offset_span=_offset_span(section.parts[p]) if section.has_offsets else rows,
                min_timestamp_ms=ts_lo,
                max_timestamp_ms=ts_hi,
                checksum=next(hashes),
                created_ms=created_ms,
                has_offsets=section.has_offsets,
                schema_id=section.schema_id,
            )
        out.append(segments)
    return out


def _plan_section(section: Section) -> tuple[list[int], dict[str, dict[str, int]]]:
    """The partitions written (those with rows, in order) and the section's directory."""
    parts = section.parts
    order = sorted(p for p, batches in parts.items() if any(b.num_rows for b in batches))
    footer: dict[str, dict[str, int]] = {}
    first = 0
    for p in order:
        n = sum(1 for b in parts[p] if b.num_rows)
        rows = sum(b.num_rows for b in parts[p])
        footer[str(p)] = {"first_batch": first, "batch_count": n, "rows": rows}
        first += n
    return order, footer


class _HashingWriter:
    """Passes an object's bytes on to ``target`` and checksums byte ranges of them.

    Each segment's checksum is computed from the bytes as they are written, so
    writing an object never reads it back, and on the background pool
    (:class:`_RangeHashes`), beside the writer's own writes: xxhash and file
    writes both release the GIL.  ``begin(start)`` starts the next range at
    byte ``start`` and ``end()`` ends it; bytes outside ranges (the file's
    header and footer) are not hashed.  ``message_at_start`` says an IPC
    message began exactly at the range's start (the layout check: a wrong
    ``start`` would checksum the wrong bytes).
    """

    def __init__(self, target: Writable) -> None:
        self.target = target
        self.position = 0
        self.closed = False
        self.message_at_start = False
        self._start: int | None = None  # the current range's first byte; None between ranges
        self._small = bytearray()  # small chunks, written together before the next large one
        self._hashes = _RangeHashes()

    def begin(self, start: int) -> None:
        self._hashes.begin()
        self._start = start
        self.message_at_start = False

    def end(self) -> None:
        self._start = None

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        at, size = self.position, len(view)
        start = self._start
        if start is not None and at + size > start:
            skip = max(start - at, 0)
            if at <= start and view[skip : skip + 4] == _CONTINUATION:
                self.message_at_start = True
            self._hashes.add(view[skip:] if skip else view)
        self.position = at + size
        if size < _SMALL_CHUNK_BYTES:
            self._small += view
            return size
        self.flush()
        self._write_all(view)
        return size

    def _write_all(self, view: memoryview) -> None:
        while view:
            written = self.target.write(view)
            view = view[written:] if written is not None else view[:0]

    def finish(self) -> list[int]:
        """Write what is gathered; the checksum of every range begun, in order."""
        try:
            self.flush()
        finally:
            checksums = self._hashes.finish()
        return checksums

    def tell(self) -> int:
        return self.position

    def flush(self) -> None:
        if self._small:
            self._write_all(memoryview(self._small))
            self._small = bytearray()

    def close(self) -> None:
        self.flush()
        self.closed = True

    def writable(self) -> bool:
        return True


class _RangeHashes:
    """xxh3-64 checksums of consecutive byte ranges, computed in order on the background pool.

    The writer hands over views of the bytes it writes (they stay alive while
    referenced) and never waits until :meth:`finish`.  Small pieces are gathered,
    with the places where ranges begin among them, and handed over together: the
    hashing thread wakes about once per large chunk, not once per range (a flush
    of 1,024 small partitions has 1,024 ranges of a few hundred bytes).
    """

    def __init__(self) -> None:
        self._queue: SimpleQueue[_Piece | None] = SimpleQueue()
        self._gathered = bytearray()
        self._starts: list[int] = []  # where ranges begin in ``_gathered``
        self._done: Future[list[int]] | None = None

    def begin(self) -> None:
        self._starts.append(len(self._gathered))
        self._start_hashing()

    def add(self, data: memoryview) -> None:
        if len(data) < _SMALL_CHUNK_BYTES:
            self._gathered += data
            if len(self._gathered) >= _SMALL_CHUNK_BYTES:
                self._hand_over()
            return
        self._hand_over()
        self._queue.put((data, ()))

    def finish(self) -> list[int]:
        """Every range's checksum (computed here if the pool never started on them)."""
        self._hand_over()
        self._queue.put(None)
        if self._done is None:
            return []
        return outcome(self._done, lambda: _hash_ranges(self._queue))

    def _hand_over(self) -> None:
        if self._gathered or self._starts:
            self._queue.put((bytes(self._gathered), tuple(self._starts)))
            self._gathered.clear()
            self._starts = []

    def _start_hashing(self) -> None:
        if self._done is None:
            self._done = background_pool().submit(_hash_ranges, self._queue)


#: bytes handed to the hashing thread, and where in them new ranges begin
_Piece = tuple[memoryview | bytes, tuple[int, ...]]


def _hash_ranges(queue: SimpleQueue[_Piece | None]) -> list[int]:
    checksums: list[int] = []
    current = None
    while (item := queue.get()) is not None:
        data, starts = item
        at = 0
        for start in starts:
            if current is not None:
                if start > at:
                    current.update(data[at:start])
                checksums.append(_signed(current.intdigest()))
            current = xxhash.xxh3_64()
            at = start
        if current is not None and len(data) > at:
            current.update(data[at:] if at else data)
    if current is not None:
        checksums.append(_signed(current.intdigest()))
    return checksums


_CONTINUATION = b"\xff\xff\xff\xff"
#: chunks smaller than this (IPC metadata, padding, small buffers) are gathered and
#: written together: an IPC file of one batch arrives as about 30 chunks, most tiny
_SMALL_CHUNK_BYTES = 64 * 1024


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def checksum_of(data: pa.Buffer) -> int:
    """xxh3-64 of the bytes, as a signed 64-bit integer (fits Arrow's int64)."""
    return _signed(xxhash.xxh3_64_intdigest(memoryview(data)))


def timestamp_bounds(
    parts: Mapping[int, Sequence[pa.RecordBatch]], order: Sequence[int]
) -> dict[int, tuple[int, int]]:
    """Each partition's (min, max) record timestamp in ms, 0 where all are null.

    One pass over every partition's timestamps together (numpy's ``reduceat``
    over their concatenation): a flush of 1,024 small partitions made 1,024
    ``min_max`` calls, about a sixth of its CPU.
    """
    columns = []
    starts = []
    rows = 0
    for p in order:
        starts.append(rows)
        for batch in parts[p]:
            if batch.num_rows:
                columns.append(batch.column("timestamp"))
                rows += batch.num_rows
    if not columns:
        return {}
    stamps = pa.concat_arrays(columns) if len(columns) > 1 else columns[0]
    low = high = stamps
    if stamps.null_count:
        import pyarrow.compute as pc

        low = pc.fill_null(stamps, pa.scalar(_NO_LOW, stamps.type))
        high = pc.fill_null(stamps, pa.scalar(_NO_HIGH, stamps.type))
    lows = np.minimum.reduceat(int64_values(low), starts)
    highs = np.maximum.reduceat(int64_values(high), starts)
    return {
        p: (0 if lo == _NO_LOW else int(lo), 0 if hi == _NO_HIGH else int(hi))
        for p, lo, hi in zip(order, lows.tolist(), highs.tolist(), strict=True)
    }


_NO_LOW = np.iinfo(np.int64).max  # a null timestamp, for min
_NO_HIGH = np.iinfo(np.int64).min  # a null timestamp, for max


def _offset_span(batches: Sequence[pa.RecordBatch]) -> int:
    first = batches[0].column("offset")[0].as_py()
    last = batches[-1].column("offset")[-1].as_py()
    return int(last) - int(first) + 1


def read_segment(
    store: ObjectStore, segment: Segment, schema: pa.Schema, verify: bool = True
) -> list[pa.RecordBatch]:
    """The segment's record batches, checksum verified; offsets not yet added."""
    store, key = store.locate(segment.object_key)
    try:
        data = store.get_range(key, segment.byte_start, segment.byte_end)
    except FileNotFoundError as exc:
        raise CorruptRecordError(
            f"object {store.url}/{segment.object_key} referenced by a committed segment is missing"
        ) from exc
    if data.size != segment.size_bytes:
        raise CorruptRecordError(
            f"object {store.url}/{segment.object_key} is truncated: read {data.size} of "
            f"{segment.size_bytes} bytes at {segment.byte_start}"
        )
    if verify and checksum_of(data) != segment.checksum:
        raise CorruptRecordError(
            f"object {store.url}/{segment.object_key} bytes {segment.byte_start}-"
            f"{segment.byte_end} fail their checksum"
        )
    if segment.has_offsets:
        schema = pa.schema([OFFSET_FIELD, *schema])
    stream = pa.BufferReader(data)
    out = []
    try:
        for _ in range(segment.batch_count):
            message = pa.ipc.read_message(stream)
            out.append(pa.ipc.read_record_batch(message, schema))
    except (pa.ArrowInvalid, OSError) as exc:
        raise CorruptRecordError(
            f"object {store.url}/{segment.object_key} cannot be decoded: {exc}"
        ) from exc
    return out
