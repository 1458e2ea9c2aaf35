"""ACLs on the Flight listener: each call checked as the Kafka API doing the same (issue 23).

One broker serves Flight with users (``flight_security_protocol = SASL_PLAINTEXT``)
and ``authorizer = "acl"``; ``ops`` is a super user, ``alice`` starts with no
ACLs.  Each case makes one call as alice through sparklog's own clients: it is
refused with the resource type's Kafka code, then, once the ACL Kafka would
need is granted, it succeeds (Admin's create_topic and alter_topic_config return
the topic's description, so they need DESCRIBE too).  Listings leave out what
alice may not describe.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from sparklog import Admin, Consumer, Producer
from sparklog.errors import (
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    SaslAuthenticationFailedError,
    SparklogError,
    TopicAuthorizationFailedError,
)
from sparklog.security import acls, users
from sparklog.storage.catalog import open_root
from tests.support.brokers import Cluster
from tests.support.waiting import wait_for

OPS = {"security_protocol": "SASL_PLAINTEXT", "sasl_plain_username": "ops",
       "sasl_plain_password": "ops-pw"}  # fmt: skip
ALICE = {**OPS, "sasl_plain_username": "alice", "sasl_plain_password": "alice-pw"}
TOPICS = ("doomed", "cfg", "grow", "shown", "prod", "cons", "offsets-of")
_names = itertools.count()


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    tmp_path = tmp_path_factory.mktemp("flight-acls")
    root = f"file://{tmp_path}/root"
    metadata = open_root(root, create=True).metadata
    users.create(metadata, "alice", "SCRAM-SHA-256", "alice-pw")
    users.create(metadata, "ops", "SCRAM-SHA-256", "ops-pw")
    cluster = Cluster(tmp_path, root)
    cluster.start(
        0, flight_security_protocol="SASL_PLAINTEXT", authorizer="acl", super_users="User:ops"
    )
    try:
        with Admin(cluster.address, **OPS) as admin:
            for name in TOPICS:
                admin.create_topic(name, 1)
        producer = Producer(cluster.address, **OPS)
        producer.send("cons", b"secret").get(30)
        producer.close()
        consumer = Consumer("cons", address=cluster.address, group_id="team",
                            auto_offset_reset="earliest", **OPS)  # fmt: skip
        wait_for(lambda: bool(consumer.poll_records(timeout_ms=200)), timeout_s=60,
                 what="ops reads 'cons' in group 'team'")  # fmt: skip
        consumer.commit()
        consumer.close()
        yield cluster
    finally:
        cluster.stop_all()


def _grant(cluster: Cluster, *bindings: dict[str, str]) -> None:
    acls.create(open_root(cluster.root).metadata, list(bindings))


def _admin(cluster: Cluster, call: Callable[[Admin], Any]) -> Callable[[], Any]:
    def run() -> Any:
        with Admin(cluster.address, retry_timeout_ms=2000, **ALICE) as admin:
            return call(admin)

    return run


def _produce(cluster: Cluster) -> Any:
    producer = Producer(cluster.address, retry_timeout_ms=2000, **ALICE)
    try:
        return producer.send("prod", b"by-alice").get(30)
    finally:
        producer.close()


def _consume(cluster: Cluster) -> list[bytes]:
    consumer = Consumer("cons", address=cluster.address, auto_offset_reset="earliest", **ALICE)
    try:
        got: list[bytes] = []
        for _ in range(20):
            got += [r.value for r in consumer.poll_records(timeout_ms=200)]
            if got:
                break
        return got
    finally:
        consumer.close()


CASES: list[tuple[str, type[SparklogError], list[tuple[str, str, str]], Callable[..., Any]]] = [
    # (case, refusal, grants (resource type, name, operation), the call as alice)
    ("create topic", TopicAuthorizationFailedError, [("TOPIC", "made-by-alice", "CREATE"),
     ("TOPIC", "made-by-alice", "DESCRIBE")],
     lambda c: _admin(c, lambda a: a.create_topic("made-by-alice", 1))()),
    ("delete topic", TopicAuthorizationFailedError, [("TOPIC", "doomed", "DELETE")],
     lambda c: _admin(c, lambda a: a.delete_topic("doomed"))()),
    ("alter config", TopicAuthorizationFailedError, [("TOPIC", "cfg", "ALTER_CONFIGS"),
     ("TOPIC", "cfg", "DESCRIBE")],
     lambda c: _admin(c, lambda a: a.alter_topic_config("cfg", {"retention.ms": "60000"}))()),
    ("add partitions", TopicAuthorizationFailedError, [("TOPIC", "grow", "ALTER")],
     lambda c: _admin(c, lambda a: a.add_partitions("grow", 2))()),
    ("describe topic", TopicAuthorizationFailedError, [("TOPIC", "shown", "DESCRIBE")],
     lambda c: _admin(c, lambda a: a.describe_topic("shown"))()),
    ("produce", TopicAuthorizationFailedError, [("TOPIC", "prod", "WRITE")], _produce),
    ("fetch", TopicAuthorizationFailedError, [("TOPIC", "cons", "READ")], _consume),
    ("describe group", GroupAuthorizationFailedError, [("GROUP", "team", "DESCRIBE")],
     lambda c: _admin(c, lambda a: a.describe_group("team"))()),
]  # fmt: skip


@pytest.mark.parametrize(
    ("refusal", "grants", "call"),
    [pytest.param(*case[1:], id=case[0]) for case in CASES],
)
def test_a_call_is_refused_until_its_acl_is_granted(
    secured: Cluster,
    refusal: type[SparklogError],
    grants: list[tuple[str, str, str]],
    call: Callable[[Cluster], Any],
) -> None:
    with pytest.raises(refusal):
        call(secured)
    _grant(secured, *(acls.binding(t, name, "User:alice", op) for t, name, op in grants))

    def succeeds() -> bool:
        try:
            call(secured)
        except refusal:
            return False  # the broker has not read the new ACL yet
        return True

    wait_for(succeeds, timeout_s=30, what=f"the call allowed after granting {grants}")


def test_listings_leave_out_what_the_caller_may_not_describe(secured: Cluster) -> None:
    name = f"listed-{next(_names)}"
    with Admin(secured.address, **OPS) as admin:
        admin.create_topic(name, 1)
        assert {"offsets-of", name} <= set(admin.list_topics())  # a super user sees all

    def listed() -> set[str]:
        with Admin(secured.address, **ALICE) as admin:
            return set(admin.list_topics())

    assert name not in listed() and "offsets-of" not in listed()
    _grant(secured, acls.binding("TOPIC", name, "User:alice", "DESCRIBE"))
    wait_for(lambda: name in listed(), timeout_s=30, what="alice's DESCRIBE on the new topic")
    assert "offsets-of" not in listed()  # never granted anything on it


def test_aborting_a_transaction_is_a_cluster_action(secured: Cluster) -> None:
    with pytest.raises(ClusterAuthorizationFailedError):
        _admin(secured, lambda a: a.abort_transaction("some-id"))()
    _grant(secured, acls.binding("CLUSTER", "kafka-cluster", "User:alice", "ALTER"))

    def allowed() -> bool:
        try:
            _admin(secured, lambda a: a.abort_transaction("some-id"))()
        except ClusterAuthorizationFailedError:
            return False
        except SparklogError:
            return True  # past the ACL: the id has no transaction
        return True

    wait_for(allowed, timeout_s=30, what="ALTER on the cluster applied")


def _cli_as(
    who: dict[str, str], cluster: Cluster, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "SPARKLOG_SECURITY_PROTOCOL": who["security_protocol"],
        "SPARKLOG_SASL_PLAIN_USERNAME": who["sasl_plain_username"],
        "SPARKLOG_SASL_PLAIN_PASSWORD": who["sasl_plain_password"],
    }
    return subprocess.run(
        [sys.executable, "-m", "sparklog.cli", "-a", cluster.address, *args],
        input=stdin, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_users_are_managed_through_a_broker_by_a_cluster_alterer(secured: Cluster) -> None:
    made = _cli_as(OPS, secured, "users", "create", "dave", "--password-file", "-",
                   "-m", "SCRAM-SHA-512", stdin="dave-pw")  # fmt: skip
    assert made.returncode == 0, made.stderr
    dave = {**OPS, "sasl_plain_username": "dave", "sasl_plain_password": "dave-pw"}
    with Admin(secured.address, **dave) as admin:  # dave logs in (he may describe nothing)
        assert "offsets-of" not in admin.list_topics()
    refused = _cli_as(dave, secured, "users", "create", "frank", "--password-file", "-",
                      stdin="frank-pw")  # fmt: skip
    assert refused.returncode != 0 and "CLUSTER_AUTHORIZATION_FAILED" in refused.stderr
    listed = _cli_as(OPS, secured, "-o", "json", "users", "list")
    assert listed.returncode == 0, listed.stderr
    assert {"user": "dave", "mechanisms": [{"mechanism": "SCRAM-SHA-512", "iterations": 4096}]} in (
        json.loads(listed.stdout)
    )
    assert "dave-pw" not in listed.stdout and "stored_key" not in listed.stdout
    gone = _cli_as(OPS, secured, "users", "delete", "dave")
    assert gone.returncode == 0, gone.stderr
    with pytest.raises(SaslAuthenticationFailedError), Admin(secured.address, **dave) as admin:
        admin.list_topics()


def test_mirror_links_through_a_broker_need_alter_to_change_and_describe_to_read(
    secured: Cluster, tmp_path
) -> None:
    users.create(open_root(secured.root).metadata, "erin", "SCRAM-SHA-256", "erin-pw")
    erin = {**OPS, "sasl_plain_username": "erin", "sasl_plain_password": "erin-pw"}

    def logs_in() -> bool:
        try:
            with Admin(secured.address, retry_timeout_ms=2000, **erin) as admin:
                admin.list_topics()
        except SaslAuthenticationFailedError:
            return False  # the broker has not read the new user yet
        return True

    wait_for(logs_in, timeout_s=30, what="erin's credentials at the broker")
    source = ("--source", f"file://{tmp_path}/src", "--topics", "orders")
    for args in (("mirror", "list"), ("mirror", "create", "dr", *source)):
        refused = _cli_as(erin, secured, *args)
        assert refused.returncode != 0 and "CLUSTER_AUTHORIZATION_FAILED" in refused.stderr
    made = _cli_as(OPS, secured, "mirror", "create", "dr", *source)
    assert made.returncode == 0, made.stderr
    _grant(secured, acls.binding("CLUSTER", "kafka-cluster", "User:erin", "DESCRIBE"))
    wait_for(
        lambda: "dr" in _cli_as(erin, secured, "mirror", "list").stdout,
        timeout_s=30,
        what="DESCRIBE on the cluster applied",
    )
    paused = _cli_as(erin, secured, "mirror", "pause", "dr")  # a change: ALTER, not DESCRIBE
    assert paused.returncode != 0 and "CLUSTER_AUTHORIZATION_FAILED" in paused.stderr
    gone = _cli_as(OPS, secured, "mirror", "delete", "dr")
    assert gone.returncode == 0, gone.stderr
