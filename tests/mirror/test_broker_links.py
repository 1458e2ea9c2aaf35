"""Mirror links managed through a broker (its Flight actions), not the root: create,
describe, pause/resume, promote, reverse and delete, and a `mirror run` on the root moving
data with a link created that way."""

from __future__ import annotations

import json

import pytest

from sparklog.storage import open_root
from tests.cli.test_cli import _runner
from tests.mirror.support import assert_same, produce, records


def test_link_commands_through_a_broker(broker, tmp_path):
    source = open_root(f"file://{tmp_path}/src", {}, create=True)
    source.create_topic("orders", partitions=2)
    produce(source, "orders", 2, rounds=3)
    via_broker = _runner({}, ["--address", broker.address])
    on_root = _runner({}, ["--address", broker.root])

    created = via_broker(
        "mirror", "create", "dr", "--source", str(tmp_path / "src"), "--topics", "orders"
    )
    assert "created mirror link dr" in created.out
    listed = json.loads(via_broker("--output", "json", "mirror", "list").out)
    assert [(x["name"], x["state"]) for x in listed] == [("dr", "active")]
    assert listed[0]["source"] == source.url  # a relative path means the shell's directory

    again = via_broker("mirror", "create", "dr", "--source", source.url, "--topics", "x", ok=False)
    assert again.code != 0 and "exists already" in again.err

    # the link made through the broker is the root's: `mirror run` on the root copies it
    assert "copied 30 records" in on_root("mirror", "run", "dr", "--once").out
    described = json.loads(via_broker("--output", "json", "mirror", "describe", "dr").out)
    ends = [(p["partition"], p["mirror_end"], p["lag_records"]) for p in described["partitions"]]
    assert ends == [(0, 15, 0), (1, 15, 0)]

    via_broker("mirror", "pause", "dr")
    assert "paused" in via_broker("mirror", "list").out
    produce(source, "orders", 2, rounds=1)
    assert "is paused: copied nothing" in on_root("mirror", "run", "dr", "--once").out
    via_broker("mirror", "resume", "dr")
    assert "active" in via_broker("mirror", "list").out
    assert "copied 10 records" in on_root("mirror", "run", "dr", "--once").out
    assert_same(source, open_root(broker.root), "orders")

    promoted = via_broker("mirror", "promote", "orders")
    assert "no longer mirrored by link dr" in promoted.out
    mirror = open_root(broker.root).describe_topic("orders").mirror
    assert mirror["state"] == "promoted" and mirror["promoted_ends"] == {"0": 20, "1": 20}

    # failing back through the broker: the reverse link is created on the old source
    dest = open_root(broker.root)
    dest.topic("orders").produce({0: records(0, 20, 3)})  # written after the failover
    reversed_ = via_broker("mirror", "reverse", "dr")
    assert f"created mirror link dr-back on {source.url}" in reversed_.out
    on_source = _runner({}, ["--address", source.url])
    assert "copied 3 records" in on_source("mirror", "run", "dr-back", "--once").out
    assert assert_same(dest, source, "orders") == 43

    via_broker("mirror", "delete", "dr")
    assert "no mirror links" in via_broker("mirror", "list").out
    gone = via_broker("mirror", "describe", "dr", ok=False)
    assert gone.code != 0 and "no mirror link 'dr'" in gone.err

    # a broker address cannot run a link: one line saying what to give instead
    refused = via_broker("mirror", "run", "dr", "--once", ok=False)
    assert refused.code != 0 and "mirror_links" in refused.err


@pytest.mark.parametrize("action", ["create_mirror_link", "pause_mirror_link"])
def test_mirror_link_changes_need_alter_on_the_cluster(action):
    from sparklog.broker_lite.flight_acls import required
    from sparklog.protocol.actions import ACTIONS, DESCRIBE_MIRROR_LINK

    assert required(ACTIONS[action].acl, {"name": "dr"}) == [("ALTER", "CLUSTER", "kafka-cluster")]
    assert required(DESCRIBE_MIRROR_LINK.acl, {"name": "dr"}) == [
        ("DESCRIBE", "CLUSTER", "kafka-cluster")
    ]
