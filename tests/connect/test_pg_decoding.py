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


def test_intervals_as_debezium_numeric_and_string() -> None:
    """``interval.handling.mode``: MicroDuration (a month is 365.25 / 12 days) or ISO 8601."""
    numeric, text = Converter(), Converter(interval_handling="string")
    assert numeric.value("P1DT2H", 1186) == (24 + 2) * 3600 * 1_000_000
    assert numeric.value("P1M", 1186) == 2_629_800_000_000  # 30.4375 days
    assert numeric.value("P1Y", 1186) == 12 * 2_629_800_000_000
    assert numeric.value("P-1DT-1.5S", 1186) == -86_401_500_000
    assert numeric.value("PT0S", 1186) == 0
    assert numeric.value("{P1D,NULL}", 1187) == [86_400_000_000, None]
    assert text.value("P1Y2M3DT4H5M6.78S", 1186) == "P1Y2M3DT4H5M6.78S"
    assert text.value("P3D", 1186) == "P0Y0M3DT0H0M0S"  # every part, as Debezium writes it
    assert text.value("PT0S", 1186) == "P0Y0M0DT0H0M0S"
    assert text.value("P-1Y-2MT-0.5S", 1186) == "P-1Y-2M0DT0H0M-0.5S"
    with pytest.raises(ConnectorConfigError, match="interval handling 'iso' not accepted; "
                       "accepted: numeric, string"):  # fmt: skip
        Converter(interval_handling="iso")


def test_timetz_is_normalised_to_utc() -> None:
    c = Converter()
    assert c.value("10:15:30.5+02", 1266) == "08:15:30.5Z"
    assert c.value("23:30:00-02:30", 1266) == "02:00:00Z"  # past midnight: the next day's time
    assert c.value("00:00:00.000123+00", 1266) == "00:00:00.000123Z"
    assert c.value("{01:00:00+01}", 1270) == ["00:00:00Z"]


def test_time_precision_modes() -> None:
    """``time.precision.mode``: adaptive (default), adaptive_time_microseconds, connect."""
    adaptive = Converter()
    micros = Converter(time_precision="adaptive_time_microseconds")
    connect = Converter(time_precision="connect")
    # time: ms for precision 0-3 in adaptive, else µs; always µs; always ms
    assert adaptive.value("01:02:03.25", 1083, 3) == 3_723_250
    assert adaptive.value("01:02:03.25", 1083, -1) == 3_723_250_000
    assert micros.value("01:02:03.25", 1083, 3) == 3_723_250_000
    assert connect.value("01:02:03.25", 1083, -1) == 3_723_250
    # timestamp: adaptive in both adaptive modes; connect always ms
    assert micros.value("1970-01-02 00:00:00.5", 1114, -1) == 86_400_500_000
    assert micros.value("1970-01-02 00:00:00.5", 1114, 3) == 86_400_500
    assert connect.value("1970-01-02 00:00:00.5", 1114, -1) == 86_400_500
    for c in (adaptive, micros, connect):  # date as days, zoned values as UTC strings
        assert c.value("1970-01-11", 1082) == 10
        assert c.value("1970-01-01 01:00:00+01", 1184) == "1970-01-01T00:00:00Z"
    with pytest.raises(ConnectorConfigError, match="time precision 'nanos' not accepted; "
                       "accepted: adaptive, adaptive_time_microseconds, connect"):  # fmt: skip
        Converter(time_precision="nanos")


def test_snapshot_markers_in_debeziums_precedence() -> None:
    from sparklog.connect.changes import snapshot_marker
    from sparklog.connect.pg_snapshot import Place

    # two tables of three rows, read as one run each
    first, last = Place(True, True, True, False), Place(True, True, False, True)
    assert [first.marker(i, 3) for i in range(3)] == ["first", "true", "last_in_data_collection"]
    assert [last.marker(i, 3) for i in range(3)] == [
        "first_in_data_collection", "true", "last"
    ]  # fmt: skip
    assert Place(True, True, True, True).marker(0, 1) == "last"  # one row in all: last wins
    middle = Place(False, False, True, True)  # a run inside a table: no table edge in it
    assert [middle.marker(i, 2) for i in range(2)] == ["true", "true"]
    assert snapshot_marker(False, False, True, True) == "last_in_data_collection"
