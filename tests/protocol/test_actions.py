"""One table drives each admin action (``sparklog.protocol.actions``): the table is complete
(every action the broker serves has an entry, every entry a server function and an ACL the
broker evaluates), keeps the wire names and bodies old clients and brokers speak, and an
action added to the table and the broker is served to every client with no other code."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from sparklog.broker_lite import flight_acls
from sparklog.broker_lite.server import FlightBroker
from sparklog.client.transports import open_backend
from sparklog.client.transports.flight_client import BrokerClient
from sparklog.client.types import OffsetAndMetadata
from sparklog.errors import (
    ClusterAuthorizationFailedError,
    InvalidConfigurationError,
    InvalidRequestError,
)
from sparklog.protocol import actions
from sparklog.protocol.actions import ACTIONS, Action
from sparklog.protocol.flight import REQUIRED, Field
from sparklog.topic_partition import TopicPartition
from tests.chaos.inproc import inproc_broker

#: every action's wire name and body (field, type, default) as brokers and clients before the
#: table spoke them: a change here breaks an old client or broker
WIRE: dict[str, list[tuple[str, str, Any]]] = {
    "metadata": [("topics", "list", None), ("sizes", "bool", False)],
    "describe_cluster": [],
    "list_topics": [],
    "create_topic": [
        ("name", "str", "REQUIRED"),
        ("partitions", "int", 1),
        ("config", "dict", None),
        ("value_schema", "str", None),
        ("replication_factor", "int", 1),
    ],
    "delete_topic": [("name", "str", "REQUIRED")],
    "alter_topic_config": [
        ("name", "str", "REQUIRED"),
        ("updates", "dict", {}),
        ("remove", "list", []),
    ],
    "add_partitions": [("name", "str", "REQUIRED"), ("total", "int", "REQUIRED")],
    "list_offsets": [
        ("topic", "str", "REQUIRED"),
        ("partition", "int", "REQUIRED"),
        ("spec", "Any", "REQUIRED"),
    ],
    "init_producer_id": [],
    "delete_records": [
        ("topic", "str", "REQUIRED"),
        ("partition", "int", "REQUIRED"),
        ("offset", "int", "REQUIRED"),
    ],
    "join_group": [
        ("group", "str", "REQUIRED"),
        ("member_id", "str", ""),
        ("topics", "list", "REQUIRED"),
        ("strategy", "Any", "range"),
        ("session_timeout_ms", "int", 10000),
        ("rebalance_timeout_ms", "int", 30000),
    ],
    "sync_group": [
        ("group", "str", "REQUIRED"),
        ("generation", "int", "REQUIRED"),
        ("member_id", "str", "REQUIRED"),
        ("assignment", "dict", None),
    ],
    "heartbeat": [
        ("group", "str", "REQUIRED"),
        ("generation", "int", "REQUIRED"),
        ("member_id", "str", "REQUIRED"),
    ],
    "leave_group": [("group", "str", "REQUIRED"), ("member_id", "str", "REQUIRED")],
    "commit_offsets": [
        ("group", "str", "REQUIRED"),
        ("generation", "int", -1),
        ("member_id", "str", ""),
        ("offsets", "list", "REQUIRED"),
        ("metadata", "str", ""),
    ],
    "fetch_offsets": [("group", "str", "REQUIRED")],
    "list_groups": [],
    "describe_group": [("group", "str", "REQUIRED")],
    "delete_group": [("group", "str", "REQUIRED")],
    "delete_offsets": [("group", "str", "REQUIRED"), ("partitions", "list", "REQUIRED")],
    "list_transactions": [],
    "abort_transaction": [("transactional_id", "str", "REQUIRED")],
    "write_txn_markers": [("topic", "str", "REQUIRED"), ("markers", "list", "REQUIRED")],
    "transaction_state": [("transactional_id", "str", "REQUIRED")],
    "commit_staged": [
        ("topic", "str", "REQUIRED"),
        ("topic_id", "str", "REQUIRED"),
        ("appends", "dict", "REQUIRED"),
        ("producers", "dict", {}),
        ("txn", "list", None),
    ],
    "commit_mirrored": [
        ("topic", "str", "REQUIRED"),
        ("topic_id", "str", "REQUIRED"),
        ("appends", "dict", "REQUIRED"),
        ("link", "str", "REQUIRED"),
        ("expected", "dict", "REQUIRED"),
    ],
    "set_scram_credential": [
        ("user", "str", "REQUIRED"),
        ("mechanism", "str", "REQUIRED"),
        ("iterations", "int", "REQUIRED"),
        ("salt", "str", "REQUIRED"),
        ("salted_password", "str", "REQUIRED"),
    ],
    "delete_scram_credential": [("user", "str", "REQUIRED"), ("mechanism", "str", None)],
    "list_users": [],
    "create_mirror_link": [
        ("name", "str", "REQUIRED"),
        ("source", "str", "REQUIRED"),
        ("topics", "str", "REQUIRED"),
        ("groups", "str", ""),
        ("prefix", "str", ""),
        ("source_options", "dict", None),
    ],
    "list_mirror_links": [],
    "describe_mirror_link": [("name", "str", "REQUIRED")],
    "pause_mirror_link": [("name", "str", "REQUIRED"), ("paused", "bool", "REQUIRED")],
    "delete_mirror_link": [("name", "str", "REQUIRED")],
    "promote_mirror_topic": [("topic", "str", "REQUIRED")],
    "reverse_mirror_link": [
        ("name", "str", "REQUIRED"),
        ("reverse_name", "str", ""),
        ("source_options", "dict", None),
    ],
}


def _wire(action: Action[Any]) -> list[tuple[str, str, Any]]:
    return [
        (
            f.name,
            "Any" if f.kind is Any else f.kind.__name__,
            "REQUIRED" if f.default is REQUIRED else f.default,
        )
        for f in action.body
    ]


def test_the_table_keeps_every_wire_name_and_body() -> None:
    assert {name: _wire(action) for name, action in ACTIONS.items()} == WIRE
    assert all(name == action.name for name, action in ACTIONS.items())


def test_every_acl_names_a_body_field_or_a_rule_the_broker_has() -> None:
    for action in ACTIONS.values():
        fields = {f.name for f in action.body}
        assert flight_acls.knows(action.acl), action.name
        if action.acl.resource in (actions.TOPIC, actions.GROUP):
            assert action.acl.field in fields, action.name
        if action.route == "group":
            assert "group" in fields, action.name
        if action.route == "leader":
            assert {"topic", "partition"} <= fields, action.name


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[FlightBroker, str]]:
    """A broker whose authorizer checks every call (User:ANONYMOUS holds no ACL)."""
    root = f"file://{tmp_path_factory.mktemp('root')}"
    with inproc_broker(root, authorizer="acl") as started:
        yield started


def test_every_action_the_broker_serves_has_an_entry_and_every_entry_a_server_function(
    acl_broker: tuple[FlightBroker, str],
) -> None:
    server, _ = acl_broker
    assert set(server.actions) == set(ACTIONS)


#: a new action, as a plugin or the next issue would add it: its table entry...
NOTE = Action(
    "echo_note",
    (Field("note", str), Field("times", int, 1)),
    lambda raw: tuple(str(x) for x in raw),
    actions.LISTING,
    idempotent=True,
)
#: ...and one that needs ALTER on the cluster
GUARDED = Action(
    "guarded_note", (Field("note", str),), lambda raw: str(raw), actions.cluster("ALTER")
)


def test_an_action_added_to_the_table_and_the_broker_reaches_every_client(
    acl_broker: tuple[FlightBroker, str], tmp_path: Any
) -> None:
    server, location = acl_broker
    try:
        for action in (NOTE, GUARDED):
            actions.register(action)
        # ...and its server function: nothing else (no client, transport or ACL code)
        server.actions[NOTE.name] = lambda note, times: [note] * times
        server.actions[GUARDED.name] = lambda note: note
        with BrokerClient(location, retry_timeout_ms=5_000) as client:
            assert client.call(NOTE, note="hi", times=2) == ("hi", "hi")
            assert client.call(NOTE, note="hi") == ("hi",)  # the default, filled by the broker
            with pytest.raises(TypeError, match="no field"):
                client.call(NOTE, note="hi", colour="red")  # refused before it is sent
            with pytest.raises(InvalidRequestError, match="'times'.*accepted: integer"):
                client.call(NOTE, note="hi", times="2")  # the broker checks the table's types
            with pytest.raises(ClusterAuthorizationFailedError, match="may not alter cluster"):
                client.call(GUARDED, note="hi")  # the table's ACL, evaluated by the broker
        backend = open_backend(location, retry_timeout_ms=5_000)  # Admin's backend
        try:
            assert backend.call(NOTE, note="yo") == ("yo",)
        finally:
            backend.close()
        root = open_backend(f"file://{tmp_path}/root")  # a root serves no broker action
        try:
            with pytest.raises(InvalidConfigurationError, match="echo_note runs on a broker"):
                root.call(NOTE, note="hi")
        finally:
            root.close()
    finally:
        for action in (NOTE, GUARDED):
            ACTIONS.pop(action.name, None)
            server.actions.pop(action.name, None)


def test_a_wire_name_is_registered_once() -> None:
    with pytest.raises(ValueError, match="already in the table"):
        actions.register(Action("list_topics", (), list, actions.LISTING))


def _config_and_group_calls(backend: Any) -> dict[str, Any]:
    """A topic's config changed and one member's whole life in a group, through the calls
    the backends share (``TopicCalls``/``GroupCalls``): what each answered."""
    try:
        backend.create_topic("t", 2, {})
        backend.alter_topic_config("t", {"retention.ms": 60_000})
        joined = backend.join_group("g", "", ["t"], "range", 10_000, 10_000)
        assigned = backend.sync_group("g", joined.generation, joined.member_id)
        backend.heartbeat("g", joined.generation, joined.member_id)
        backend.commit_offsets(
            "g",
            joined.generation,
            joined.member_id,
            {
                TopicPartition("t", 0): OffsetAndMetadata(5, "m"),
                TopicPartition("t", 1): OffsetAndMetadata(7, ""),
            },
        )
        committed = backend.fetch_offsets("g")
        described = backend.describe_group("g")
        listed = backend.list_groups()
        backend.leave_group("g", joined.member_id)
        after_leave = backend.describe_group("g")["state"]
        backend.delete_group("g")
        return {
            "retention.ms": backend.describe_topic("t").config["retention.ms"],
            "assigned": sorted(assigned),
            "described": (described["state"], described["strategy"], len(described["members"])),
            "listed": listed,
            "committed": committed,
            "after_leave": after_leave,
            "groups_after_delete": backend.list_groups(),
        }
    finally:
        backend.close()


def test_a_root_and_a_broker_answer_the_shared_calls_alike(tmp_path: Any) -> None:
    """The config and group calls go through the table on both backends: brokers serve
    them, a storage root runs them on its in-process coordinator, with the same answers."""
    with inproc_broker(f"file://{tmp_path}/brokers") as (_, location):
        through_broker = _config_and_group_calls(open_backend(location, retry_timeout_ms=5_000))
    on_root = _config_and_group_calls(open_backend(f"file://{tmp_path}/root"))
    assert on_root == through_broker
    assert on_root["assigned"] == [TopicPartition("t", 0), TopicPartition("t", 1)]
    assert on_root["groups_after_delete"] == []
