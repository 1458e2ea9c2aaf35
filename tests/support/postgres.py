"""A real PostgreSQL server for tests: Debian's binaries, a fresh cluster on a free port.

``initdb`` in a temporary folder, ``postgres`` on 127.0.0.1 with ``wal_level=logical``
(no fsync: test data), stopped by its pid on every path. Running as root, the
server runs as the ``postgres`` user the Debian package creates (PostgreSQL
refuses root). Where no binaries are installed (``.ci/system-packages`` installs
them in CI) the tests skip, saying so.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.support.waiting import wait_for


def _bindir() -> Path | None:
    found = shutil.which("pg_config")
    if found:
        out = subprocess.run([found, "--bindir"], capture_output=True, text=True, check=False)
        path = Path(out.stdout.strip())
        if (path / "initdb").exists() and (path / "postgres").exists():
            return path
    for candidate in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if Path(candidate, "postgres").exists():
            return Path(candidate)
    return None


def why_unavailable() -> str | None:
    """None if a server can be started here, else the reason (printed by the skip)."""
    if _bindir() is None:
        return "PostgreSQL binaries not installed (apt-get install postgresql; .ci/system-packages)"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root and no 'postgres' user to run the server as"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Postgres:
    dsn: str
    port: int
    pid: int


@contextlib.contextmanager
def running_postgres() -> Iterator[Postgres]:
    """Start a server; stop it (SIGINT: fast shutdown, then SIGKILL) and remove its files."""
    bindir = _bindir()
    assert bindir is not None, why_unavailable()
    user: dict = {}
    folder = Path(tempfile.mkdtemp(prefix="sparklog-pg-"))
    if os.geteuid() == 0:
        entry = pwd.getpwnam("postgres")
        os.chown(folder, entry.pw_uid, entry.pw_gid)
        user = {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}
    data = folder / "data"
    proc = None
    try:
        subprocess.run(
            [str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust",
             "-E", "UTF8", "--no-sync", "--locale=C"],
            check=True, capture_output=True, **user,
        )  # fmt: skip
        port = free_port()
        # the server's log goes to a file: a pipe nobody drains fills up (logical decoding
        # logs every slot read) and blocks the server's backends writing to it
        server_log = folder / "server.log"
        with open(server_log, "wb") as log_file:
            proc = subprocess.Popen(
                [str(bindir / "postgres"), "-D", str(data), "-p", str(port),
                 "-c", "listen_addresses=127.0.0.1", "-c", f"unix_socket_directories={folder}",
                 "-c", "wal_level=logical", "-c", "max_replication_slots=10",
                 "-c", "max_wal_senders=10", "-c", "fsync=off",
                 "-c", "full_page_writes=off"],
                stdout=subprocess.DEVNULL, stderr=log_file, **user,
            )  # fmt: skip
        dsn = f"host=127.0.0.1 port={port} user=postgres dbname=postgres"

        def accepting() -> bool:
            import psycopg

            if proc.poll() is not None:
                raise AssertionError(f"postgres exited: {server_log.read_text()[-2000:]}")
            try:
                psycopg.connect(dsn, connect_timeout=2).close()
            except psycopg.OperationalError:
                return False
            return True

        wait_for(accepting, timeout_s=60, what="postgres accepting connections")
        yield Postgres(dsn, port, proc.pid)
    finally:
        if proc is not None and proc.poll() is None:
            os.kill(proc.pid, signal.SIGINT)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()
        shutil.rmtree(folder, ignore_errors=True)
