"""Shared fixtures: storage roots on every backend, and a real S3 endpoint (moto server)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

from tests.support import leftovers
from tests.support.brokers import Cluster
from tests.support.s3 import MotoS3

leftovers.track()

#: each test file's total time, printed after ``--durations``' slowest tests (CI's log), and
#: the longest files started first under ``--dist loadfile`` (by the times that table gave)
pytest_plugins = ["tests.support.file_durations", "tests.support.longest_first"]


#: ``SPARKLOG_SOAK=1`` (or a ``-m`` expression naming ``soak``) runs the soak tests: the
#: long forms (more kills, records, outages) of guarantees the default run tests smaller
SOAK_ENV = "SPARKLOG_SOAK"


def soak_selected(config: pytest.Config) -> bool:
    return os.environ.get(SOAK_ENV, "") not in ("", "0") or "soak" in (
        config.getoption("markexpr") or ""
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The default run deselects the ``soak`` tests (a nightly job runs them)."""
    if soak_selected(config):
        return
    soak = [item for item in items if item.get_closest_marker("soak")]
    if soak:
        config.hook.pytest_deselected(items=soak)
        items[:] = [item for item in items if not item.get_closest_marker("soak")]


@pytest.fixture(scope="session", autouse=True)
def no_process_left() -> Iterator[None]:
    """At the end of the run, fail loudly if a process the suite started still runs.

    (Set up first, so torn down last: after every other fixture has stopped its
    processes.) The leftovers are named, then stopped by pid."""
    yield
    left = leftovers.still_running()
    if left:
        leftovers.stop(left)
        listing = "\n".join(f"  pid {pid}: {command}" for pid, command in sorted(left.items()))
        pytest.fail(
            f"{len(left)} process(es) started by the tests were still running at the end "
            f"of the run (now stopped); a fixture does not stop what it starts:\n{listing}",
            pytrace=False,
        )


@pytest.fixture(scope="session")
def moto_s3() -> Iterator[MotoS3]:
    """A moto S3 server on 127.0.0.1, port chosen by the OS, for the whole run."""
    server = MotoS3.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(params=["file", "memory", "s3"])
def root_spec(request: pytest.FixtureRequest, tmp_path) -> tuple[str, dict]:
    """(url, storage_options) of a fresh, empty root on each storage backend."""
    if request.param == "file":
        return f"file://{tmp_path}/root", {}
    if request.param == "memory":
        return f"memory://sparklog-{uuid.uuid4().hex}", {}
    s3: MotoS3 = request.getfixturevalue("moto_s3")
    return s3.fresh_root(), s3.storage_options


@pytest.fixture
def s3_root_spec(moto_s3: MotoS3) -> tuple[str, dict]:
    return moto_s3.fresh_root(), moto_s3.storage_options


@pytest.fixture
def broker(tmp_path) -> Iterator[Cluster]:
    """One broker on a fresh file root."""
    cluster = Cluster(tmp_path, f"file://{tmp_path}/broker-root")
    try:  # a broker that fails to start is stopped too
        cluster.start(1)
        cluster.wait_live(1)
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def two_brokers(tmp_path) -> Iterator[Cluster]:
    """Two brokers sharing a file root (for failover)."""
    cluster = Cluster(tmp_path, f"file://{tmp_path}/broker-root")
    try:  # a broker that fails to start is stopped too
        cluster.start(1)
        cluster.start(2)
        cluster.wait_live(2)
        yield cluster
    finally:
        cluster.stop()


# Brokers started by tests (in-process or as subprocesses inheriting this environment) put
# their Kafka listener on a free port, so the default 9092 never makes two of them collide.
os.environ.setdefault("SPARKLOG_KAFKA_LISTEN", "127.0.0.1:0")
