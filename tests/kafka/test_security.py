"""SASL on the Kafka listener with real clients: PLAIN, SCRAM-SHA-256/512, wrong passwords.

Users are created as an operator would (``sparklog users create`` on the root,
or Kafka's AlterUserScramCredentials through the listener); confluent-kafka,
kafka-python and aiokafka then produce and consume as those users.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import pathlib
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.request import MetadataRequest

from tests.kafka.wire import Connection
from tests.support.brokers import Cluster

PASSWORD = "s3cret-pa55word"
SASL_CONFIG: dict[str, Any] = {"kafka_security_protocol": "SASL_PLAINTEXT"}


def sparklog_cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sparklog.cli", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def sasl_cluster(tmp_path: pathlib.Path) -> Iterator[Cluster]:
    """One SASL_PLAINTEXT broker; users alice (both SCRAM mechanisms) and bob (SHA-256)."""
    cluster = sasl_users_cluster(tmp_path)
    cluster.start(0, **SASL_CONFIG)
    yield cluster
    cluster.stop_all()


def sasl_users_cluster(tmp_path: pathlib.Path) -> Cluster:
    """A cluster (no broker yet) on a root with users alice (PASSWORD) and bob (pw-b)."""
    root = f"file://{tmp_path}/root"
    secret = tmp_path / "password"
    secret.write_text(PASSWORD + "\n")
    made = sparklog_cli(
        "-a", root, "users", "create", "alice", "--password-file", str(secret),
        "-m", "SCRAM-SHA-256", "-m", "SCRAM-SHA-512",
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    made = sparklog_cli("-a", root, "users", "create", "bob", "--password-file", "-", stdin="pw-b")
    assert made.returncode == 0, made.stderr
    return Cluster(tmp_path, root)


def confluent_auth(mechanism: str, user: str = "alice", password: str = PASSWORD) -> dict:
    return {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": password,
    }


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_confluent_kafka_produces_and_consumes_as_a_user(
    sasl_cluster: Cluster, mechanism: str
) -> None:
    bootstrap = sasl_cluster.kafka_bootstrap
    auth = confluent_auth(mechanism)
    admin = AdminClient({"bootstrap.servers": bootstrap, **auth})
    admin.create_topics([NewTopic("secure", 1, 1)])["secure"].result(timeout=30)
    producer = Producer({"bootstrap.servers": bootstrap, **auth})
    for i in range(10):
        producer.produce("secure", f"v{i}".encode())
    assert producer.flush(30) == 0
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "g", "enable.auto.commit": False, **auth}
    )
    consumer.assign([TopicPartition("secure", 0, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(got) < 10 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None:
            assert msg.error() is None, msg.error()
            got.append(msg.value())
    consumer.close()
    assert got == [f"v{i}".encode() for i in range(10)]


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_kafka_python_produces_and_consumes_as_a_user(
    sasl_cluster: Cluster, mechanism: str
) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KpTopicPartition

    auth = {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": mechanism,
        "sasl_plain_username": "alice",
        "sasl_plain_password": PASSWORD,
    }
    bootstrap = sasl_cluster.kafka_bootstrap
    producer = KafkaProducer(bootstrap_servers=bootstrap, **auth)
    for i in range(5):
        producer.send("kp", f"v{i}".encode())
    producer.flush(30)
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, consumer_timeout_ms=10_000, **auth)
    consumer.assign([KpTopicPartition("kp", 0)])
    consumer.seek(KpTopicPartition("kp", 0), 0)
    got = [m.value for _, m in zip(range(5), consumer, strict=False)]
    consumer.close()
    assert got == [f"v{i}".encode() for i in range(5)]


def test_aiokafka_produces_and_consumes_as_a_user(sasl_cluster: Cluster) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka import TopicPartition as AioTopicPartition

    auth = {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "SCRAM-SHA-256",
        "sasl_plain_username": "bob",
        "sasl_plain_password": "pw-b",
    }
    bootstrap = sasl_cluster.kafka_bootstrap

    async def run() -> list[bytes]:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, **auth)
        await producer.start()
        try:
            for i in range(5):
                await producer.send_and_wait("aio", f"v{i}".encode())
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, **auth)
        await consumer.start()
        try:
            tp = AioTopicPartition("aio", 0)
            consumer.assign([tp])
            consumer.seek(tp, 0)
            got = []
            while len(got) < 5:
                msg = await asyncio.wait_for(consumer.getone(), 30)
                got.append(msg.value)
            return got
        finally:
            await consumer.stop()

    assert asyncio.run(run()) == [f"v{i}".encode() for i in range(5)]


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256"])
def test_a_wrong_password_fails_fast_with_sasl_authentication_failed(
    sasl_cluster: Cluster, mechanism: str
) -> None:
    errors: list[KafkaError] = []
    wrong = "wrong-Pa55-" + mechanism
    producer = Producer(
        {
            "bootstrap.servers": sasl_cluster.kafka_bootstrap,
            **confluent_auth(mechanism, password=wrong),
            "error_cb": errors.append,
        }
    )
    deadline = time.monotonic() + 20
    while not errors and time.monotonic() < deadline:
        producer.poll(0.1)
    assert errors, "no error reported"
    assert errors[0].code() == KafkaError._AUTHENTICATION
    assert "authentication failed" in errors[0].str().lower()
    log = sasl_cluster.brokers[0].log_text()
    assert wrong not in log and PASSWORD not in log


def test_kafka_python_wrong_password_raises_authentication_failed(
    sasl_cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    """kafka-python 3 meets SASL_AUTHENTICATION_FAILED (58) and retries the login until
    its bootstrap timeout, then raises; the password appears nowhere."""
    from kafka import KafkaAdminClient
    from kafka.errors import KafkaError as KpError

    with caplog.at_level(logging.INFO, logger="kafka"), pytest.raises(KpError) as raised:
        KafkaAdminClient(
            bootstrap_servers=sasl_cluster.kafka_bootstrap,
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="SCRAM-SHA-512",
            sasl_plain_username="alice",
            sasl_plain_password="nope-nope",
            request_timeout_ms=10_000,
            bootstrap_timeout_ms=3_000,  # its default waits 30 s for a login that cannot pass
        )
    messages = [record.getMessage() for record in caplog.records]
    assert any("[Error 58] SaslAuthenticationFailedError" in m for m in messages), messages
    assert "nope-nope" not in str(raised.value)
    assert not any("nope-nope" in m for m in messages)


def test_a_plaintext_client_on_a_sasl_listener_is_disconnected_at_once(
    sasl_cluster: Cluster,
) -> None:
    conn = Connection(sasl_cluster.brokers[0].kafka_address)
    versions = conn.call(ApiVersionsRequest(client_software_name="t", client_software_version="1"))
    assert versions.error_code == ErrorCode.none
    assert {17, 36} <= {k.api_key for k in versions.api_keys}
    conn.send_frame(
        conn.encode(
            MetadataRequest(
                topics=None,
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=False,
            )
        )
    )
    assert conn.read_frame() is None
    conn.close()


@pytest.mark.parametrize("password", [PASSWORD, "wrong"])
def test_sasl_handshake_v0_is_followed_by_raw_tokens(sasl_cluster: Cluster, password: str) -> None:
    """SaslHandshake v0 (clients without SaslAuthenticate, librdkafka's feature check):
    the PLAIN token and its answer are raw size-prefixed frames, as in Kafka."""
    from kio.schema.sasl_handshake.v0.request import SaslHandshakeRequest

    conn = Connection(sasl_cluster.brokers[0].kafka_address)
    assert conn.call(SaslHandshakeRequest(mechanism="PLAIN")).error_code == ErrorCode.none
    conn.send_frame(b"\x00alice\x00" + password.encode())
    if password != PASSWORD:
        assert conn.read_frame() is None  # a failed login closes the connection
        conn.close()
        return
    assert conn.read_frame() == b""  # PLAIN's empty server token
    metadata = conn.call(
        MetadataRequest(
            topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False
        )
    )
    assert [b.node_id for b in metadata.brokers] == [0]
    conn.close()


def test_users_are_managed_through_the_listener_and_the_cli(
    sasl_cluster: Cluster, tmp_path: pathlib.Path
) -> None:
    from confluent_kafka.admin import (
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialDeletion,
        UserScramCredentialUpsertion,
    )

    bootstrap = sasl_cluster.kafka_bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap, **confluent_auth("SCRAM-SHA-256")})
    upsert = UserScramCredentialUpsertion(
        "carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), b"carol-pw"
    )
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(timeout=30)
    described = admin.describe_user_scram_credentials(["carol"])["carol"].result(timeout=30)
    infos = described.scram_credential_infos
    assert [(i.mechanism, i.iterations) for i in infos] == [(ScramMechanism.SCRAM_SHA_512, 8192)]
    # carol logs in with the credential the listener stored
    carol = AdminClient(
        {"bootstrap.servers": bootstrap, **confluent_auth("SCRAM-SHA-512", "carol", "carol-pw")}
    )
    assert carol.list_topics(timeout=30).brokers
    listed = sparklog_cli("-a", sasl_cluster.root, "-o", "json", "users", "list")
    assert listed.returncode == 0, listed.stderr
    assert {u["user"] for u in __import__("json").loads(listed.stdout)} == {
        "alice",
        "bob",
        "carol",
    }
    assert "stored_key" not in listed.stdout and "salt" not in listed.stdout
    delete = UserScramCredentialDeletion("carol", ScramMechanism.SCRAM_SHA_512)
    for future in admin.alter_user_scram_credentials([delete]).values():
        future.result(timeout=30)
    gone = sparklog_cli("-a", sasl_cluster.root, "users", "delete", "bob")
    assert gone.returncode == 0, gone.stderr
    again = sparklog_cli("-a", sasl_cluster.root, "users", "delete", "bob")
    assert again.returncode != 0 and "no SCRAM credential" in again.stderr
    help_text = sparklog_cli("users", "create", "--help").stdout
    assert "--password-file" in help_text and "--password " not in help_text


def test_a_plaintext_listener_off_loopback_without_an_authorizer_is_refused() -> None:
    from sparklog.broker_lite.config import load_config
    from sparklog.errors import InvalidConfigurationError

    with pytest.raises(InvalidConfigurationError, match="allow_insecure_listener"):
        load_config(None, {"kafka_listen": "10.1.2.3:9092"}, env={})
    assert load_config(
        None, {"kafka_listen": "10.1.2.3:9092", "allow_insecure_listener": True}, env={}
    )
    assert load_config(
        None,
        {"kafka_listen": "10.1.2.3:9092", "kafka_security_protocol": "SASL_PLAINTEXT"},
        env={},
    )


@pytest.mark.parametrize(
    ("settings", "key"),
    [
        ({"listen": "10.1.2.3:8815"}, "'listen' = '10.1.2.3:8815'"),
        ({"metrics_listen": "0.0.0.0:0"}, "'metrics_listen' = '0.0.0.0:0'"),
        # Kafka secured, Flight anonymous on purpose: not off loopback without an authorizer
        (
            {"listen": "10.1.2.3:8815", "kafka_security_protocol": "SASL_PLAINTEXT",
             "flight_security_protocol": "PLAINTEXT"},
            "flight_security_protocol = PLAINTEXT",
        ),
        # TLS without client certificates asks no one who they are
        (
            {"kafka_listen": "10.1.2.3:9092", "kafka_security_protocol": "SSL",
             "ssl_certfile": "b.pem", "ssl_keyfile": "b.key"},
            "ssl_client_auth = none",
        ),
    ],
)  # fmt: skip
def test_every_listener_off_loopback_without_authentication_is_refused(
    settings: dict, key: str
) -> None:
    """Issue 38, finding 2: the Flight listener and the metrics endpoint, as Kafka's."""
    from sparklog.broker_lite.config import load_config
    from sparklog.errors import InvalidConfigurationError

    with pytest.raises(InvalidConfigurationError) as refused:
        load_config(None, settings, env={})
    assert key in str(refused.value) and "allow_insecure_listener = true" in str(refused.value)
    assert load_config(None, {**settings, "allow_insecure_listener": True}, env={})


def test_flight_follows_the_kafka_listener_unless_its_own_key_says() -> None:
    from sparklog.broker_lite.config import load_config

    def flight(**settings: str) -> tuple[str, bool]:
        config = load_config(None, settings, env={})
        return config.flight_protocol, config.authenticates

    assert flight() == ("PLAINTEXT", False)
    assert flight(kafka_security_protocol="SASL_PLAINTEXT") == ("SASL_PLAINTEXT", True)
    explicit = {
        "kafka_security_protocol": "SASL_PLAINTEXT",
        "flight_security_protocol": "PLAINTEXT",
    }
    assert flight(**explicit) == ("PLAINTEXT", True)
    # secured listeners off loopback, and Flight following Kafka's SASL there, start
    assert load_config(
        None,
        {"listen": "10.1.2.3:8815", "kafka_listen": "10.1.2.3:9092",
         "kafka_security_protocol": "SASL_PLAINTEXT"},
        env={},
    )  # fmt: skip


def _plain_login(address: str, user: str = "alice", password: str = PASSWORD) -> Connection:
    """A raw connection logged in with SaslHandshake v1 and SaslAuthenticate (PLAIN)."""
    from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
    from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

    conn = Connection(address)
    assert conn.call(SaslHandshakeRequest(mechanism="PLAIN")).error_code == ErrorCode.none
    token = f"\0{user}\0{password}".encode()
    assert conn.call(SaslAuthenticateRequest(auth_bytes=token)).error_code == ErrorCode.none
    return conn


def _metadata_brokers(conn: Connection) -> list[int]:
    request = MetadataRequest(
        topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False
    )
    return [b.node_id for b in conn.call(request).brokers]


def _not_logged_in(address: str) -> socket.socket:
    """A connection that will never log in, its ApiVersions answered (its reader runs)."""
    conn = Connection(address)
    versions = conn.call(ApiVersionsRequest(client_software_name="t", client_software_version="1"))
    assert versions.error_code == ErrorCode.none
    return conn.sock


def _stall(sock: socket.socket, announced: int, sent: int) -> None:
    """Announce a frame of ``announced`` bytes, send ``sent`` of them and stall."""
    # refused on the size prefix while the body is on its way: the send may fail
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        sock.sendall(struct.pack(">i", announced) + b"\x00\x11\x00\x01" + bytes(sent - 4))


def _closed_by_broker(sock: socket.socket, timeout_s: float = 30) -> bool:
    sock.settimeout(timeout_s)
    try:
        while sock.recv(65536):
            pass
        return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_unauthenticated_frames_cannot_lock_tenants_out(tmp_path: pathlib.Path) -> None:
    """Issue 38, finding 1: connections that never log in announce 100 MiB frames (refused
    on the size prefix, Kafka's sasl.server.max.receive.size) or hold frames under that cap
    (their own memory budget): alice, logged in before and logging in during, is served."""
    cluster = sasl_users_cluster(tmp_path)
    try:
        # room for two half-sent frames of the attackers below, were they charged to tenants
        broker = cluster.start(0, **SASL_CONFIG, queued_max_request_bytes=1_048_576)
        _lock_out_attempt(broker.kafka_address)
        refusals = [
            line
            for line in broker.log_lines()
            if line.get("msg") == "kafka connection closed: request frame over a limit"
        ]
    finally:
        cluster.stop_all()
    assert refusals and all(line["level"] == "WARNING" for line in refusals)
    first = refusals[0]
    assert first["limit"] == "sasl_server_max_receive_size"
    assert first["size"] == 100 * 1024 * 1024
    assert "127.0.0.1" in first["peer"] and "sasl_server_max_receive_size=524288" in first["error"]


def _lock_out_attempt(address: str | None) -> None:
    assert address is not None
    before = _plain_login(address)
    assert _metadata_brokers(before) == [0]
    # two frames of 512 KiB, all but one byte sent: the whole 1 MiB were they tenants' memory
    fillers = [_not_logged_in(address) for _ in range(2)]
    huge = [_not_logged_in(address) for _ in range(5)]
    try:
        for sock in fillers:
            _stall(sock, 524_288, 524_287)
        # served: before the fix each request waited 10 s for memory, then was closed
        assert _metadata_brokers(before) == [0]
        for _ in range(3):
            during = _plain_login(address)
            assert _metadata_brokers(during) == [0]
            during.close()
        for sock in huge:  # 100 MiB announced: closed on the size prefix, before its body
            _stall(sock, 100 * 1024 * 1024, 4)
        for sock in huge:
            assert _closed_by_broker(sock)
    finally:
        for sock in [*fillers, *huge]:
            sock.close()
        before.close()
