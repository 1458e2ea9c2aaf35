"""The smaller doors of #38.10: start-up WARNINGs, and credential records written 0600.

* a broker taking PLAIN passwords in cleartext off loopback, or serving an
  expired certificate or one that ends within 30 days, starts with a WARNING
  naming the key (brokers started in this process, their log records read);
* on a local root the metadata log files that hold SCRAM credentials are
  owner-only whatever the writer's umask (``sparklog users create``, a real CLI).
"""

from __future__ import annotations

import logging
import os
import pathlib
import stat
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from sparklog.broker_lite.config import load_config
from sparklog.broker_lite.logs import _FIELDS
from sparklog.broker_lite.server import start_broker, stop_broker
from tests.support.certs import make_ca, sign


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    d = tmp_path_factory.mktemp("certs")
    make_ca(d)
    for name, days in (("expired", -3), ("ending", 10), ("fresh", 400)):
        sign(d, name, "/CN=localhost", days=days, server=True)
    return d


def _warnings(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture, **config: Any
) -> list[tuple[str, dict[str, Any]]]:
    """The WARNINGs about security a broker started with ``config`` logs at start."""
    base = {"root": f"file://{tmp_path}/root", "listen": "127.0.0.1:0", "metrics_listen": ""}
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="sparklog.broker_lite.security_warnings"):
        server, broker, _ = start_broker(load_config(None, {**base, **config}, env={}))
        stop_broker(server, broker)
    return [
        (r.getMessage(), getattr(r, _FIELDS, {}))
        for r in caplog.records
        if r.name == "sparklog.broker_lite.security_warnings"
    ]


def test_cleartext_plain_off_loopback_is_warned_of(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    sasl = {"kafka_security_protocol": "SASL_PLAINTEXT"}
    found = _warnings(
        tmp_path, caplog, kafka_listen="0.0.0.0:0", kafka_advertised="127.0.0.1:9092", **sasl
    )
    assert [(f["key"], "cleartext" in m) for m, f in found] == [("kafka_listen", True)]
    # SCRAM only sends no password; loopback is no network
    scram_only = {**sasl, "sasl_enabled_mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512"}
    assert not _warnings(
        tmp_path, caplog, kafka_listen="0.0.0.0:0", kafka_advertised="127.0.0.1:9092", **scram_only
    )
    assert not _warnings(tmp_path, caplog, kafka_listen="127.0.0.1:0", **sasl)


@pytest.mark.parametrize(
    ("name", "words"),
    [("expired", "has expired"), ("ending", "expires within 30 days"), ("fresh", None)],
)
def test_an_expired_or_ending_certificate_is_warned_of(
    tmp_path: pathlib.Path,
    caplog: pytest.LogCaptureFixture,
    certs: pathlib.Path,
    name: str,
    words: str | None,
) -> None:
    found = _warnings(
        tmp_path,
        caplog,
        kafka_listen="127.0.0.1:0",
        kafka_security_protocol="SSL",
        ssl_certfile=str(certs / f"{name}.pem"),
        ssl_keyfile=str(certs / f"{name}.key"),
    )
    if words is None:
        assert found == []
    else:
        assert [(words in m, f["key"]) for m, f in found] == [(True, "ssl_certfile")]


@pytest.fixture
def open_umask() -> Iterator[None]:
    old = os.umask(0o022)
    yield
    os.umask(old)


def test_credential_records_are_owner_only_on_a_local_root(
    tmp_path: pathlib.Path, open_umask: None
) -> None:
    root = tmp_path / "root"
    (tmp_path / "pw").write_text("alice-Pa55\n")
    for user in ("alice", "bob"):
        made = subprocess.run(
            [sys.executable, "-m", "sparklog.cli", "-a", f"file://{root}", "users", "create",
             user, "--password-file", str(tmp_path / "pw")],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert made.returncode == 0, made.stderr
    log = root / "cluster" / "metadata" / "log"
    holding = [p for p in log.iterdir() if b"scram_credential" in p.read_bytes()]
    assert len(holding) >= 2
    assert {p.name: oct(stat.S_IMODE(p.stat().st_mode)) for p in holding} == {
        p.name: "0o600" for p in holding
    }
