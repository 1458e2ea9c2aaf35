"""Decoding PostgreSQL's ``pgoutput`` logical replication messages (protocol version 1).

The connector reads the slot with ``pg_logical_slot_peek_binary_changes``: one row
per message, each a ``bytea`` in the layout of PostgreSQL's "Logical Replication
Message Formats" (Begin, Commit, Relation, Insert, Update, Delete, Truncate, Type,
Origin). Column values arrive in text form (the slot is read without the
``binary`` option), converted by :mod:`sparklog.connect.pg_types`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from sparklog.errors import ConnectorError

#: microseconds from the Unix epoch to PostgreSQL's epoch (2000-01-01)
PG_EPOCH_US = 946_684_800_000_000
#: a column value that did not change and was not sent (TOASTed), as Debezium marks it
UNCHANGED_TOAST = "__debezium_unavailable_value"


@dataclass(frozen=True)
class Column:
    name: str
    type_oid: int
    typmod: int
    key: bool


@dataclass(frozen=True)
class Relation:
    oid: int
    schema: str
    table: str
    replica_identity: str
    columns: tuple[Column, ...]


@dataclass(frozen=True)
class Begin:
    final_lsn: int
    commit_ts_us: int  # Unix epoch microseconds
    xid: int


@dataclass(frozen=True)
class Commit:
    commit_lsn: int
    end_lsn: int
    commit_ts_us: int


@dataclass(frozen=True)
class Change:
    """An Insert (``c``), Update (``u``) or Delete (``d``) of one row (text values)."""

    op: str
    relation_oid: int
    old: tuple[str | None, ...] | None
    new: tuple[str | None, ...] | None
    old_is_key: bool = False


@dataclass(frozen=True)
class Truncate:
    relation_oids: tuple[int, ...]


@dataclass(frozen=True)
class Other:
    kind: str


Message = Begin | Commit | Relation | Change | Truncate | Other


@dataclass
class _Reader:
    data: bytes
    at: int = 0
    _struct: dict[str, struct.Struct] = field(default_factory=dict)

    def unpack(self, fmt: str) -> tuple[int, ...]:
        s = self._struct.get(fmt) or self._struct.setdefault(fmt, struct.Struct("!" + fmt))
        out = s.unpack_from(self.data, self.at)
        self.at += s.size
        return out

    def byte(self) -> str:
        self.at += 1
        return chr(self.data[self.at - 1])

    def string(self) -> str:
        end = self.data.index(b"\0", self.at)
        out = self.data[self.at : end].decode()
        self.at = end + 1
        return out

    def tuple_data(self) -> tuple[str | None, ...]:
        (count,) = self.unpack("h")
        values: list[str | None] = []
        for _ in range(count):
            kind = self.byte()
            if kind == "n":
                values.append(None)
            elif kind == "u":
                values.append(UNCHANGED_TOAST)
            elif kind == "t":
                (size,) = self.unpack("i")
                values.append(self.data[self.at : self.at + size].decode())
                self.at += size
            else:  # 'b' (binary) is only sent when asked for, which the connector does not
                raise ConnectorError(f"pgoutput: unexpected tuple column kind {kind!r}")
        return tuple(values)


def decode(data: bytes) -> Message:
    """One pgoutput message."""
    r = _Reader(bytes(data))
    kind = r.byte()
    if kind == "B":
        lsn, ts, xid = r.unpack("qqI")
        return Begin(lsn, ts + PG_EPOCH_US, xid)
    if kind == "C":
        (_flags,) = r.unpack("b")
        commit_lsn, end_lsn, ts = r.unpack("qqq")
        return Commit(commit_lsn, end_lsn, ts + PG_EPOCH_US)
    if kind == "R":
        (oid,) = r.unpack("I")
        schema, table = r.string(), r.string()
        identity = r.byte()
        (count,) = r.unpack("h")
        columns = []
        for _ in range(count):
            (flags,) = r.unpack("b")
            name = r.string()
            type_oid, typmod = r.unpack("Ii")
            columns.append(Column(name, type_oid, typmod, bool(flags & 1)))
        return Relation(oid, schema, table, identity, tuple(columns))
    if kind == "I":
        (oid,) = r.unpack("I")
        r.byte()  # 'N'
        return Change("c", oid, None, r.tuple_data())
    if kind == "U":
        (oid,) = r.unpack("I")
        old = None
        is_key = False
        marker = r.byte()
        if marker in "KO":
            is_key = marker == "K"
            old = r.tuple_data()
            marker = r.byte()
        return Change("u", oid, old, r.tuple_data(), is_key)
    if kind == "D":
        (oid,) = r.unpack("I")
        marker = r.byte()
        return Change("d", oid, r.tuple_data(), None, marker == "K")
    if kind == "T":
        (count,) = r.unpack("i")
        r.unpack("b")
        return Truncate(tuple(r.unpack("I" * count)) if count else ())
    return Other(kind)


def lsn_to_int(text: str) -> int:
    """``'16/B374D848'`` -> 97500059720 (PostgreSQL's pg_lsn as a number)."""
    high, _, low = text.partition("/")
    return (int(high, 16) << 32) | int(low, 16)


def int_to_lsn(value: int) -> str:
    return f"{value >> 32:X}/{value & 0xFFFFFFFF:X}"
