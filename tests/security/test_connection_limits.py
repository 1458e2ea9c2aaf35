"""No one host or tenant holds every connection (#38.3), over the real Kafka listener.

* ``max_connections_per_ip`` defaults to a quarter of ``max_connections`` (256
  of 1,024): the 257th connection from one address is closed at once;
* ``max_connections_per_principal``: a login past the cap is closed without its
  success answer (and logged); other tenants and super users still log in, and
  a connection closed gives its place back;
* ``max_connection_creation_rate`` (Kafka's ``max.connection.creation.rate``):
  past the rate the listener waits before accepting; measured only as a lower
  bound on the time to open more connections than one second's worth;
* the per-IP ``connection_creation_rate`` quota (KIP-612, an ``ip`` client-quota
  entity): connections past it from that address are closed unanswered.
"""

from __future__ import annotations

import pathlib
import time

from kio.schema.alter_client_quotas.v1.request import (
    AlterClientQuotasRequest,
    EntityData,
    EntryData,
    OpData,
)
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.describe_client_quotas.v1.request import (
    ComponentData,
    DescribeClientQuotasRequest,
)
from kio.schema.errors import ErrorCode
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest
from kio.static.primitive import f64

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


def test_a_per_ip_connection_creation_rate_throttles_only_that_address(
    tmp_path: pathlib.Path,
) -> None:
    """KIP-612's ``connection_creation_rate`` on an ``ip`` entity, set and described with
    Kafka's AlterClientQuotas/DescribeClientQuotas: a burst of connections from
    127.0.0.2 (quota 2 a second) gets 2 served, the rest held unanswered and closed,
    with a WARNING; the same burst from 127.0.0.3 is served whole."""
    cluster = Cluster(tmp_path, f"file://{tmp_path}/root")
    broker = cluster.start(0)
    address = broker.kafka_address
    assert address is not None
    admin = Connection(address)
    try:
        ip_entity = (EntityData(entity_type="ip", entity_name="127.0.0.2"),)
        rate = OpData(key="connection_creation_rate", value=f64(2.0), remove=False)
        altered = admin.call(
            AlterClientQuotasRequest(
                entries=(
                    EntryData(entity=ip_entity, ops=(rate,)),
                    # Kafka's rules: an ip entity stands alone and takes only this quota
                    EntryData(
                        entity=(*ip_entity, EntityData(entity_type="user", entity_name="bob")),
                        ops=(rate,),
                    ),
                    EntryData(
                        entity=ip_entity,
                        ops=(OpData(key="producer_byte_rate", value=f64(1.0), remove=False),),
                    ),
                    EntryData(
                        entity=(EntityData(entity_type="ip", entity_name="not-an-ip"),),
                        ops=(rate,),
                    ),
                ),
                validate_only=False,
            )
        )
        codes = [e.error_code for e in altered.entries]
        assert codes == [
            0,
            ErrorCode.invalid_request,
            ErrorCode.invalid_request,
            ErrorCode.invalid_request,
        ], codes
        messages = [e.error_message or "" for e in altered.entries]
        assert "cannot be combined" in messages[1]
        assert "producer_byte_rate" in messages[2] and "not-an-ip" in messages[3]
        described = admin.call(
            DescribeClientQuotasRequest(
                components=(ComponentData(entity_type="ip", match_type=0, match="127.0.0.2"),),
                strict=True,
            )
        )
        assert [
            (
                [(e.entity_type, e.entity_name) for e in entry.entity],
                [(v.key, v.value) for v in entry.values],
            )
            for entry in described.entries
        ] == [([("ip", "127.0.0.2")], [("connection_creation_rate", 2.0)])]
    finally:
        admin.close()
    assert _burst_answered(address, "127.0.0.2", 6) == 2
    assert _burst_answered(address, "127.0.0.3", 6) == 6  # another address: no quota
    warned = [
        line
        for line in broker.log_lines()
        if line.get("msg") == "kafka connection throttled: connection_creation_rate of its address"
    ]
    cluster.stop_all()
    assert warned and warned[0]["level"] == "WARNING" and "127.0.0.2" in warned[0]["peer"]


def _burst_answered(address: str, source_host: str, count: int) -> int:
    """Open ``count`` connections from ``source_host`` at once, then send each an
    ApiVersions: how many are answered (the others closed by the broker)."""
    conns = [Connection(address, timeout_s=30, source_host=source_host) for _ in range(count)]
    try:
        for conn in conns:
            conn.send_frame(conn.encode(API_VERSIONS))
        return sum(1 for conn in conns if conn.read_frame() is not None)
    finally:
        for conn in conns:
            conn.close()
