"""The CLI dialling a TLS Flight port without TLS names TLS, not "unreachable" (#38.10).

A real broker serves Flight with ``flight_security_protocol = "SSL"``; the CLI,
given no ``SPARKLOG_SECURITY_PROTOCOL``, speaks plain gRPC to it. Its error
must say that the broker wants TLS and which settings give it, for the small
request path (``topics list``) and the full client (``topics describe``).
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
from collections.abc import Iterator

import pytest

from tests.support.brokers import Cluster
from tests.support.certs import make_ca, sign


@pytest.fixture
def tls_broker(tmp_path: pathlib.Path) -> Iterator[Cluster]:
    make_ca(tmp_path)
    certfile, keyfile = sign(tmp_path, "server", "/CN=localhost", server=True)
    cluster = Cluster(tmp_path, f"file://{tmp_path}/root")
    cluster.start(0, flight_security_protocol="SSL", ssl_certfile=certfile, ssl_keyfile=keyfile)
    yield cluster
    cluster.stop_all()


@pytest.mark.parametrize("command", [["topics", "list"], ["topics", "describe", "t"]])
def test_the_cli_names_tls(tls_broker: Cluster, command: list[str]) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPARKLOG_")}
    ran = subprocess.run(
        [sys.executable, "-m", "sparklog.cli", "-a", tls_broker.address, *command],
        capture_output=True, text=True, timeout=120, check=False, env=env,
    )  # fmt: skip
    assert ran.returncode != 0
    message = " ".join(ran.stderr.split())
    assert "serves TLS" in message, message
    assert "SPARKLOG_SECURITY_PROTOCOL" in message and "SPARKLOG_SSL_CAFILE" in message, message
