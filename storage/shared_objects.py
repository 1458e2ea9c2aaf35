"""Objects shared by several topics: one per broker flush, and their garbage collection.

A broker flush that holds records of several topics writes ONE object for all
of them (issue 37: the object-store bill grows with a broker's flushes, not
with its active topics), under the root's ``objects/<day>/<uuid>.arrow``.  It
is a run of *sections*, one per topic, each a whole Arrow IPC file as a
topic's own object is (:func:`sparklog.storage.segments.write_sections`), then
a trailer naming the sections::

    <section 1> ... <section n> <trailer JSON> <u32 little-endian length> SLSHARED

The trailer (``{"sections": [{"topic", "id", "shards", "start", "end"}],
"created_ms"}``) is what lets a collector decide an object's fate from the
shard logs it names, without listing any topic.  A segment in a shared object
records the object's key with a leading ``/`` (relative to the root, see
:meth:`sparklog.storage.objectstore.ObjectStore.locate`); its byte range is
inside its topic's section, so readers, the fetch path and compaction read it
as any other segment.

Garbage: a topic's own objects are swept by its GC (:mod:`maintenance`); a
shared object is referenced from several topics' logs, so one collector
(:func:`collect_shared_garbage`, run by one broker per cleaner pass) marks an
object no named shard's live segments reference and deletes it after the
grace period, as the topic GC does.
"""

from __future__ import annotations

import json
import struct
from collections.abc import MutableMapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from sparklog.clock import now_ms
from sparklog.errors import CorruptRecordError, InvalidConfigurationError, SparklogError
from sparklog.storage.documents import encode_document
from sparklog.storage.segments import Section, Segment, object_key_for, write_sections

if TYPE_CHECKING:
    from sparklog.storage.catalog import LogRoot
    from sparklog.storage.objectstore import ObjectStore
    from sparklog.storage.topics import Topic

#: the last bytes of a shared object
TRAILER_MAGIC = b"SLSHARED"
_LENGTH = struct.Struct("<I")
#: a trailer is read with one suffix GET of this many bytes (a longer one takes a second)
TRAILER_READ_BYTES = 64 * 1024
#: where the shared-object collector keeps its marks (below the root)
SHARED_MARKS_KEY = "cluster/gc/shared-marks.json"
SHARED_OBJECTS_PREFIX = "objects"


@dataclass(frozen=True)
class SharedSection:
    """One topic's section of a shared object, as its trailer names it."""

    topic: str
    topic_id: str
    shards: tuple[int, ...]
    #: the section's byte span in the object (a whole Arrow IPC file)
    start: int = 0
    end: int = 0


def write_shared_object(
    root_store: ObjectStore,
    sections: Sequence[tuple[Topic, Section]],
) -> list[dict[int, Segment]]:
    """Upload one object for several topics' sections; each section's staged segments.

    The segments name the object as ``/objects/...`` (below the root), so each
    topic's log can commit them as it commits its own objects' segments.
    """
    created = now_ms()
    key = object_key_for(created)
    named = [
        SharedSection(
            topic.name,
            topic.info.topic_id,
            tuple(sorted({p % topic.shards for p in section.parts})),
        )
        for topic, section in sections
    ]
    return write_sections(
        root_store,
        key,
        [section for _, section in sections],
        created_ms=created,
        segment_key=f"/{key}",
        trailer=lambda spans: encode_trailer(
            [replace(s, start=a, end=b) for s, (a, b) in zip(named, spans, strict=True)],
            created,
        ),
    )


def encode_trailer(sections: Sequence[SharedSection], created_ms: int) -> bytes:
    body = json.dumps(
        {
            "created_ms": created_ms,
            "sections": [
                {
                    "topic": s.topic,
                    "id": s.topic_id,
                    "shards": list(s.shards),
                    "start": s.start,
                    "end": s.end,
                }
                for s in sections
            ],
        },
        separators=(",", ":"),
    ).encode()
    return body + _LENGTH.pack(len(body)) + TRAILER_MAGIC


def read_trailer(store: ObjectStore, key: str) -> list[SharedSection] | None:
    """The sections a shared object names (one suffix GET); None if it is gone."""
    got = store.get_tail(key, TRAILER_READ_BYTES)
    if got is None:
        return None
    tail, size = got
    where = f"{store.url}/{key}"
    fixed = _LENGTH.size + len(TRAILER_MAGIC)
    if len(tail) < fixed or not tail.endswith(TRAILER_MAGIC):
        raise CorruptRecordError(f"shared object {where} has no sparklog trailer")
    (length,) = _LENGTH.unpack(tail[-fixed : -len(TRAILER_MAGIC)])
    if length + fixed > size:
        raise CorruptRecordError(f"shared object {where}: its trailer is longer than the object")
    if length + fixed <= len(tail):
        body = tail[len(tail) - fixed - length : len(tail) - fixed]
    else:  # a trailer longer than the first read: one more ranged GET
        body = store.get_range(key, size - fixed - length, size - fixed).to_pybytes()
    try:
        doc = json.loads(body)
        return [
            SharedSection(
                s["topic"],
                s["id"],
                tuple(int(x) for x in s["shards"]),
                int(s["start"]),
                int(s["end"]),
            )
            for s in doc["sections"]
        ]
    except (ValueError, KeyError, TypeError) as exc:
        raise CorruptRecordError(f"shared object {where}: unreadable trailer: {exc}") from exc


def copy_segments_out(
    source: ObjectStore, dest: ObjectStore, segments: Sequence[Segment]
) -> list[Segment]:
    """Segments of shared objects, copied byte for byte into ONE new object of ``dest``
    (a topic's store); the same segments, naming it.

    Mirroring copies a topic's objects whole, but a shared object holds other
    topics' records too, which must not leave the source: only the segments'
    byte ranges are copied (each verified against its checksum; never decoded),
    each at an 8-aligned place as in the source, so they read as they did.
    """
    from sparklog.storage.segments import checksum_of

    pieces: list[bytes] = []
    placed: list[Segment] = []
    at = 0
    key = object_key_for(now_ms())
    for seg in segments:
        store, where = source.locate(seg.object_key)
        data = store.get_range(where, seg.byte_start, seg.byte_end)
        if data.size != seg.size_bytes or checksum_of(data) != seg.checksum:
            raise CorruptRecordError(
                f"object {store.url}/{where} bytes {seg.byte_start}-{seg.byte_end} fail "
                "their checksum; nothing copied"
            )
        pad = -at % 8
        if pad:
            pieces.append(bytes(pad))
            at += pad
        pieces.append(data.to_pybytes())
        placed.append(replace(seg, object_key=key, byte_start=at, byte_end=at + data.size))
        at += data.size
    if placed:
        dest.create(key, b"".join(pieces))
    return placed


@dataclass
class SharedGcReport:
    """What one pass of the shared-object collector did (or would do, in a dry run)."""

    deleted: list[str] = field(default_factory=list)
    marked: list[str] = field(default_factory=list)
    live_objects: int = 0
    unreadable: list[str] = field(default_factory=list)
    dry_run: bool = False


def collect_shared_garbage(
    root: LogRoot,
    grace_ms: int,
    *,
    now: int | None = None,
    dry_run: bool = False,
    trailers: MutableMapping[str, list[SharedSection]] | None = None,
) -> SharedGcReport:
    """Mark-and-sweep the root's shared objects, as :func:`maintenance.collect_garbage`
    does a topic's: an object none of its sections' shards references is marked,
    and deleted once unreferenced for ``grace_ms`` and itself older than that.

    ``trailers`` caches the sections each object names (objects never change), so a
    broker's later passes read no trailer twice.  A section whose topic was deleted
    (or re-created under another id) references nothing.
    """
    from sparklog.storage.log import STAGED_OBJECT_MAX_AGE_MS
    from sparklog.storage.maintenance import mark_or_sweep, read_gc_marks

    if grace_ms < STAGED_OBJECT_MAX_AGE_MS and grace_ms != 0:
        raise InvalidConfigurationError(
            f"gc grace {grace_ms} ms is shorter than the staged-object limit "
            f"{STAGED_OBJECT_MAX_AGE_MS} ms; accepted: 0 (tests only) or >= that limit"
        )
    now = now_ms() if now is None else now
    trailers = {} if trailers is None else trailers
    store = root.store
    marks = read_gc_marks(store, SHARED_MARKS_KEY)
    report = SharedGcReport(dry_run=dry_run)
    objects = [o for o in store.list_objects(SHARED_OBJECTS_PREFIX) if o.key.endswith(".arrow")]
    references = _References(root)
    new_marks: dict[str, int] = {}
    due: list[tuple[str, list[SharedSection]]] = []
    for obj in objects:
        sections = trailers.get(obj.key)
        if sections is None:
            try:
                sections = read_trailer(store, obj.key)
            except CorruptRecordError:
                report.unreadable.append(obj.key)  # never deleted: a person looks at it
                continue
            if sections is None:
                continue
            trailers[obj.key] = sections
        if references.any(f"/{obj.key}", sections):
            report.live_objects += 1
            continue
        verdict = mark_or_sweep(obj, marks, new_marks, now, grace_ms)
        if verdict == "marked":
            report.marked.append(obj.key)
        elif verdict == "due":
            due.append((obj.key, sections))
    if dry_run:
        report.deleted = [key for key, _ in due]
        return report
    # re-checked on fresh logs just before deleting: a writer may have committed meanwhile
    fresh = _References(root)
    for key, sections in due:
        if fresh.any(f"/{key}", sections):
            report.live_objects += 1
            continue
        store.delete(key)
        trailers.pop(key, None)
        report.deleted.append(key)
    store.put(SHARED_MARKS_KEY, encode_document(dict(new_marks)))
    return report


class _References:
    """The object keys each (topic id, shard) references, read once per pass."""

    def __init__(self, root: LogRoot) -> None:
        self._root = root
        self._topics: dict[str, Topic | None] = {}
        self._keys: dict[tuple[str, int], set[str]] = {}

    def any(self, key: str, sections: Sequence[SharedSection]) -> bool:
        return any(
            key in self._keys_of(s.topic, s.topic_id, shard) for s in sections for shard in s.shards
        )

    def _keys_of(self, name: str, topic_id: str, shard: int) -> set[str]:
        found = self._keys.get((topic_id, shard))
        if found is not None:
            return found
        topic = self._topic(name, topic_id)
        keys: set[str] = set()
        if topic is not None and shard < topic.shards:
            state = topic.shard(shard).refresh()
            for part in state.parts.values():
                keys.update(seg.object_key for seg in part.segments.all())
        self._keys[(topic_id, shard)] = keys
        return keys

    def _topic(self, name: str, topic_id: str) -> Topic | None:
        if topic_id not in self._topics:
            try:
                topic = self._root.topic(name)
            except SparklogError:
                topic = None  # deleted: its sections reference nothing
            self._topics[topic_id] = (
                topic if topic is not None and topic.info.topic_id == topic_id else None
            )
        return self._topics[topic_id]


__all__ = [
    "SHARED_MARKS_KEY",
    "SharedGcReport",
    "SharedSection",
    "collect_shared_garbage",
    "copy_segments_out",
    "read_trailer",
    "write_shared_object",
]
