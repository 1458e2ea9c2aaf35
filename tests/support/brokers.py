"""Real broker processes for tests (the one harness): ``python -m sparklog.broker_lite``.

Each broker listens on 127.0.0.1 port 0 and the harness reads the port it got
from the broker's "broker started" log line (no free-port probing, so no race
with other processes for a released port). A restarted broker asks for the port
it had, so clients' bootstrap addresses stay valid.
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

REPO = pathlib.Path(__file__).resolve().parents[2]

#: Short timeouts so failover and group tests finish quickly.
TEST_CONFIG: dict[str, Any] = {
    "linger_ms": 2,
    "lease_interval_ms": 100,
    "lease_timeout_ms": 800,
    "metadata_refresh_ms": 100,
    "fetch_refresh_ms": 50,
    "group_min_session_timeout_ms": 100,
    "group_poll_ms": 20,
    "cleaner_interval_ms": 0,
    "metrics_listen": "127.0.0.1:0",
    "log_level": "INFO",
}


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    return json.dumps(value)


@dataclass
class BrokerProcess:
    """One broker subprocess; its stderr (JSON logs) goes to a file we parse."""

    workdir: pathlib.Path
    root: str
    broker_id: int
    port: int = 0  # 0: the OS picks one; the broker's log reports it
    storage_options: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None
    metrics_port: int | None = None
    log_path: pathlib.Path | None = None
    #: Kafka listener: port 0 on first start; a restart reuses the port it got.
    kafka_listen: str = "127.0.0.1:0"
    #: milliseconds this broker's wall clock runs off (started through skewed_broker.py)
    clock_skew_ms: int = 0
    kafka_address: str | None = None

    @property
    def location(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _launcher(self) -> list[str]:
        """How to run the broker: the module itself, or the skewed-clock wrapper."""
        if self.clock_skew_ms:
            return [
                str(pathlib.Path(__file__).with_name("skewed_broker.py")),
                str(self.clock_skew_ms),
            ]
        return ["-m", "sparklog.broker_lite"]

    def start(self, timeout_s: float = 90) -> BrokerProcess:
        conf = {**TEST_CONFIG, **self.config}
        path = self.workdir / f"broker-{self.broker_id}.toml"
        path.write_text("".join(f"{k} = {_toml_value(v)}\n" for k, v in conf.items()))
        self.log_path = self.workdir / f"broker-{self.broker_id}-{time.time_ns()}.log"
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        for key, value in self.storage_options.items():
            text = value if isinstance(value, str) else json.dumps(value)
            env[f"SPARKLOG_STORAGE_{key.upper()}"] = text
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    *self._launcher(),
                    "--config",
                    str(path),
                    "--root",
                    self.root,
                    "--listen",
                    self.location,
                    "--id",
                    str(self.broker_id),
                    "--kafka-listen",
                    self.kafka_listen,
                ],
                stdout=subprocess.DEVNULL,
                stderr=log,
                env=env,
                cwd=self.workdir,
            )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for line in self.log_lines():
                if line.get("msg") == "broker started":
                    self.metrics_port = line.get("metrics_port")
                    self.port = int(line["port"])
                    self.kafka_address = line.get("kafka_address")
                    return self
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker {self.broker_id} exited: {self.log_text()}")
            time.sleep(0.05)
        self.kill()  # never leave a broker that did not start running
        text = self.log_text()
        why = text or (
            "its log is empty: the process was still importing (a machine too busy?) or "
            "hung before its first log line"
        )
        raise RuntimeError(f"broker {self.broker_id} did not start within {timeout_s:.0f} s: {why}")

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path else ""

    def log_lines(self) -> list[dict[str, Any]]:
        out = []
        for line in self.log_text().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
        return out

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL: no flush, no lease release."""
        if self.alive:
            assert self.proc is not None
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=30)

    def terminate(self, timeout_s: float = 60) -> int:
        """SIGTERM and wait for the graceful exit; return the exit code."""
        assert self.proc is not None
        if self.alive:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=timeout_s)


class Cluster:
    """Brokers sharing one root, stopped (by pid) at the end of the test."""

    def __init__(
        self, workdir: pathlib.Path, root: str, storage_options: dict[str, Any] | None = None
    ) -> None:
        self.workdir = workdir
        self.root = root
        self.storage_options = storage_options or {}
        self.brokers: dict[int, BrokerProcess] = {}

    def start(self, broker_id: int, *, clock_skew_ms: int = 0, **config: Any) -> BrokerProcess:
        """Start (or restart) broker ``broker_id``; ``clock_skew_ms`` moves its wall clock."""
        old = self.brokers.get(broker_id)
        port = old.port if old is not None else 0
        broker = BrokerProcess(
            self.workdir, self.root, broker_id, port, self.storage_options, config
        )
        broker.clock_skew_ms = clock_skew_ms
        if old is not None and old.kafka_address:
            broker.kafka_listen = old.kafka_address
        self.brokers[broker_id] = broker
        return broker.start()

    def restart(self, broker_id: int) -> BrokerProcess:
        """Start ``broker_id`` again on its address.

        On a busy machine another process's connection can hold the address's port a
        moment as its own ephemeral local port, and the bind fails: tried again until
        it binds (any other failure is raised at once).
        """
        from tests.support.waiting import wait_for

        old = self.brokers[broker_id]

        def attempt() -> BrokerProcess | None:
            try:
                return self.start(broker_id, clock_skew_ms=old.clock_skew_ms, **old.config)
            except RuntimeError as exc:
                if "cannot listen there" not in str(exc):
                    raise
                return None

        return wait_for(attempt, timeout_s=60, what=f"broker {broker_id} to bind its address")

    @property
    def bootstrap(self) -> str:
        return ",".join(b.location for b in self.brokers.values())

    @property
    def address(self) -> str:
        """The clients' address of the running brokers (``sparklog://host:port,...``)."""
        return f"sparklog://{self.bootstrap}"

    def wait_live(self, count: int, timeout_s: float = 60) -> None:
        """Wait until the brokers see ``count`` live brokers (leases on the root)."""
        from sparklog.client.transports.flight_client import BrokerClient
        from sparklog.protocol import actions
        from tests.support.waiting import wait_for

        def live() -> bool:
            for broker in self.brokers.values():
                if broker.proc is not None and broker.proc.poll() is not None:
                    raise AssertionError(f"broker {broker.broker_id} exited: {broker.log_text()}")
            try:
                with BrokerClient(self.bootstrap, retry_timeout_ms=500) as client:
                    return len(client.call(actions.DESCRIBE_CLUSTER)["brokers"]) == count
            except Exception:
                return False

        wait_for(live, timeout_s=timeout_s, what=f"{count} brokers live")

    def kill(self, broker_id: int) -> None:
        """SIGKILL one broker: no flush, no lease release."""
        self.brokers[broker_id].kill()

    def stop(self) -> None:
        self.stop_all()

    @property
    def kafka_bootstrap(self) -> str:
        """The Kafka listeners' addresses (bootstrap.servers for Kafka clients)."""
        return ",".join(b.kafka_address for b in self.brokers.values() if b.kafka_address)

    def kafka_leader(self, topic: str, partition: int) -> str:
        """The Kafka listener address of the partition's leader, as Metadata names it."""
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.kafka_bootstrap})
        leader = admin.list_topics(topic, timeout=30).topics[topic].partitions[partition].leader
        address = self.brokers[leader].kafka_address
        assert address is not None
        return address

    def kafka_coordinator(self, key: str) -> str:
        """The Kafka listener address of the coordinator of a group or transactional id
        (FindCoordinator's answer: the rendezvous hash over the live brokers)."""
        from sparklog.broker_lite.cluster import rendezvous_weight

        live = [b for b in self.brokers.values() if b.alive]
        chosen = max(live, key=lambda b: rendezvous_weight(key, 0, b.broker_id))
        assert chosen.kafka_address is not None
        return chosen.kafka_address

    def wait_config(self, topic: str, wanted: dict[str, Any], timeout_s: float = 30) -> None:
        """Wait until every running broker holds ``topic``'s config ``wanted`` in memory
        (learnt at its next look at the metadata log, ``metadata_refresh_ms``): before a
        client that reads the configs from any broker and writes them all back, as
        kafka-python's AlterConfigs does."""
        from sparklog.client.transports.flight_client import BrokerClient
        from tests.support.waiting import wait_for

        for broker in self.brokers.values():
            if not broker.alive:
                continue
            with BrokerClient(broker.location, discover=False) as client:
                wait_for(
                    lambda c=client: all(  # type: ignore[misc]
                        str(c.metadata([topic])[topic].config.get(k)) == str(v)
                        for k, v in wanted.items()
                    ),
                    timeout_s=timeout_s,
                    what=f"broker {broker.broker_id} to hold {topic}'s {wanted}",
                )

    def wait_listed(self, topic: str, timeout_s: float = 30) -> None:
        """Wait until every running broker lists ``topic`` in an all-topics Metadata.

        A broker learns of a topic created through another one when it next follows
        the metadata log (``metadata_refresh_ms``), as Kafka's brokers learn of it
        from the controller; Kafka's own test utilities wait so too.
        """
        from confluent_kafka.admin import AdminClient

        from tests.support.waiting import wait_for

        for broker in self.brokers.values():
            if not broker.alive:
                continue
            admin = AdminClient({"bootstrap.servers": broker.kafka_address})
            wait_for(
                lambda admin=admin: topic in admin.list_topics(timeout=10).topics,
                timeout_s=timeout_s,
                what=f"broker {broker.broker_id} to list {topic}",
            )

    def stop_all(self) -> None:
        for b in self.brokers.values():
            if b.alive:
                try:
                    b.terminate(timeout_s=20)
                except subprocess.TimeoutExpired:
                    b.kill()


#: KIP-848 groups with a short session and heartbeat, so an expiry and each
#: reconciliation step are quick
KIP848_CONFIG: dict[str, Any] = {
    "consumer_group_session_timeout_ms": 3_000,
    "consumer_group_heartbeat_interval_ms": 200,
}


def module_broker(factory: Any, name: str, **config: Any) -> Iterator[Cluster]:
    """One broker for a whole module (each test makes its own topics and groups), with
    :data:`KIP848_CONFIG` and ``config``; a module-scoped fixture yields from it
    (``factory``: pytest's ``tmp_path_factory``)."""
    workdir = factory.mktemp(name)
    cluster = Cluster(workdir, f"file://{workdir}/root")
    cluster.start(0, **{**KIP848_CONFIG, **config})
    yield cluster
    cluster.stop_all()
