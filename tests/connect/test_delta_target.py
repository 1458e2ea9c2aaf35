"""Exactly-once Delta writes through delta-rs, without Spark: a local table and one on S3 (moto)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from sparklog.connect.delta import DeltaTarget, last_per_key
from sparklog.errors import ConnectorConfigError, ConnectorError
from tests.support.s3 import CREDENTIALS, MotoS3


def rows(keys: list[bytes | None], offsets: list[int], xs: list[int | None]) -> pa.Table:
    return pa.table(
        {
            "x": pa.array(xs, pa.int64()),
            "_key": pa.array(keys, pa.binary()),
            "_partition": pa.array([0] * len(keys), pa.int32()),
            "_offset": pa.array(offsets, pa.int64()),
        }
    )


@pytest.fixture(params=["file", "s3"])
def table_spec(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, dict[str, str]]:
    if request.param == "file":
        return str(tmp_path / "t"), {}
    s3: MotoS3 = request.getfixturevalue("moto_s3")
    uri = s3.fresh_root().replace("/root", "/tables/t")
    options = {
        "AWS_ENDPOINT_URL": s3.endpoint_url,
        "AWS_ACCESS_KEY_ID": CREDENTIALS["key"],
        "AWS_SECRET_ACCESS_KEY": CREDENTIALS["secret"],
        "AWS_REGION": "us-east-1",
        "AWS_ALLOW_HTTP": "true",
    }
    return uri, options


def test_a_replayed_version_is_skipped(table_spec: tuple[str, dict[str, str]]) -> None:
    uri, options = table_spec
    target = DeltaTarget(uri, "app", partition_by=["_partition"], storage_options=options)
    assert target.committed_version() is None
    batch = rows([b"a", b"b"], [0, 1], [1, 2])
    assert target.write(batch, 0) is True
    assert target.write(batch, 0) is False  # the replay of batch 0
    assert target.write(rows([b"c"], [2], [3]), 1) is True
    assert target.committed_version() == 1
    assert DeltaTarget(uri, "other-app", storage_options=options).committed_version() is None
    table = DeltaTable(uri, storage_options=options)
    assert sorted(table.to_pyarrow_table().column("x").to_pylist()) == [1, 2, 3]
    assert table.metadata().partition_columns == ["_partition"]


def test_upsert_merges_by_key_and_deletes_on_tombstones(
    table_spec: tuple[str, dict[str, str]],
) -> None:
    uri, options = table_spec
    target = DeltaTarget(uri, "app", mode="upsert", storage_options=options)
    target.write(rows([b"a", b"b", b"a", b"z"], [0, 1, 2, 3], [1, 2, 3, None]), 0)
    target.write(rows([b"b", b"c", b"a"], [4, 5, 6], [None, 7, 8]), 1)
    target.write(rows([b"b", b"c", b"a"], [4, 5, 6], [None, 9, 9]), 1)  # replay: skipped
    got = DeltaTable(uri, storage_options=options).to_pyarrow_table()
    assert {k: x for k, x in zip(got["_key"].to_pylist(), got["x"].to_pylist(), strict=True)} == {
        b"a": 8,
        b"c": 7,
    }


def test_last_record_of_each_key_wins() -> None:
    picked = last_per_key(rows([b"k", b"j", b"k", b"k"], [5, 1, 9, 7], [1, 2, 3, 4]))
    assert sorted(zip(picked["_key"].to_pylist(), picked["x"].to_pylist(), strict=True)) == [
        (b"j", 2),
        (b"k", 3),
    ]


def test_bad_settings_and_keyless_upserts_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConnectorConfigError, match="mode 'replace' not accepted"):
        DeltaTarget(str(tmp_path / "t"), "a", mode="replace")  # type: ignore[arg-type]
    with pytest.raises(ConnectorConfigError, match="needs an app id"):
        DeltaTarget(str(tmp_path / "t"), "")
    with pytest.raises(ConnectorConfigError, match=r"partition column\(s\) \['day'\]"):
        DeltaTarget(str(tmp_path / "t"), "a", partition_by=["day"]).write(rows([b"a"], [0], [1]), 0)
    with pytest.raises(ConnectorError, match="a record has no key .partition 0, offset 3"):
        DeltaTarget(str(tmp_path / "u"), "a", mode="upsert").write(rows([None], [3], [1]), 0)
