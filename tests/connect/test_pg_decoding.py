"""PostgreSQL text values as Debezium's JSON values, and pgoutput's messages, without a server."""

from __future__ import annotations

import struct

import pytest

from sparklog.connect.pg_types import Converter, parse_array, parse_timestamp
from sparklog.connect.pgoutput import (
    Begin,
    Change,
    Commit,
    Relation,
    decode,
    int_to_lsn,
    lsn_to_int,
)
from sparklog.errors import ConnectorConfigError


def test_arrays_nested_quoted_and_null() -> None:
    assert parse_array("{1,NULL,3}") == ["1", None, "3"]
    assert parse_array('{"a b","x\\"y",NULL,"NULL"}') == ["a b", 'x"y', None, "NULL"]
    assert parse_array("{{1,2},{3,4}}") == [["1", "2"], ["3", "4"]]
    assert parse_array("[0:1]={5,6}") == ["5", "6"]
    assert parse_array("{}") == []


def test_scalars() -> None:
    c = Converter()
    assert c.value("-12.345", 1700, (10 << 16 | 3) + 4) == "z8c="  # -12345 at scale 3
    assert Converter("string").value("1.50", 1700, -1) == "1.50"
    assert Converter("double").value("1.50", 1700, -1) == 1.5
    assert c.value("NaN", 701) == "NaN"
    assert c.value("1970-01-02 00:00:00", 1114) == 86_400_000_000
    assert c.value("1969-12-31 23:59:59.999999", 1114) == -1
    assert c.value("2024-01-02 03:04:05.123+05:30", 1184) == "2024-01-01T21:34:05.123Z"
    assert c.value("infinity", 1114) == "infinity"
    assert c.value("{2024-01-01,NULL}", 1182) == [19723, None]
    assert c.value(None, 23) is None
    assert parse_timestamp("2024-01-02 03:04:05.5").microsecond == 500_000
    with pytest.raises(ConnectorConfigError, match="decimal handling 'exact' not accepted"):
        Converter("exact")


def test_messages() -> None:
    relation = (
        b"R" + struct.pack("!I", 16384) + b"public\0t\0d" + struct.pack("!h", 2)
        + b"\x01id\0" + struct.pack("!Ii", 23, -1) + b"\x00v\0" + struct.pack("!Ii", 25, -1)
    )  # fmt: skip
    assert decode(relation) == Relation(
        16384,
        "public",
        "t",
        "d",
        decode(relation).columns,  # type: ignore[union-attr]
    )
    assert [c.key for c in decode(relation).columns] == [True, False]  # type: ignore[union-attr]
    insert = b"I" + struct.pack("!I", 16384) + b"N" + struct.pack("!h", 2)
    insert += b"t" + struct.pack("!i", 1) + b"7" + b"n"
    assert decode(insert) == Change("c", 16384, None, ("7", None))
    delete = b"D" + struct.pack("!I", 16384) + b"K" + struct.pack("!h", 2)
    delete += b"t" + struct.pack("!i", 1) + b"7" + b"n"
    assert decode(delete) == Change("d", 16384, ("7", None), None, True)
    begin = b"B" + struct.pack("!qqI", 100, 0, 42)
    assert decode(begin) == Begin(100, 946_684_800_000_000, 42)
    commit = b"C" + struct.pack("!bqqq", 0, 100, 120, 5)
    assert decode(commit) == Commit(100, 120, 946_684_800_000_005)
    assert lsn_to_int("16/B374D848") == 0x16B374D848
    assert int_to_lsn(lsn_to_int("16/B374D848")) == "16/B374D848"
