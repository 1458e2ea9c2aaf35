"""@platformatic/kafka (npm) against the listener: admin, produce, a committing consumer
group and transactions (issue 39's application suite).

tests/kafka/js/platformatic.js creates three topics, lists them, deletes one; produces ten
keyed records; reads them in a group that commits each, then a new member of the group
resumes after the commits; and commits, aborts and commits transactions that a
read_committed reader sees only the committed part of. The client is installed by
tests/support/kafkajs.py from the committed lock (tests/kafka/js/package-lock.json, at
1.35.0: the newest release whose engines admit Node 20); skipped, saying why, only where
node and npm are missing.
"""

from __future__ import annotations

import pytest

from tests.support.brokers import Cluster
from tests.support.kafkajs import install_kafkajs, run_script


@pytest.mark.slow
def test_platformatic_admin_produce_group_and_transactions(brokers: Cluster) -> None:
    missing = install_kafkajs("@platformatic/kafka")
    if missing:
        pytest.skip(missing)
    prefix = "plat"
    answer = run_script("platformatic.js", brokers.kafka_bootstrap, prefix, timeout_s=120)
    assert answer["listed"] == [f"{prefix}-plain", f"{prefix}-scratch", f"{prefix}-txn"]
    assert answer["afterDelete"] == [f"{prefix}-plain", f"{prefix}-txn"]
    assert answer["firstRead"] == sorted(f"v{i}" for i in range(10))
    assert answer["resumed"] == ["v10", "v11"]  # nothing committed is read again
    assert answer["readCommitted"] == ["committed-0", "committed-1", "committed-2", "last"]
