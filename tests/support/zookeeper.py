"""A real ZooKeeper server from Debian's ``zookeeper`` package, for Burrow 1.2.

Burrow 1.2 cannot run without ZooKeeper (its own locks; no setting turns it
off).  :func:`running_zookeeper` starts ``ZooKeeperServerMain`` on a free
loopback port with a data folder of its own and stops it by pid on every path.
:func:`why_unavailable` says why it cannot run here (tests then skip).
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from tests.support.waiting import wait_for

#: Debian's jar (package ``zookeeper``; .ci/system-packages installs it)
JAR = Path("/usr/share/java/zookeeper.jar")


def why_unavailable() -> str | None:
    if shutil.which("java") is None:
        return "java is not installed (ZooKeeper for Burrow needs it)"
    if not JAR.exists():
        return f"ZooKeeper is not installed ({JAR} missing; Debian: zookeeper, .ci/system-packages)"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _answers(port: int) -> bool:
    """Whether the server answers ZooKeeper's ``ruok`` with ``imok``."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as conn:
            conn.sendall(b"ruok")
            return conn.recv(4) == b"imok"
    except OSError:
        return False


@contextlib.contextmanager
def running_zookeeper() -> Iterator[str]:
    """A standalone server on 127.0.0.1; yields its ``host:port``."""
    folder = Path(tempfile.mkdtemp(prefix="sparklog-zk-"))
    port = _free_port()
    config = folder / "zoo.cfg"
    config.write_text(
        f"tickTime=2000\ndataDir={folder / 'data'}\nclientPort={port}\n"
        "clientPortAddress=127.0.0.1\nadmin.enableServer=false\n4lw.commands.whitelist=ruok\n"
    )
    log = open(folder / "server.log", "wb")  # noqa: SIM115  (closed below, on every path)
    proc = subprocess.Popen(
        ["java", "-Xmx128m", "-cp", str(JAR), "org.apache.zookeeper.server.ZooKeeperServerMain",
         str(config)],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:

        def up() -> bool:
            if proc.poll() is not None:
                raise AssertionError(
                    f"ZooKeeper exited ({proc.returncode}): {(folder / 'server.log').read_text()}"
                )
            return _answers(port)

        wait_for(up, timeout_s=60, what="ZooKeeper answering ruok")
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(20)
        log.close()
        shutil.rmtree(folder, ignore_errors=True)
