"""Each topic's entry of a Kafka Metadata answer, kept encoded (issue 37 item 6).

Apart from the handler (:mod:`~sparklog.broker_lite.kafka.metadata`) because the
listener holds one :class:`TopicEntries` and the handlers' context names it: this module
imports no handler module, so the context may name it without a loop.
"""

from __future__ import annotations

import dataclasses
import io
import threading
import uuid
from collections.abc import Callable, Collection, Mapping
from functools import cache
from typing import IO, Any, cast

from kio.serial import entity_writer
from kio.serial.writers import (
    Writable,
    compact_array_writer,
    legacy_array_writer,
    write_compact_array_length,
    write_legacy_array_length,
)
from kio.static.primitive import i32

from sparklog.broker_lite.kafka.messages import make, nested

#: the name of the probe topic :meth:`TopicEntries.write` finds the topics array by (no
#: topic can have it: Kafka's names are letters, digits, '.', '_' and '-')
PROBE_NAME = "\x00sparklog metadata answer's topics array\x00"


class TopicEntries:
    """Each topic's entry of the Metadata answer, built once and encoded once by kio.

    An entry depends only on the answer's version (its kio class), the topic's document
    (in the metadata image, replaced whenever the topic changes: id, partitions, shards,
    replication factor), its leaders and replicas (what
    :meth:`Cluster.leadership_inputs` names besides the document) and which brokers
    have a Kafka listener; kept with those, it is rebuilt when any of them changes and
    never otherwise.  Its bytes are kio's encoding of it, so an answer whose topics are
    kept entries is written as kio would write it (:meth:`write`), without walking them
    again.  A kept entry is found by comparing what it was built from by identity,
    allocating nothing per topic (at 5,000 topics, a key tuple per topic and request
    cost more in garbage collection than it saved).  An all-topics answer for a request
    without ACL checks is the same while the image's topic documents and the view are
    (:meth:`whole`): its topics and their bytes are kept whole too.  One per listener;
    request threads share it (a race builds an entry twice, never keeps a wrong one: an
    entry is kept only if what it is built from held while it was built).
    ``undocumented``: topics with no document whose entries follow the view alone (the
    internal ``__consumer_offsets``).
    """

    def __init__(self, undocumented: Collection[str] = ()) -> None:
        self.undocumented = frozenset(undocumented)
        self._lock = threading.Lock()
        #: answer class -> topic name -> the kept entry
        self._entries: dict[type, dict[str, _Kept]] = {}
        #: id of a kept entry -> (the entry, kio's bytes of it)
        self._encoded: dict[int, tuple[Any, bytes]] = {}
        #: the last request's view (reused while equal, so kept entries compare by identity)
        self._view: tuple[object, ...] = ()
        #: answer class -> (the image's topic documents, view, every topic's entry) of the
        #: last whole answer
        self._whole: dict[type, tuple[object, object, tuple[Any, ...]]] = {}
        #: answer class -> (a whole answer's topics, the bytes of its topics array's items)
        self._whole_bytes: dict[type, tuple[tuple[Any, ...], bytes]] = {}

    def view(self, parts: tuple[object, ...] | None) -> tuple[object, ...] | None:
        """``parts`` (what every topic's entry is built from besides its document: the
        leadership inputs and the brokers with a Kafka listener; None before the broker
        started: nothing is kept), as the same object while it is equal."""
        if parts is None:
            return None
        with self._lock:
            if parts == self._view:
                return self._view
            self._view = parts
        return parts

    def whole(self, cls: type, docs: object, view: object) -> tuple[Any, ...] | None:
        """Every topic's entry (the internal topic's last) of the last all-topics answer of
        class ``cls``, if it was made from ``docs`` (the image's map of topic documents,
        replaced whenever a topic changes) and ``view``."""
        kept = self._whole.get(cls)
        if kept is None or kept[0] is not docs or kept[1] is not view:
            return None
        return kept[2]

    def keep_whole(self, cls: type, docs: object, view: object, topics: tuple[Any, ...]) -> None:
        """Keep an all-topics answer's ``topics``, made from ``docs`` and ``view``."""
        with self._lock:
            self._whole[cls] = (docs, view, topics)

    def find(
        self, cls: type, docs: Mapping[str, Any], view: object, names: list[str]
    ) -> tuple[dict[str, Any], dict[str, _Inputs]]:
        """({name: kept entry} of ``names`` whose entries hold, {name: what it is built
        from} of the others that may be kept once built); a topic not in the image now,
        or any topic when ``view`` is None, is in neither: it is built each time."""
        if view is None:
            return {}, {}
        kept = self._entries.get(cls, {})
        hits: dict[str, Any] = {}
        misses: dict[str, _Inputs] = {}
        # ``docs``: the image's topic documents, each replaced when its topic changes,
        # never edited (what LogRoot.describe_topic keeps its descriptions by)
        for name in names:
            if name in self.undocumented:  # its leaders follow the Kafka brokers alone
                doc = None
            else:
                doc = docs.get(name)
                if doc is None:  # (deleted since it was listed: built, with its error)
                    continue
            entry = kept.get(name)
            if entry is not None and entry.doc is doc and entry.view is view:
                hits[name] = entry.entry
            else:
                misses[name] = (doc, view)
        return hits, misses

    def keep(self, cls: type, name: str, inputs: _Inputs, entry: Any, after: _Inputs) -> None:
        """Keep ``entry``, built from ``inputs``, with its bytes, unless they changed while
        it was built (``after``, taken after: the entry may mix both)."""
        if inputs[0] is not after[0] or inputs[1] is not after[1]:
            return
        data = _encoded(entity_writer(type(entry)), entry)
        with self._lock:
            entries = self._entries.setdefault(cls, {})
            old = entries.get(name)
            if old is not None:
                self._encoded.pop(id(old.entry), None)
            entries[name] = _Kept(*inputs, entry)
            self._encoded[id(entry)] = (entry, data)

    def is_kept(self, entry: Any) -> bool:
        """Whether ``entry`` is a kept entry (not one built for one answer)."""
        held = self._encoded.get(id(entry))
        return held is not None and held[0] is entry

    def forget_others(self, cls: type, names: set[str]) -> None:
        """Drop the entries of ``cls``'s answers whose topics are not in ``names`` (all the
        topics there are: those deleted go), when there are more entries than names."""
        entries = self._entries.get(cls, {})
        if len(entries) <= len(names) + 1:  # (+1: the internal topic)
            return
        with self._lock:
            for name in [n for n in entries if n not in names and n not in self.undocumented]:
                self._encoded.pop(id(entries.pop(name).entry), None)

    def write(self, out: IO[bytes], response: Any) -> None:
        """``response`` (a Metadata answer of any version) as kio's writer of its class
        writes it: what precedes and follows the topics array is cut from kio's encoding
        of the answer with one probe topic in the array (checked against kio's array
        writer for the version), the array's count is written by kio's writer of array
        lengths, and each entry is its kept bytes, or kio's encoding of it if not kept."""
        cls = type(response)
        topic_cls = nested(cls, "MetadataResponseTopic")
        probe = _probe(topic_cls)
        probe_bytes = _encoded(entity_writer(topic_cls), probe)
        array_writer = compact_array_writer if cls.__flexible__ else legacy_array_writer
        whole = _encoded(entity_writer(cls), dataclasses.replace(response, topics=(probe,)))
        array = _encoded(array_writer(entity_writer(topic_cls)), (probe,))
        start = whole.find(probe_bytes) - (len(array) - len(probe_bytes))
        if whole.count(probe_bytes) != 1 or whole[start : start + len(array)] != array:
            raise AssertionError(f"{cls.__name__}: its topics array is not where kio put it")
        out.write(whole[:start])
        # the array as kio's array writer writes it: the count by kio's writer of array
        # lengths for the version (as above), then each entry, kept bytes or kio's
        count = write_compact_array_length if cls.__flexible__ else write_legacy_array_length
        count(out, i32(len(response.topics)))
        out.write(self._items(cls, response.topics))
        out.write(whole[start + len(array) :])

    def _items(self, cls: type, topics: tuple[Any, ...]) -> bytes:
        """The bytes of ``topics``' entries, one after the other."""
        joined = self._whole_bytes.get(cls)
        if joined is not None and joined[0] is topics:
            return joined[1]
        encode: Callable[[Writable, Any], None] = entity_writer(
            nested(cls, "MetadataResponseTopic")
        )
        encoded = self._encoded
        pieces = []
        for topic in topics:
            held = encoded.get(id(topic))
            if held is not None and held[0] is topic:
                pieces.append(held[1])
            else:  # built for this answer alone (an error, a denied topic)
                pieces.append(_encoded(encode, topic))
        data = b"".join(pieces)
        whole = self._whole.get(cls)
        if whole is not None and whole[2] is topics:
            with self._lock:
                self._whole_bytes[cls] = (topics, data)
        return data


#: what a topic's entry is built from: its document in the metadata image (None: the
#: internal topic) and the request's view (leadership inputs, brokers with a Kafka
#: listener: :meth:`TopicEntries.view`)
_Inputs = tuple[Any, object]


@dataclasses.dataclass(frozen=True, slots=True)
class _Kept:
    """A kept entry and what it was built from (:data:`_Inputs`)."""

    doc: Any
    view: object
    entry: Any


@cache
def _probe(topic_cls: type) -> Any:
    return make(
        topic_cls,
        error_code=0,
        name=PROBE_NAME,
        topic_id=uuid.UUID(int=0),
        is_internal=False,
        partitions=(),
    )


def _encoded(writer: Callable[[Writable, Any], None], value: Any) -> bytes:
    buffer = io.BytesIO()
    writer(cast(IO[bytes], buffer), value)
    return buffer.getvalue()
