"""Real broker processes for client tests, started as a person would (``sparklog broker start``)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from sparklog.client.transports.flight_client import BrokerClient

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class BrokerCluster:
    """Brokers sharing one storage root, each a ``sparklog broker start`` subprocess."""

    root: str
    log_dir: Path
    env: dict[str, str] = field(default_factory=dict)
    procs: dict[int, subprocess.Popen] = field(default_factory=dict)
    ports: dict[int, int] = field(default_factory=dict)

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{self.ports[i]}" for i in sorted(self.ports))

    @property
    def address(self) -> str:
        return f"sparklog://{self.bootstrap}"

    def start(self, broker_id: int) -> None:
        port = self.ports.setdefault(broker_id, free_port())
        env = {
            **os.environ,
            "PYTHONPATH": str(REPO),
            "SPARKLOG_METRICS_LISTEN": f"127.0.0.1:{free_port()}",
            "SPARKLOG_LEASE_INTERVAL_MS": "200",
            "SPARKLOG_LEASE_TIMEOUT_MS": "1500",
            "SPARKLOG_LOG_LEVEL": "WARNING",
            **self.env,
        }
        log = open(self.log_dir / f"broker-{broker_id}.log", "ab")  # noqa: SIM115
        self.procs[broker_id] = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "sparklog.cli",
                "broker",
                "start",
                "--root",
                self.root,
                "--listen",
                f"127.0.0.1:{port}",
                "--broker-id",
                str(broker_id),
            ],
            env=env,
            cwd=REPO,
            stdout=log,
            stderr=subprocess.STDOUT,
        )

    def wait_live(self, count: int, timeout_s: float = 60) -> None:
        """Poll until some broker reports ``count`` live brokers."""
        deadline = time.monotonic() + timeout_s
        last: Exception | None = None
        while time.monotonic() < deadline:
            for broker_id, proc in self.procs.items():
                if proc.poll() is not None:
                    log = (self.log_dir / f"broker-{broker_id}.log").read_text()[-2000:]
                    raise AssertionError(f"broker {broker_id} exited: {log}")
            try:
                with BrokerClient(self.bootstrap, retry_timeout_ms=500) as client:
                    if len(client.describe_cluster()["brokers"]) == count:
                        return
            except Exception as exc:
                last = exc
            time.sleep(0.2)
        raise AssertionError(f"{count} brokers not live within {timeout_s} s: {last}")

    def kill(self, broker_id: int) -> None:
        proc = self.procs.pop(broker_id)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)

    def stop(self) -> None:
        for broker_id in list(self.procs):
            proc = self.procs.pop(broker_id)
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
