"""The connectors' fixtures: a PostgreSQL server per test module (skipped where none runs)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.postgres import Postgres, running_postgres, why_unavailable


@pytest.fixture(scope="module")
def postgres() -> Iterator[Postgres]:
    reason = why_unavailable()
    if reason:
        pytest.skip(reason)
    with running_postgres() as server:
        yield server
