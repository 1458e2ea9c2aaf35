"""Fixtures: clusters of real broker processes on file and s3 (moto) roots."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.brokers import Cluster


@pytest.fixture(params=["file", "s3"])
def any_root(request: pytest.FixtureRequest, tmp_path) -> tuple[str, dict]:
    """(url, storage options) of a fresh root on a local directory or the moto S3 server."""
    if request.param == "file":
        return f"file://{tmp_path}/root", {}
    s3 = request.getfixturevalue("moto_s3")
    return s3.fresh_root(), s3.storage_options


@pytest.fixture
def file_root(tmp_path) -> tuple[str, dict]:
    return f"file://{tmp_path}/root", {}


@pytest.fixture
def cluster_on(tmp_path) -> Iterator:
    """cluster_on((url, options)) -> Cluster; every broker is stopped at teardown."""
    made: list[Cluster] = []

    def make(root: tuple[str, dict]) -> Cluster:
        c = Cluster(tmp_path, root[0], root[1])
        made.append(c)
        return c

    yield make
    for c in made:
        c.stop_all()
