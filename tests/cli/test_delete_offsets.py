"""``sparklog groups delete-offsets`` (kafka-consumer-groups --delete-offsets) and
``topics alter --delete-config``, on a storage root and through a broker."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from sparklog import Consumer
from tests.cli.test_cli import Runner, _one_error_line, _runner
from tests.support.waiting import wait_for


@pytest.fixture(params=["file", "s3", "broker"])
def where(request, tmp_path) -> Iterator[tuple[Runner, str, dict]]:
    """(CLI runner, address, storage options) of a file root, an S3 root and a broker."""
    if request.param == "file":
        root = str(tmp_path / "root")
        yield _runner({}, ["-a", root]), root, {}
    elif request.param == "s3":
        s3 = request.getfixturevalue("moto_s3")
        root = s3.fresh_root()
        flags = [
            "-S", "key=testing", "-S", "secret=testing",
            "-S", f"client_kwargs.endpoint_url={s3.endpoint_url}",
            "-S", "client_kwargs.region_name=us-east-1",
        ]  # fmt: skip
        yield _runner({}, ["-a", root, *flags]), root, s3.storage_options
    else:
        cluster = request.getfixturevalue("broker")
        yield _runner({}, ["-a", cluster.address]), cluster.address, {}


def _committed(run: Runner, group: str) -> dict[tuple[str, int], int]:
    doc = json.loads(run("-o", "json", "groups", "describe", group).out)
    return {(p["topic"], p["partition"]): p["committed"] for p in doc["partitions"]}


def test_delete_offsets(where):
    run, address, options = where
    run("topics", "create", "t", "-p", "2")
    run("topics", "create", "u")
    run("produce", "t", "-p", "0", input="a\nb\nc\n")
    run("produce", "t", "-p", "1", input="d\n")
    run("produce", "u", input="e\n")
    run("consume", "t", "u", "--group", "g", "--from-beginning", "--max-messages", "5")
    assert _committed(run, "g") == {("t", 0): 3, ("t", 1): 1, ("u", 0): 1}

    plan = run("-o", "json", "groups", "delete-offsets", "g", "--topic", "t", "--dry-run")
    assert json.loads(plan.out) == {
        "group": "g",
        "executed": False,
        "partitions": [
            {"topic": "t", "partition": 0, "committed": 3, "deleted": False},
            {"topic": "t", "partition": 1, "committed": 1, "deleted": False},
        ],
    }
    assert "dry run" in plan.err and len(_committed(run, "g")) == 3

    done = json.loads(run("-o", "json", "groups", "delete-offsets", "g", "-t", "t:1").out)
    assert done["executed"] and done["partitions"] == [
        {"topic": "t", "partition": 1, "committed": 1, "deleted": True}
    ]
    assert _committed(run, "g") == {("t", 0): 3, ("u", 0): 1}
    table = run("groups", "delete-offsets", "g", "--topic", "t").out
    assert "deleted" in table and "none" in table  # partition 1 had no offset left
    assert _committed(run, "g") == {("u", 0): 1}

    _one_error_line(run("groups", "delete-offsets", "nobody", "-t", "t", ok=False), "nobody")
    _one_error_line(run("groups", "delete-offsets", "g", "-t", "missing", ok=False), "missing")
    _one_error_line(run("groups", "delete-offsets", "g", "-t", "t:7", ok=False), "0-1")
    _one_error_line(run("groups", "delete-offsets", "g", ok=False), "--topic")

    # an active member subscribed to u: refused, nothing deleted (GROUP_SUBSCRIBED_TO_TOPIC)
    member = Consumer(
        "u", address=address, group_id="g", storage_options=options, auto_offset_reset="earliest"
    )
    try:
        wait_for(lambda: member.poll(200) is not None and member.assignment(), 60, "a join")
        refused = run("-o", "json", "groups", "delete-offsets", "g", "-t", "u", ok=False)
        error = json.loads(refused.err)["error"]
        assert error["code"] == "GROUP_SUBSCRIBED_TO_TOPIC" and "'u'" in error["message"]
        assert ("u", 0) in _committed(run, "g")
    finally:
        member.close(autocommit=False)
    run("groups", "delete-offsets", "g", "-t", "u")
    assert _committed(run, "g") == {}


def test_alter_delete_config(where):
    run, _, _ = where
    run("topics", "create", "t", "-c", "retention.ms=1000", "-c", "cleanup.policy=compact")
    out = run("topics", "alter", "t", "--delete-config", "retention.ms").out
    assert "retention.ms back to default (604800000)" in out
    config = json.loads(run("-o", "json", "topics", "describe", "t").out)["config"]
    assert (config["retention.ms"], config["cleanup.policy"]) == (604_800_000, "compact")
    bad = run("topics", "alter", "t", "--delete-config", "nonsense", ok=False)
    _one_error_line(bad, "nonsense", "retention.ms")
