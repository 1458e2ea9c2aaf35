"""Logins as Kafka guards them (#38.9), over the real listeners where the finding is a wire one.

* a failed SASL login gets its failure answer, then the connection is closed
  ``connection_failed_authentication_delay_ms`` later, reading nothing
  meanwhile (Kafka's ``connection.failed.authentication.delay.ms``); a wrong
  Flight basic-auth login waits as long for its UNAUTHENTICATED answer;
* a wrong password costs the same PBKDF2 runs for a user who does not exist as
  for one who does (PLAIN, Flight basic auth), so login time names no users;
* a SCRAM client-first message asking for an authorization id other than its
  user is refused, as Kafka's ScramSaslServer refuses it.
"""

from __future__ import annotations

import base64
import pathlib
import time
import types
from collections.abc import Iterator
from typing import Any

import pyarrow.flight as flight
import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

from sparklog.broker_lite import config as broker_config
from sparklog.broker_lite.flight_security import BasicAuth
from sparklog.broker_lite.kafka import sasl
from sparklog.errors import InvalidConfigurationError, SaslAuthenticationFailedError
from sparklog.security import scram, users
from sparklog.storage.catalog import open_root
from tests.kafka.wire import Connection
from tests.support.brokers import Cluster

PASSWORD = "alice-Pa55"
DELAY_MS = 1500
SASL_FAILED = 58


@pytest.fixture
def root(tmp_path: pathlib.Path) -> str:
    """A root with alice (both SCRAM mechanisms) and bob (SCRAM-SHA-512 only)."""
    url = f"file://{tmp_path}/root"
    metadata = open_root(url, create=True).metadata
    for mechanism in scram.MECHANISMS:
        users.create(metadata, "alice", mechanism, PASSWORD)
    users.create(metadata, "bob", "SCRAM-SHA-512", "bob-Pa55")
    return url


@pytest.fixture
def cluster(tmp_path: pathlib.Path, root: str) -> Iterator[Cluster]:
    cluster = Cluster(tmp_path, root)
    cluster.start(
        0,
        kafka_security_protocol="SASL_PLAINTEXT",
        connection_failed_authentication_delay_ms=DELAY_MS,
    )
    yield cluster
    cluster.stop_all()


def _authenticate(conn: Connection, token: bytes) -> Any:
    return conn.call(SaslAuthenticateRequest(auth_bytes=token))


def test_a_failed_login_is_answered_then_closed_after_the_delay(cluster: Cluster) -> None:
    conn = Connection(cluster.brokers[0].kafka_address)
    assert conn.call(SaslHandshakeRequest(mechanism="PLAIN")).error_code == 0
    failed = _authenticate(conn, b"\x00alice\x00guess-1")
    answered = time.monotonic()
    assert failed.error_code == SASL_FAILED
    # the next request is not read: no answer, only the close, and not before the delay
    conn.send_frame(conn.encode(ApiVersionsRequest(client_software_name="t",
                                                   client_software_version="1")))  # fmt: skip
    assert conn.read_frame() is None
    assert time.monotonic() - answered >= DELAY_MS / 1000 * 0.95
    conn.close()
    # a right password on a new connection is not delayed by the earlier failure
    conn = Connection(cluster.brokers[0].kafka_address)
    assert conn.call(SaslHandshakeRequest(mechanism="PLAIN")).error_code == 0
    assert _authenticate(conn, b"\x00alice\x00" + PASSWORD.encode()).error_code == 0
    conn.close()


def test_a_wrong_flight_login_waits_the_delay(tmp_path: pathlib.Path, root: str) -> None:
    cluster = Cluster(tmp_path, root)
    cluster.start(
        0,
        flight_security_protocol="SASL_PLAINTEXT",
        connection_failed_authentication_delay_ms=DELAY_MS,
    )
    try:
        client = flight.FlightClient(f"grpc://{cluster.brokers[0].location}")
        wrong = base64.b64encode(b"alice:guess-2")
        options = flight.FlightCallOptions(headers=[(b"authorization", b"Basic " + wrong)])
        started = time.monotonic()
        with pytest.raises(flight.FlightUnauthenticatedError):
            list(client.list_actions(options=options))
        assert time.monotonic() - started >= DELAY_MS / 1000 * 0.95
        client.close()
    finally:
        cluster.stop_all()


def test_the_delay_is_checked_against_the_idle_timeout() -> None:
    with pytest.raises(InvalidConfigurationError) as raised:
        broker_config.load_config(
            overrides={
                "connection_failed_authentication_delay_ms": 600_000,
                "connections_max_idle_ms": 600_000,
            }
        )
    assert "connection_failed_authentication_delay_ms" in str(raised.value)
    assert "less than connections_max_idle_ms" in str(raised.value)
    with pytest.raises(InvalidConfigurationError) as raised:
        broker_config.load_config(overrides={"connection_failed_authentication_delay_ms": -1})
    assert "connection_failed_authentication_delay_ms" in str(raised.value)


@pytest.fixture
def pbkdf2_runs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The mechanisms of every PBKDF2 the SCRAM module runs from now on (it still runs)."""
    scram.matching_mechanism({}, "made once: the decoy credentials")
    runs: list[str] = []
    real = scram.salted_password

    def counted(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
        runs.append(f"{mechanism}x{iterations}")
        return real(mechanism, password, salt, iterations)

    monkeypatch.setattr(scram, "salted_password", counted)
    return runs


def _broker(root: str) -> Any:
    return types.SimpleNamespace(
        root=open_root(root),
        config=broker_config.load_config(overrides={"flight_security_protocol": "SASL_PLAINTEXT"}),
    )


def _runs_for(pbkdf2_runs: list[str], check: Any) -> list[str]:
    pbkdf2_runs.clear()
    check()
    return sorted(pbkdf2_runs)


def test_a_wrong_password_costs_the_same_for_users_who_do_not_exist(
    root: str, pbkdf2_runs: list[str]
) -> None:
    broker = _broker(root)

    def plain(user: str) -> Any:
        def check() -> None:
            with pytest.raises(SaslAuthenticationFailedError):
                sasl._check_plain(broker, b"\x00" + user.encode() + b"\x00wrong")

        return check

    auth = BasicAuth(broker)

    def basic(user: str) -> Any:
        header = "Basic " + base64.b64encode(f"{user}:wrong".encode()).decode()
        return lambda: auth._principal(header)

    for login in (plain, basic):
        known = _runs_for(pbkdf2_runs, login("alice"))
        assert known == ["SCRAM-SHA-256x4096", "SCRAM-SHA-512x4096"]
        assert _runs_for(pbkdf2_runs, login("bob")) == known
        assert _runs_for(pbkdf2_runs, login("nobody")) == known


def _scram_first(conn: Connection, first: bytes) -> Any:
    assert conn.call(SaslHandshakeRequest(mechanism="SCRAM-SHA-256")).error_code == 0
    return _authenticate(conn, first)


def test_a_scram_authzid_other_than_the_user_is_refused(cluster: Cluster) -> None:
    conn = Connection(cluster.brokers[0].kafka_address)
    refused = _scram_first(conn, b"n,a=bob,n=alice,r=abcdefgh")
    assert refused.error_code == SASL_FAILED
    assert "authorization id that is different from username" in refused.error_message
    conn.close()
    conn = Connection(cluster.brokers[0].kafka_address)
    same = _scram_first(conn, b"n,a=alice,n=alice,r=abcdefgh")
    assert same.error_code == 0 and same.auth_bytes.startswith(b"r=abcdefgh")
    conn.close()
