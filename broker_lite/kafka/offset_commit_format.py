"""Kafka's ``__consumer_offsets`` record format: OffsetCommitKey and OffsetCommitValue.

Defined once here, as Kafka's own schemas define them (``OffsetCommitKey.json``,
``OffsetCommitValue.json`` in Kafka's group coordinator): big-endian, strings as
an int16 length and UTF-8 bytes, a leading int16 version in key and value.

* key version 1: group, topic, partition (versions 0 and 1 are the same layout;
  Kafka writes 1);
* value version 1: offset, metadata, commit timestamp, expire timestamp (-1:
  none).  Version 1 is what every reader of the topic decodes, Burrow 1.2
  included (it knows 0 and 1; version 3 adds the leader epoch and came later).

The group metadata records (key version 2) are not written: they describe
members, which live in the coordinator's memory, and lag monitors need only the
offset commits (Burrow reads them for its owner column only).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

KEY_VERSION = 1
VALUE_VERSION = 1
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")


def _string(text: str) -> bytes:
    raw = text.encode("utf-8")
    return _INT16.pack(len(raw)) + raw


@dataclass(frozen=True)
class OffsetCommit:
    """One committed offset as ``__consumer_offsets`` carries it."""

    group: str
    topic: str
    partition: int
    offset: int
    metadata: str
    commit_ms: int

    def key(self) -> bytes:
        """OffsetCommitKey version 1."""
        return (
            _INT16.pack(KEY_VERSION)
            + _string(self.group)
            + _string(self.topic)
            + _INT32.pack(self.partition)
        )

    def value(self) -> bytes:
        """OffsetCommitValue version 1 (no expiry: -1)."""
        return (
            _INT16.pack(VALUE_VERSION)
            + _INT64.pack(self.offset)
            + _string(self.metadata)
            + _INT64.pack(self.commit_ms)
            + _INT64.pack(-1)
        )
