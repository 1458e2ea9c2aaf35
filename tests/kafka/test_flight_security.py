"""TLS and users on the Flight listener with sparklog's own clients and CLI.

The broker serves Flight with ``flight_security_protocol = "SASL_SSL"`` (the
certificate of tests/kafka/test_tls.py's fixture); clients pass kafka-python's
setting names, the CLI takes them from ``SPARKLOG_*`` variables.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
from collections.abc import Iterator

import pytest

from sparklog import Admin, Consumer, Producer
from sparklog.errors import (
    ClusterAuthorizationFailedError,
    InvalidConfigurationError,
    SaslAuthenticationFailedError,
)
from sparklog.security import users
from sparklog.storage.catalog import open_root
from tests.kafka.test_tls import certs  # noqa: F401  (the module's certificate fixture)
from tests.support.brokers import Cluster
from tests.support.waiting import wait_for


@pytest.fixture
def flight_tls(tmp_path: pathlib.Path, certs: dict[str, str]) -> Iterator[Cluster]:  # noqa: F811
    root = f"file://{tmp_path}/root"
    metadata = open_root(root, create=True).metadata
    users.create(metadata, "alice", "SCRAM-SHA-256", "alice-pw")
    users.create(metadata, "ops", "SCRAM-SHA-512", "ops-pw")
    cluster = Cluster(tmp_path, root)
    cluster.start(
        0,
        flight_security_protocol="SASL_SSL",
        ssl_certfile=certs["server.pem"],
        ssl_keyfile=certs["server.key"],
    )
    yield cluster
    cluster.stop_all()


def secure(certs: dict[str, str], user: str = "alice", password: str = "alice-pw") -> dict:  # noqa: F811
    return {
        "security_protocol": "SASL_SSL",
        "ssl_cafile": certs["ca.pem"],
        "sasl_plain_username": user,
        "sasl_plain_password": password,
    }


def test_producer_consumer_and_admin_over_tls_as_a_user(
    flight_tls: Cluster,
    certs: dict[str, str],  # noqa: F811
) -> None:
    with Admin(flight_tls.address, **secure(certs)) as admin:
        admin.create_topic("secure", 1)
    producer = Producer(flight_tls.address, **secure(certs))
    for i in range(5):
        producer.send("secure", f"v{i}".encode())
    producer.flush()
    producer.close()
    consumer = Consumer(
        "secure", address=flight_tls.address, auto_offset_reset="earliest", **secure(certs)
    )
    got: list[bytes] = []
    for _ in range(50):
        got += [r.value for r in consumer.poll_records(timeout_ms=500)]
        if len(got) >= 5:
            break
    consumer.close()
    assert got == [f"v{i}".encode() for i in range(5)]


def test_a_wrong_password_fails_at_once(flight_tls: Cluster, certs: dict[str, str]) -> None:  # noqa: F811
    wrong = Admin(flight_tls.address, **secure(certs, password="guess-pw"))
    with pytest.raises(SaslAuthenticationFailedError) as raised, wrong as admin:
        admin.list_topics()
    assert "guess-pw" not in str(raised.value)
    plain = Admin(flight_tls.address, retry_timeout_ms=1000)
    with pytest.raises(InvalidConfigurationError) as raised, plain as admin:  # no TLS
        admin.list_topics()
    assert "serves TLS" in str(raised.value)


def test_the_cli_takes_the_settings_from_the_environment(
    flight_tls: Cluster,
    certs: dict[str, str],  # noqa: F811
) -> None:
    env = {
        **os.environ,
        "SPARKLOG_SECURITY_PROTOCOL": "SASL_SSL",
        "SPARKLOG_SSL_CAFILE": certs["ca.pem"],
        "SPARKLOG_SASL_PLAIN_USERNAME": "ops",
        "SPARKLOG_SASL_PLAIN_PASSWORD": "ops-pw",
    }
    made = subprocess.run(
        [sys.executable, "-m", "sparklog.cli", "-a", flight_tls.address, "topics", "create", "t"],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    env["SPARKLOG_SASL_PLAIN_PASSWORD"] = "not-it"
    listed = subprocess.run(
        [sys.executable, "-m", "sparklog.cli", "-a", flight_tls.address, "topics", "list"],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert listed.returncode != 0 and "SASL_AUTHENTICATION_FAILED" in listed.stderr
    assert "not-it" not in listed.stderr


# -- issue 38, finding 2: every door is one door ----------------------------------------
ADMIN_PW = "admin-pw"
ANONYMOUS_FLIGHT = [
    # Flight left at its default: it follows the Kafka listener (SASL_PLAINTEXT)
    {},
    # Flight anonymous on purpose, no authorizer: users may not be changed from there
    {"flight_security_protocol": "PLAINTEXT"},
    # ... nor with ACLs where "no ACL found" would open the cluster to everyone
    {"flight_security_protocol": "PLAINTEXT", "authorizer": "acl",
     "allow_everyone_if_no_acl_found": True},
]  # fmt: skip


@pytest.mark.parametrize(
    "flight", ANONYMOUS_FLIGHT, ids=["follows-kafka", "plaintext", "acl-allow-everyone"]
)
def test_an_anonymous_flight_caller_cannot_take_over_a_kafka_user(
    tmp_path: pathlib.Path, flight: dict
) -> None:
    """An anonymous Flight caller replaces admin's password, then logs in as admin on the
    SASL Kafka listener: refused (CLUSTER_AUTHORIZATION_FAILED, or no anonymous Flight)."""
    from confluent_kafka import KafkaError
    from confluent_kafka import Producer as KafkaProducer

    root = f"file://{tmp_path}/root"
    users.create(open_root(root, create=True).metadata, "admin", "SCRAM-SHA-256", ADMIN_PW)
    cluster = Cluster(tmp_path, root)
    try:
        cluster.start(0, kafka_security_protocol="SASL_PLAINTEXT", **flight)
        refused = pytest.raises((ClusterAuthorizationFailedError, SaslAuthenticationFailedError))
        with refused, Admin(cluster.address, retry_timeout_ms=2000) as admin:
            admin.create_user("admin", "attacker-pw")
        if flight:  # anonymous Flight still serves what does not change the cluster
            with Admin(cluster.address) as admin:
                admin.create_topic("anyone", 1)
        errors: list[KafkaError] = []
        taken = KafkaProducer(
            {
                "bootstrap.servers": cluster.kafka_bootstrap,
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "SCRAM-SHA-256",
                "sasl.username": "admin",
                "sasl.password": "attacker-pw",
                "error_cb": errors.append,
            }
        )

        def login_failed() -> list[KafkaError]:
            taken.poll(0.1)
            return errors

        wait_for(login_failed, timeout_s=30, what="admin's login with the attacker's password")
        assert errors[0].code() == KafkaError._AUTHENTICATION
    finally:
        cluster.stop_all()
    with Admin(root) as admin:  # admin's credential is the one the operator set
        assert admin.list_users() == {"admin": [("SCRAM-SHA-256", 4096)]}
