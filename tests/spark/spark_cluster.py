"""A real Spark standalone cluster on 127.0.0.1: a master and two workers from the pyspark package.

Started with pyspark's own ``bin/spark-class`` (which ``exec``s the JVM, so the
process started is the daemon), each in a session of its own, and stopped by
pid (its process group: the worker's executors too) on every path.  Executors
run Python workers with the driver's interpreter, where sparklog is installed
as a cluster library install would put it (no PYTHONPATH to the checkout).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.support.waiting import wait_for

WORKERS = 2


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _spark_class() -> str:
    import pyspark

    return str(Path(pyspark.__file__).parent / "bin" / "spark-class")


class StandaloneCluster:
    """Master + workers; ``url`` is the master's ``spark://`` address once :meth:`start` returns."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.port = _free_port()
        self.ui_port = _free_port()
        self.processes: list[subprocess.Popen[bytes]] = []

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _bound_port(self, service: str) -> int | None:
        """The port the master's log says ``service`` bound.

        A port chosen free may be taken by another process (another test
        worker's Spark UI) before the master binds it; Spark then moves to the
        next port, so the log, not the choice, says where the master is.
        """
        log = self.work / "master.log"
        found = re.search(
            rf"Successfully started service '{service}' on port (\d+)",
            log.read_text(errors="replace") if log.exists() else "",
        )
        return int(found.group(1)) if found else None

    def _master_bound(self) -> bool:
        rpc_port, ui_port = self._bound_port("sparkMaster"), self._bound_port("MasterUI")
        if rpc_port is None or ui_port is None:
            return False
        self.port, self.ui_port = rpc_port, ui_port
        return True

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        env.update(
            SPARK_LOCAL_IP="127.0.0.1",
            SPARK_HOME=str(Path(_spark_class()).parents[1]),
            PYSPARK_PYTHON=sys.executable,
            SPARK_NO_DAEMONIZE="1",
        )
        return env

    def _launch(self, name: str, *args: str) -> None:
        log = open(self.work / f"{name}.log", "wb")  # noqa: SIM115  (closed with the process)
        with log:
            process = subprocess.Popen(
                [_spark_class(), *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self._env(),
                cwd=self.work,
                start_new_session=True,
            )
        self.processes.append(process)

    def alive_workers(self) -> int:
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{self.ui_port}/json/", timeout=5
            ) as reply:
                return int(json.load(reply).get("aliveworkers", 0))
        except (OSError, ValueError):
            return 0

    def start(self) -> None:
        self.work.mkdir(parents=True, exist_ok=True)
        self._launch(
            "master",
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--webui-port",
            str(self.ui_port),
        )
        wait_for(
            lambda: self._all_running() and self._master_bound(),
            timeout_s=120,
            what=f"the master's RPC and UI ports (log in {self.work})",
        )
        for i in range(WORKERS):
            work_dir = self.work / f"worker-{i}"
            work_dir.mkdir(exist_ok=True)
            self._launch(
                f"worker-{i}",
                "org.apache.spark.deploy.worker.Worker",
                self.url,
                "--host",
                "127.0.0.1",
                "--cores",
                "1",
                "--memory",
                "1g",
                "--webui-port",
                str(_free_port()),
                "--work-dir",
                str(work_dir),
            )
        wait_for(
            lambda: self._all_running() and self.alive_workers() == WORKERS,
            timeout_s=180,
            what=f"a master and {WORKERS} workers (logs in {self.work})",
        )

    def _all_running(self) -> bool:
        dead = [p.args for p in self.processes if p.poll() is not None]
        if dead:
            raise AssertionError(f"a cluster process exited: {dead}; logs in {self.work}")
        return True

    def stop(self) -> None:
        """Workers (with their executors) first, then the master; each by its process group."""
        for process in reversed(self.processes):
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGTERM)
        for process in reversed(self.processes):
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=30)


@contextlib.contextmanager
def standalone_cluster(work: Path) -> Iterator[StandaloneCluster]:
    cluster = StandaloneCluster(work)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def cluster_session(cluster: StandaloneCluster) -> Any:
    """A driver in this process on the cluster: one executor per worker, one core each."""
    from tests.spark.spark_support import new_session

    return new_session(
        "sparklog-standalone",
        master=cluster.url,
        **{
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.executor.memory": "512m",
            "spark.executor.cores": "1",
            "spark.cores.max": str(WORKERS),
        },
    )
