"""TLS on the Kafka listener: SASL_SSL and SSL with client certificates, real clients.

Certificates are made by the test with the ``openssl`` command: a CA, the
broker's certificate for 127.0.0.1, and a client certificate for CN=alice.
"""

from __future__ import annotations

import asyncio
import pathlib
import ssl
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from sparklog.security import acls, users
from sparklog.storage.catalog import open_root
from tests.kafka.wire import Connection
from tests.support.brokers import Cluster

PASSWORD = "tls-pa55"


def _openssl(*args: str, cwd: pathlib.Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """PEM files: ca, server cert/key (127.0.0.1), client cert/key (CN=alice,O=team-a)."""
    d = tmp_path_factory.mktemp("certs")
    _openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
        "-days", "2", "-subj", "/CN=sparklog-test-ca", cwd=d,
    )  # fmt: skip
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    for name, subject, ext in (
        ("server", "/CN=localhost", ["-extfile", "san.ext"]),
        ("client", "/O=team-a/CN=alice", []),
    ):
        _openssl(
            "req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key",
            "-out", f"{name}.csr", "-subj", subject, cwd=d,
        )  # fmt: skip
        _openssl(
            "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", f"{name}.pem", "-days", "2", *ext, cwd=d,
        )  # fmt: skip
    return {name: str(d / name) for name in ("ca.pem", "server.pem", "server.key",
                                              "client.pem", "client.key")}  # fmt: skip


def _tls_config(certs: dict[str, str], **extra: Any) -> dict[str, Any]:
    return {
        "ssl_certfile": certs["server.pem"],
        "ssl_keyfile": certs["server.key"],
        "ssl_cafile": certs["ca.pem"],
        **extra,
    }


@pytest.fixture
def sasl_ssl(tmp_path: pathlib.Path, certs: dict[str, str]) -> Iterator[Cluster]:
    root = f"file://{tmp_path}/root"
    metadata = open_root(root, create=True).metadata
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        users.create(metadata, "alice", mechanism, PASSWORD)
    cluster = Cluster(tmp_path, root)
    cluster.start(0, **_tls_config(certs, kafka_security_protocol="SASL_SSL"))
    yield cluster
    cluster.stop_all()


def _round_trip(bootstrap: str, options: dict[str, Any], topic: str) -> list[bytes]:
    producer = Producer({"bootstrap.servers": bootstrap, **options})
    for i in range(5):
        producer.produce(topic, f"v{i}".encode())
    assert producer.flush(30) == 0
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "g", "enable.auto.commit": False, **options}
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(got) < 5 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None:
            assert msg.error() is None, msg.error()
            got.append(msg.value())
    consumer.close()
    return got


def test_confluent_kafka_over_sasl_ssl(sasl_ssl: Cluster, certs: dict[str, str]) -> None:
    options = {
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": certs["ca.pem"],
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "alice",
        "sasl.password": PASSWORD,
    }
    got = _round_trip(sasl_ssl.kafka_bootstrap, options, "secure")
    assert got == [f"v{i}".encode() for i in range(5)]


def test_kafka_python_and_aiokafka_over_sasl_ssl(sasl_ssl: Cluster, certs: dict[str, str]) -> None:
    from aiokafka import AIOKafkaProducer
    from kafka import KafkaProducer

    producer = KafkaProducer(
        bootstrap_servers=sasl_ssl.kafka_bootstrap,
        security_protocol="SASL_SSL",
        ssl_cafile=certs["ca.pem"],
        sasl_mechanism="PLAIN",
        sasl_plain_username="alice",
        sasl_plain_password=PASSWORD,
    )
    producer.send("kp", b"from-kafka-python").get(timeout=30)
    producer.close()

    async def aio() -> None:
        context = ssl.create_default_context(cafile=certs["ca.pem"])
        p = AIOKafkaProducer(
            bootstrap_servers=sasl_ssl.kafka_bootstrap,
            security_protocol="SASL_SSL",
            ssl_context=context,
            sasl_mechanism="SCRAM-SHA-256",
            sasl_plain_username="alice",
            sasl_plain_password=PASSWORD,
        )
        await p.start()
        try:
            await p.send_and_wait("kp", b"from-aiokafka")
        finally:
            await p.stop()

    asyncio.run(aio())


def test_kcat_over_sasl_ssl_with_scram_and_a_wrong_password(
    sasl_ssl: Cluster, certs: dict[str, str]
) -> None:
    """kcat (Debian's, librdkafka's C client) produces and consumes as alice over SASL_SSL."""
    from tests.kafka.test_compat_kcat import kcat

    secure = [
        "-b", sasl_ssl.kafka_bootstrap, "-X", "security.protocol=SASL_SSL",
        "-X", f"ssl.ca.location={certs['ca.pem']}", "-X", "sasl.mechanism=SCRAM-SHA-256",
        "-X", "sasl.username=alice",
    ]  # fmt: skip
    kcat(*secure, "-X", f"sasl.password={PASSWORD}", "-P", "-t", "kcat-tls", stdin="a\nb\n")
    read = kcat(
        *secure, "-X", f"sasl.password={PASSWORD}",
        "-C", "-t", "kcat-tls", "-o", "beginning", "-e", "-f", "%s@%o\n",
    )  # fmt: skip
    assert read.splitlines() == ["a@0", "b@1"]
    wrong = subprocess.run(
        ["kcat", *secure, "-X", "sasl.password=wrong", "-L", "-m", "5"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert wrong.returncode != 0
    assert "Authentication failed" in wrong.stderr or "SASL" in wrong.stderr, wrong.stderr
    assert "wrong" not in "".join(str(line) for line in sasl_ssl.brokers[0].log_lines())


def test_a_plaintext_client_on_a_tls_listener_is_disconnected(sasl_ssl: Cluster) -> None:
    conn = Connection(sasl_ssl.brokers[0].kafka_address)
    conn.send_frame(b"\x00\x12\x00\x03\x00\x00\x00\x01\xff\xff\x00\x00\x00")
    assert conn.read_frame() is None
    conn.close()


def test_ssl_with_required_client_certificates_and_their_principal(
    tmp_path: pathlib.Path, certs: dict[str, str]
) -> None:
    root = f"file://{tmp_path}/root"
    metadata = open_root(root, create=True).metadata
    acls.create(
        metadata,
        [acls.binding("TOPIC", "team-a.", "User:CN=alice,O=team-a", op, pattern_type="PREFIXED")
         for op in ("WRITE", "READ", "CREATE")]
        + [acls.binding("GROUP", "g", "User:CN=alice,O=team-a", "READ")],
    )  # fmt: skip
    cluster = Cluster(tmp_path, root)
    cluster.start(
        0,
        **_tls_config(
            certs, kafka_security_protocol="SSL", ssl_client_auth="required", authorizer="acl"
        ),
    )
    try:
        with_cert = {
            "security.protocol": "SSL",
            "ssl.ca.location": certs["ca.pem"],
            "ssl.certificate.location": certs["client.pem"],
            "ssl.key.location": certs["client.key"],
        }
        got = _round_trip(cluster.kafka_bootstrap, with_cert, "team-a.events")
        assert got == [f"v{i}".encode() for i in range(5)]
        # the certificate's principal may not write elsewhere
        errors: list[Any] = []
        producer = Producer(
            {"bootstrap.servers": cluster.kafka_bootstrap, "message.timeout.ms": 10_000,
             **with_cert}
        )  # fmt: skip
        producer.produce("payroll", b"x", on_delivery=lambda err, msg: errors.append(err))
        producer.flush(30)
        assert errors and errors[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
        # no client certificate: the handshake fails
        failures: list[KafkaError] = []
        anonymous = Producer(
            {
                "bootstrap.servers": cluster.kafka_bootstrap,
                "security.protocol": "SSL",
                "ssl.ca.location": certs["ca.pem"],
                "error_cb": failures.append,
            }
        )
        deadline = time.monotonic() + 20
        while not failures and time.monotonic() < deadline:
            anonymous.poll(0.1)
        assert failures
        key_text = pathlib.Path(certs["server.key"]).read_text()
        assert key_text.splitlines()[1] not in cluster.brokers[0].log_text()
    finally:
        cluster.stop_all()
