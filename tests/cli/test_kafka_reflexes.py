"""What a Kafka user's hands type on the first day (issue 39, "CLI reflexes"): Kafka's tool
spellings accepted, or refused with the sparklog form; messages that say what happened."""

from __future__ import annotations

import json
import socket
from importlib.metadata import version

import pytest

from tests.cli.test_cli import _one_error_line, _runner


@pytest.fixture
def cli(tmp_path):
    """The CLI on a fresh file root."""
    return _runner({"SPARKLOG_ADDRESS": str(tmp_path / "root")}, [])


def test_version(tmp_path) -> None:
    result = _runner({}, [])("--version")
    assert result.out.strip() == f"sparklog {version('sparklog')}"
    assert result.err == ""


def test_topic_commands_take_kafka_topics_topic_flag(cli) -> None:
    cli("topics", "create", "--topic", "orders", "--partitions", "2")
    desc = json.loads(cli("-o", "json", "topics", "describe", "--topic", "orders").out)
    assert desc["topic"] == "orders" and len(desc["partitions"]) == 2
    cli("topics", "alter", "--topic", "orders", "--config", "retention.ms=60000")
    cli("topics", "add-partitions", "--topic", "orders", "--partitions", "3")
    desc = json.loads(cli("-o", "json", "topics", "describe", "orders").out)
    assert desc["config"]["retention.ms"] == 60000 and len(desc["partitions"]) == 3
    _one_error_line(
        cli("topics", "describe", "orders", "--topic", "other", ok=False),
        "two topics named",
        "accepted: one of them",
    )
    _one_error_line(cli("topics", "describe", ok=False), "no topic named", "--topic TOPIC")
    cli("topics", "delete", "--topic", "orders")
    assert json.loads(cli("-o", "json", "topics", "list").out) == []


def test_topic_flag_elsewhere_hints_the_command_typed(cli) -> None:
    """``--topic`` where the topic is an argument: the hint names the command typed."""
    cli("topics", "create", "orders")
    _one_error_line(
        cli("offsets", "--topic", "orders", ok=False),
        "--topic",
        "sparklog form: name the topic as an argument: sparklog offsets orders",
    )


def test_groups_describe_all_groups_and_state(cli) -> None:
    cli("topics", "create", "orders")
    cli("produce", "orders", input="a\nb\nc\n")
    for group in ("billing", "audit"):
        cli(
            "groups",
            "reset-offsets",
            group,
            "-t",
            "orders",
            "--to-offset",
            "1",
            "--execute",
            "--create-group",
        )
    every = json.loads(cli("-o", "json", "groups", "describe", "--all-groups").out)
    assert sorted(d["group"] for d in every) == ["audit", "billing"]
    assert all(d["total_lag"] == 2 for d in every)
    table = cli("groups", "describe", "--all-groups").out
    assert "billing" in table and "audit" in table

    states = json.loads(cli("-o", "json", "groups", "describe", "--all-groups", "--state").out)
    assert sorted((d["group"], d["members"]) for d in states) == [("audit", 0), ("billing", 0)]
    one = json.loads(cli("-o", "json", "groups", "describe", "billing", "--state").out)
    assert one["group"] == "billing" and one["state"] == every[0]["state"]
    assert "state" in cli("groups", "describe", "--group", "billing", "--state").out
    _one_error_line(
        cli("groups", "describe", "billing", "--all-groups", ok=False),
        "--all-groups and a group",
    )


def test_delete_records_offset_json_file(cli, tmp_path) -> None:
    cli("topics", "create", "orders", "--partitions", "2")
    cli("produce", "orders", "-p", "0", input="a\nb\nc\n")
    cli("produce", "orders", "-p", "1", input="d\ne\n")
    plan = tmp_path / "offsets.json"
    plan.write_text(
        json.dumps(
            {
                "partitions": [
                    {"topic": "orders", "partition": 0, "offset": 2},
                    {"topic": "orders", "partition": 1, "offset": 1},
                ],
                "version": 1,
            }
        )
    )
    out = json.loads(cli("-o", "json", "delete-records", "--offset-json-file", str(plan)).out)
    assert [(p["partition"], p["log_start_offset"]) for p in out["partitions"]] == [(0, 2), (1, 1)]
    starts = json.loads(cli("-o", "json", "topics", "describe", "orders").out)["partitions"]
    assert [p["log_start_offset"] for p in starts] == [2, 1]

    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"partitions": [{"topic": "orders", "partition": "0"}]}))
    _one_error_line(
        cli("delete-records", "--offset-json-file", str(bad), ok=False),
        "bad.json",
        '"partition": "0"',
        "accepted:",
    )
    _one_error_line(
        cli("delete-records", "orders", "--offset-json-file", str(plan), ok=False),
        "--offset-json-file names its topics",
    )
    _one_error_line(cli("delete-records", ok=False), "--offset-json-file FILE")


def test_dump_log_print_data_log_and_files_hint(cli) -> None:
    cli("topics", "create", "orders")
    cli("produce", "orders", input="hello\n")
    assert "payload: hello" in cli("dump-log", "orders", "--print-data-log").out
    _one_error_line(
        cli("dump-log", "--files", "00000000000000000000.log", ok=False),
        "sparklog form: sparklog dump-log TOPIC",
    )


def test_quotas_in_kafka_configs_spelling(cli) -> None:
    bob = "--entity-type users --entity-name bob"
    cli(*f"quotas alter {bob} --add-config producer_byte_rate=1024".split())
    cli(
        *f"quotas alter {bob} --entity-type clients --entity-default "
        "--add-config consumer_byte_rate=2048".split()
    )
    found = json.loads(cli(*f"-o json quotas describe {bob}".split()).out)
    assert {json.dumps(d["entity"], sort_keys=True): d["quotas"] for d in found} == {
        '{"user": "bob"}': {"producer_byte_rate": 1024.0},
        '{"client-id": "<default>", "user": "bob"}': {"consumer_byte_rate": 2048.0},
    }
    # describe with a type and no name: every entity of that type, as kafka-configs
    app = "--entity-type clients --entity-name app"
    cli(*f"quotas alter {app} --add-config request_percentage=5".split())
    entities = {
        kind: sorted(
            ",".join(f"{k}={v}" for k, v in sorted(d["entity"].items()))
            for d in json.loads(cli(*f"-o json quotas describe --entity-type {kind}".split()).out)
        )
        for kind in ("users", "clients")
    }
    assert entities == {
        "users": ["client-id=<default>,user=bob", "user=bob"],
        "clients": ["client-id=<default>,user=bob", "client-id=app"],
    }
    topics = "quotas alter --entity-type topics --entity-name t --add-config producer_byte_rate=1"
    _one_error_line(
        cli(*topics.split(), ok=False), "--entity-type 'topics'", "accepted: users, clients"
    )
    nameless = "quotas alter --entity-type users --add-config producer_byte_rate=1"
    _one_error_line(cli(*nameless.split(), ok=False), "--entity-type users has no --entity-name")


@pytest.mark.parametrize("address", ["127.0.0.1", "localhost", "127.0.0.1:8815,10.0.0.2"])
def test_host_without_port_is_not_a_folder(tmp_path, address) -> None:
    result = _runner({}, ["-a", address])("topics", "list", ok=False)
    _one_error_line(result, "host without a port", "PORT", "8815")
    assert "no sparklog root" not in result.err


def test_second_broker_on_a_used_port_says_address_in_use(broker) -> None:
    taken = broker.brokers[1].port
    start = _runner(
        {"SPARKLOG_METRICS_LISTEN": "127.0.0.1:0", "SPARKLOG_KAFKA_LISTEN": "127.0.0.1:0"}, []
    )
    result = start(
        "broker",
        "start",
        "--root",
        broker.root,
        "--broker-id",
        "2",
        "--listen",
        f"127.0.0.1:{taken}",
        ok=False,
    )
    _one_error_line(result, f"127.0.0.1:{taken}", "Address already in use")
    # the first broker still holds its port
    with pytest.raises(OSError), socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind(("127.0.0.1", taken))


def test_s3_root_without_credentials_names_the_cause(moto_s3) -> None:
    env = {
        "AWS_ACCESS_KEY_ID": "",
        "AWS_SECRET_ACCESS_KEY": "",
        "AWS_SESSION_TOKEN": "",
        "AWS_CONFIG_FILE": "/nonexistent",
        "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
        "AWS_EC2_METADATA_DISABLED": "true",
        "SPARKLOG_STORAGE_CLIENT_KWARGS": json.dumps(
            {"endpoint_url": moto_s3.endpoint_url, "region_name": "us-east-1"}
        ),
    }
    result = _runner(env, ["-a", moto_s3.fresh_root()])("topics", "list", ok=False)
    _one_error_line(result, "failed to reach the root", "no credentials", "-S key=")
    assert "''" not in result.err


def test_produce_to_a_missing_topic_hints_topics_create(cli) -> None:
    cli("topics", "create", "orders")
    _one_error_line(
        cli("produce", "ordres", input="a\n", ok=False),
        "unknown topic 'ordres'",
        "sparklog topics create ordres",
    )


def test_reset_offsets_of_a_missing_group_is_refused_unless_asked(cli) -> None:
    cli("topics", "create", "orders")
    cli("produce", "orders", input="a\nb\n")
    cli(
        "groups",
        "reset-offsets",
        "billing",
        "-t",
        "orders",
        "--to-earliest",
        "--execute",
        "--create-group",
    )
    refused = cli(
        "groups",
        "reset-offsets",
        "biling",
        "-t",
        "orders",
        "--to-latest",
        "--execute",
        ok=False,
    )
    _one_error_line(refused, "group 'biling' does not exist", "'billing'", "--create-group")
    assert json.loads(cli("-o", "json", "groups", "list").out) == ["billing"]
    dry = cli("groups", "reset-offsets", "biling", "-t", "orders", "--to-latest")
    assert "does not exist" in dry.err and "dry run" in dry.err
    assert json.loads(cli("-o", "json", "groups", "list").out) == ["billing"]


def test_acls_remove_is_headed_as_removed(cli) -> None:
    cli("topics", "create", "orders")
    acl = ["--allow-principal", "User:bob", "--operation", "Read", "--topic", "orders"]
    cli("acls", "add", *acl)
    removed = cli("acls", "remove", *acl).out
    assert removed.splitlines()[0] == "removed 1 ACL:" and "User:bob" in removed
    assert cli("acls", "remove", *acl).out.strip() == "no ACL matched: nothing removed"
    assert "User:bob" not in cli("acls", "list").out
