"""Certificate principals are RFC 2253, as Kafka's default principal builder makes them (#38.8).

A certificate whose single CN is ``alice,O=team-a`` must not pass for the
certificate ``/O=team-a/CN=alice`` (``User:CN=alice,O=team-a``): its principal
is ``User:CN=alice\\,O\\=team-a``.  The subjects are compared with Java's
``X500Principal.getName()`` (what Kafka takes) where a ``java`` is installed.
"""

from __future__ import annotations

import pathlib
import shutil
import ssl
import subprocess
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer

from sparklog.broker_lite.kafka import tls
from sparklog.security import acls
from sparklog.storage.catalog import open_root
from tests.support.brokers import Cluster
from tests.support.certs import make_ca, sign

#: openssl -subj values that an unescaping formatter gets wrong
SUBJECTS = {
    "plain": "/O=team-a/CN=alice",
    "comma": "/CN=alice,O=team-a",
    "multi": "/O=team-a/CN=alice+UID=7",
    "specials": '/CN=a\\+b;c<d>e"f\\\\g#h=i',
    "spaces": "/CN= padded /OU=#lead",
    "email": "/CN=bob/emailAddress=bob@example.com",
    "dc": "/DC=org/DC=example/CN=zoë",
}

_JAVA = """
public class Names { public static void main(String[] a) throws Exception {
  var f = java.security.cert.CertificateFactory.getInstance("X.509");
  for (String p : a) {
    var in = new java.io.FileInputStream(p);
    var c = (java.security.cert.X509Certificate) f.generateCertificate(in);
    System.out.println(c.getSubjectX500Principal().getName());
  } } }
"""


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    d = tmp_path_factory.mktemp("certs")
    make_ca(d)
    sign(d, "server", "/CN=localhost", server=True)
    for name, subject in SUBJECTS.items():
        sign(d, name, subject)
    return d


def _principal(path: pathlib.Path) -> str | None:
    return tls.subject_principal(ssl.PEM_cert_to_DER_cert(path.read_text()))


def test_subjects_are_escaped_as_rfc_2253(certs: pathlib.Path) -> None:
    assert _principal(certs / "plain.pem") == "User:CN=alice,O=team-a"
    assert _principal(certs / "comma.pem") == "User:CN=alice\\,O\\=team-a"
    assert _principal(certs / "multi.pem") == "User:CN=alice+UID=7,O=team-a"


@pytest.mark.skipif(shutil.which("java") is None, reason="no java to compare with")
def test_subjects_are_what_javas_x500_principal_names(
    certs: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    (tmp_path / "Names.java").write_text(_JAVA)
    paths = [str(certs / f"{name}.pem") for name in SUBJECTS]
    java = subprocess.run(
        ["java", str(tmp_path / "Names.java"), *paths],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    expected = ["User:" + line for line in java.stdout.splitlines()]
    assert [_principal(certs / f"{name}.pem") for name in SUBJECTS] == expected


def _with_cert(certs: pathlib.Path, name: str) -> dict[str, Any]:
    return {
        "security.protocol": "SSL",
        "ssl.ca.location": str(certs / "ca.pem"),
        "ssl.certificate.location": str(certs / f"{name}.pem"),
        "ssl.key.location": str(certs / f"{name}.key"),
        "message.timeout.ms": 20_000,
    }


def _produce(bootstrap: str, options: dict[str, Any], topic: str) -> KafkaError | None:
    results: list[KafkaError | None] = []
    producer = Producer({"bootstrap.servers": bootstrap, **options})
    producer.produce(topic, b"x", on_delivery=lambda err, msg: results.append(err))
    producer.flush(30)
    assert results, "no delivery report"
    return results[0]


def test_a_comma_in_a_cn_does_not_take_another_principal(
    tmp_path: pathlib.Path, certs: pathlib.Path
) -> None:
    root = f"file://{tmp_path}/root"
    metadata = open_root(root, create=True).metadata
    alice = "User:CN=alice,O=team-a"
    acls.create(
        metadata,
        [acls.binding("TOPIC", "team-a.", alice, op, pattern_type="PREFIXED")
         for op in ("WRITE", "CREATE", "DESCRIBE")]
        + [acls.binding("TOPIC", "evil.", "User:CN=alice\\,O\\=team-a", op, pattern_type="PREFIXED")
           for op in ("WRITE", "CREATE", "DESCRIBE")],
    )  # fmt: skip
    cluster = Cluster(tmp_path, root)
    cluster.start(
        0,
        kafka_security_protocol="SSL",
        ssl_client_auth="required",
        authorizer="acl",
        ssl_certfile=str(certs / "server.pem"),
        ssl_keyfile=str(certs / "server.key"),
        ssl_cafile=str(certs / "ca.pem"),
    )
    try:
        bootstrap = cluster.kafka_bootstrap
        assert _produce(bootstrap, _with_cert(certs, "plain"), "team-a.events") is None
        refused = _produce(bootstrap, _with_cert(certs, "comma"), "team-a.events")
        assert refused is not None
        assert refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
        # the escaped principal is the one its ACLs name
        assert _produce(bootstrap, _with_cert(certs, "comma"), "evil.events") is None
    finally:
        cluster.stop_all()
