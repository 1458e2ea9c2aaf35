"""No one host or tenant holds every connection (#38.3), over the real Kafka listener.

* ``max_connections_per_ip`` defaults to a quarter of ``max_connections`` (256
  of 1,024): the 257th connection from one address is closed at once;
* ``max_connections_per_principal``: a login past the cap is closed without its
  success answer (and logged); other tenants and super users still log in, and
  a connection closed gives its place back;
* ``max_connection_creation_rate`` (Kafka's ``max.connection.creation.rate``):
  past the rate the listener waits before accepting; measured only as a lower
  bound on the time to open more connections than one second's worth.
"""

from __future__ import annotations

import pathlib
import time

from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

from sparklog.broker_lite.config import load_config
from tests.kafka.test_security import _plain_login
from tests.kafka.wire import Connection
from tests.security.tenants import tenants_root
from tests.support.brokers import Cluster
from tests.support.waiting import wait_for

API_VERSIONS = ApiVersionsRequest(client_software_name="t", client_software_version="1")


def _answered(address: str) -> Connection | None:
    """A new connection whose ApiVersions is answered, or None if the broker closed it."""
    conn = Connection(address, timeout_s=10)
    conn.send_frame(conn.encode(API_VERSIONS))
    if conn.read_frame() is None:
        conn.close()
        return None
    return conn


def test_one_address_gets_a_quarter_of_the_connections(tmp_path: pathlib.Path) -> None:
    config = load_config(overrides={}, env={})
    assert config.max_connections_per_ip * 4 == config.max_connections
    cluster = Cluster(tmp_path, f"file://{tmp_path}/root")
    address = cluster.start(0).kafka_address
    assert address is not None
    held: list[Connection] = []
    try:
        for _ in range(config.max_connections_per_ip):
            conn = _answered(address)
            assert conn is not None
            held.append(conn)
        assert _answered(address) is None
    finally:
        for conn in held:
            conn.close()
        cluster.stop_all()


def _login_refused(address: str, user: str) -> bool:
    """A PLAIN login as ``user`` is closed by the broker instead of answered."""
    conn = Connection(address, timeout_s=10)
    try:
        assert conn.call(SaslHandshakeRequest(mechanism="PLAIN")).error_code == 0
        conn.send_frame(
            conn.encode(SaslAuthenticateRequest(auth_bytes=f"\0{user}\0{user}-pw".encode()))
        )
        return conn.read_frame() is None
    finally:
        conn.close()


def test_one_principal_cannot_hold_every_connection(tmp_path: pathlib.Path) -> None:
    cluster = Cluster(tmp_path, tenants_root(tmp_path))
    broker = cluster.start(
        0,
        kafka_security_protocol="SASL_PLAINTEXT",
        super_users="User:admin",
        max_connections_per_principal=3,
    )
    address = broker.kafka_address
    assert address is not None
    bobs = [_plain_login(address, "bob", "bob-pw") for _ in range(3)]
    try:
        assert _login_refused(address, "bob")
        alice = _plain_login(address, "alice", "alice-pw")
        admins = [_plain_login(address, "admin", "admin-pw") for _ in range(4)]
        assert alice.call(API_VERSIONS).error_code == 0
        for conn in [alice, *admins]:
            conn.close()
        bobs.pop().close()  # its place comes back once the broker sees it closed
        wait_for(
            lambda: not _login_refused(address, "bob"),
            timeout_s=20,
            what="bob's login once one of his connections closed",
        )
    finally:
        for conn in bobs:
            conn.close()
        cluster.stop_all()
    warned = [
        line
        for line in broker.log_lines()
        if line.get("msg") == "kafka connection closed: max_connections_per_principal reached"
    ]
    assert warned and warned[0]["principal"] == "User:bob" and warned[0]["level"] == "WARNING"


def test_connection_creation_rate_holds_back_a_burst(tmp_path: pathlib.Path) -> None:
    cluster = Cluster(tmp_path, f"file://{tmp_path}/root")
    address = cluster.start(0, max_connection_creation_rate=4).kafka_address
    assert address is not None
    held: list[Connection] = []
    try:
        started = time.monotonic()
        for _ in range(12):
            conn = _answered(address)
            assert conn is not None
            held.append(conn)
        # a burst of 4, then 4 a second: 8 more need at least 2 s
        assert time.monotonic() - started >= 2.0 * 0.9
    finally:
        for conn in held:
            conn.close()
        cluster.stop_all()
