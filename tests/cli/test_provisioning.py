"""``topics create`` as provisioning scripts copied from Kafka call it (issue 39 item 1):
``--replication-factor`` up to the live brokers, ``--if-not-exists``."""

from __future__ import annotations

import json

from tests.cli.test_cli import _one_error_line, _runner


def test_replication_factor_and_if_not_exists_on_two_brokers(two_brokers) -> None:
    cli = _runner({}, ["--address", two_brokers.address])
    cli("topics", "create", "orders", "-p", "2", "--replication-factor", "2")
    desc = json.loads(cli("-o", "json", "topics", "describe", "orders").out)
    assert desc["replication_factor"] == 2
    assert "replication factor 2" in cli("topics", "describe", "orders").out

    _one_error_line(
        cli("topics", "create", "more", "--replication-factor", "3", ok=False),
        "replication factor 3",
        "accepted: 1 to 2",
    )
    _one_error_line(cli("topics", "create", "orders", ok=False), "orders", "already exists")
    again = cli("topics", "create", "orders", "--if-not-exists", "--replication-factor", "2")
    assert "already exists" in again.out
    assert len(json.loads(cli("-o", "json", "topics", "describe", "orders").out)["partitions"]) == 2


def test_replication_factor_on_a_root_without_brokers(tmp_path) -> None:
    cli = _runner({"SPARKLOG_ADDRESS": str(tmp_path / "root")}, [])
    cli("topics", "create", "t", "--replication-factor", "-1", "--if-not-exists")
    assert json.loads(cli("-o", "json", "topics", "describe", "t").out)["replication_factor"] == 1
    _one_error_line(
        cli("topics", "create", "u", "--replication-factor", "2", ok=False),
        "replication factor 2",
        "accepted: 1 to 1",
    )
