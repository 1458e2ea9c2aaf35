"""The chaos scenarios, short (the default run) and long (``soak``: ``SPARKLOG_SOAK=1`` or
``pytest -m soak``); bench/chaos.py runs them longer still.

Each asserts 0 acknowledged records lost, 0 duplicates, no offset gaps, no
record reported failed that is in the log, produce again within the scenario's
bound after each fault, and broker memory under ``RSS_MAX_BYTES``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from tests.chaos import scenarios
from tests.support.s3 import MotoS3


@contextmanager
def s3_setup(tmp_path, moto_s3: MotoS3) -> Iterator[scenarios.Setup]:
    """A scenario's S3 setup (behind a fault proxy), its proxy stopped after."""
    setup = scenarios.s3_setup(tmp_path, moto_s3)
    try:
        yield setup
    finally:
        assert setup.proxy is not None
        setup.proxy.stop()


def test_leader_kills_file(tmp_path) -> None:
    scenarios.leader_kills(scenarios.file_setup(tmp_path), kills=2)


def test_leader_paused_past_its_lease_file(tmp_path) -> None:
    scenarios.leader_pauses(scenarios.file_setup(tmp_path), pauses=1)


def test_clock_skew_moves_no_leadership_file(tmp_path) -> None:
    figures = scenarios.clock_skew(scenarios.file_setup(tmp_path), skew_ms=-6_000, rounds=3)
    # the three brokers start one after another; after that, skew changes nothing
    assert figures.notes["leadership_changes"] <= 12, figures.summary()


def test_leader_kills_s3(tmp_path, moto_s3: MotoS3) -> None:
    with s3_setup(tmp_path, moto_s3) as setup:
        scenarios.leader_kills(setup, kills=1, recover_s=60)


@pytest.mark.parametrize("mode", ["reset", "drop", "blackhole"])
def test_storage_outages_s3(tmp_path, moto_s3: MotoS3, mode: str) -> None:
    with s3_setup(tmp_path, moto_s3) as setup:
        scenarios.storage_faults(setup, mode, outages=1, fault_s=4)


def test_hostile_requests_file(tmp_path) -> None:
    scenarios.hostile_requests(scenarios.file_setup(tmp_path), idle_connections=200)


def test_damaged_topic_file(tmp_path) -> None:
    scenarios.damaged_topic(scenarios.file_setup(tmp_path))


@pytest.mark.slow
@pytest.mark.soak
def test_leader_kills_s3_long(tmp_path, moto_s3: MotoS3) -> None:
    with s3_setup(tmp_path, moto_s3) as setup:
        scenarios.leader_kills(setup, kills=6, recover_s=60)


@pytest.mark.slow
@pytest.mark.soak
@pytest.mark.parametrize("mode", ["reset", "drop", "blackhole"])
def test_storage_outages_s3_long(tmp_path, moto_s3: MotoS3, mode: str) -> None:
    with s3_setup(tmp_path, moto_s3) as setup:
        scenarios.storage_faults(setup, mode, outages=3, fault_s=5)


@pytest.mark.slow
@pytest.mark.soak
def test_leader_kills_and_pauses_file_long(tmp_path) -> None:
    setup = scenarios.file_setup(tmp_path)
    scenarios.leader_kills(setup, kills=10)
    (tmp_path / "pauses").mkdir()
    scenarios.leader_pauses(scenarios.file_setup(tmp_path / "pauses"), pauses=3)
