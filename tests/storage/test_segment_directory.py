"""The per-partition batch directory of segment objects, on every supported pyarrow.

Objects are written with the directory in the file schema's metadata (pyarrow 19
writes and reads it); objects written before carry it in the IPC file footer's
metadata (pyarrow >= 21 only) and must stay readable: both through their
segments and, where pyarrow can, through :func:`partition_directory`.
"""

from __future__ import annotations

import io
import json

import pyarrow as pa
import pytest

from sparklog.storage import make_batch
from sparklog.storage.objectstore import ObjectStore
from sparklog.storage.records import RECORD_SCHEMA
from sparklog.storage.segments import (
    FOOTER_KEY,
    Segment,
    partition_directory,
    read_segment,
    write_object,
)

PYARROW_MAJOR = int(pa.__version__.split(".")[0])


def test_the_directory_is_in_the_schema_metadata_written_by_this_pyarrow(tmp_path) -> None:
    store = ObjectStore(str(tmp_path))
    parts = {0: [make_batch([b"a", b"b"])], 3: [make_batch([b"c"]), make_batch([b"d"])]}
    staged = write_object(store, parts, RECORD_SCHEMA, compression="zstd")
    data = store.get(staged[0].object_key)
    assert partition_directory(data) == {
        0: {"first_batch": 0, "batch_count": 1, "rows": 2},
        3: {"first_batch": 1, "batch_count": 2, "rows": 2},
    }
    schema = pa.ipc.open_file(pa.py_buffer(data)).schema
    assert FOOTER_KEY in (schema.metadata or {})
    batches = read_segment(store, staged[3].at(0), RECORD_SCHEMA)
    assert [v for b in batches for v in b.column("value").to_pylist()] == [b"c", b"d"]


@pytest.mark.skipif(
    PYARROW_MAJOR < 21, reason="objects with footer metadata are written by pyarrow >= 21 only"
)
def test_objects_of_the_footer_format_stay_readable(tmp_path) -> None:
    """The format before: directory in the IPC footer, schema without metadata."""
    store = ObjectStore(str(tmp_path))
    batch = make_batch([b"x", b"y", b"z"])
    footer = {"0": {"first_batch": 0, "batch_count": 1, "rows": 3}}
    sink = io.BytesIO()
    writer = pa.ipc.new_file(
        sink, RECORD_SCHEMA, metadata={FOOTER_KEY: json.dumps(footer).encode()}
    )
    writer.write_batch(batch)
    writer.close()
    data = sink.getvalue()
    store.put("old.arrow", data)
    start = 8 + RECORD_SCHEMA.serialize().size  # magic + schema message
    end = len(data) - 10 - int.from_bytes(data[-10:-6], "little")  # the footer's first byte
    segment = Segment(
        object_key="old.arrow",
        byte_start=start,
        byte_end=end,
        batch_count=1,
        record_count=3,
        offset_span=3,
        min_timestamp_ms=0,
        max_timestamp_ms=0,
        checksum=0,
        created_ms=0,
    ).at(0)
    batches = read_segment(store, segment, RECORD_SCHEMA, verify=False)
    assert [v for b in batches for v in b.column("value").to_pylist()] == [b"x", b"y", b"z"]
    assert partition_directory(data) == {0: {"first_batch": 0, "batch_count": 1, "rows": 3}}
