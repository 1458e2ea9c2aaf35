"""A bystander tenant's service while another attacks the broker (issue 38).

Run:  .venv/bin/python bench/hostile_bench.py [--logins 30] [--requests 200]
          [--attacks quota_flood,...] [--hold-s 40] [--principal-requests N]

One broker process on a local root with SASL_PLAINTEXT on its Kafka listener
(PLAIN; the tests' two tenants: alice and bob with prefixed ACLs, admin a super
user) and the multi-tenant settings of docs/security.md (per-principal topic and
partition caps).  For each attack, alice (the bystander) logs in ``--logins``
times on fresh connections and sends ``--requests`` Metadata requests for her
topic on one logged-in connection, first with no attack (the baseline, in the
same run) and then while the attack holds: the table gives her login successes
and her request p99 against the baseline (target: every login, p99 within 3x).

Attacks (raw Kafka frames, ``tests/kafka/wire.py``):

Attackers connect from 127.0.0.2 (bob from 127.0.1.1-4), alice from 127.0.0.1: two
hosts, as the per-IP cap expects.

* ``preauth``: 20 connections that never log in announce 100 MiB frames and
  send 1 MiB of each, then stall;
* ``ip_flood``: 1,000 connections from 127.0.0.1 that never log in;
* ``principal_flood``: bob logs in on 600 connections and holds them;
* ``partitions``: bob asks for 200 topics of 100 partitions in one CreateTopics;
* ``quota_flood``: bob, with a 1 KiB/s ``producer_byte_rate`` and a 10 %
  ``request_percentage``, logs in 600 connections (from 127.0.1.1-4; 512 held,
  his cap, as many as the broker's request threads) and produces in a loop on
  each, from a process of his own (as from another host: his 512 client threads
  must not take the bystander client's interpreter), awaiting each answer up to
  120 s: every answer is throttled, each connection muted for its throttle time
  (30 s, the longest), and when the mutes end his connections send again
  together.  alice measures this attack in rounds for ``--hold-s`` (40 s), so
  her requests meet that wave;
* ``creation_flood``: 127.0.0.2, with a ``connection_creation_rate`` quota of 10 a
  second (an ``ip`` client-quota entity), opens connections in a tight loop from 8
  threads, each sending an ApiVersions.

Flight DoPut chunks are not attacked here: pyarrow exposes no gRPC receive
limit (docs/security.md).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kio.schema.alter_client_quotas.v1.request import (
    AlterClientQuotasRequest,
    EntityData,
    EntryData,
    OpData,
)
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.create_topics.v7.request import (
    CreatableTopic,
    CreateTopicsRequest,
)
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

from tests.kafka.wire import Connection, record_batch_bytes
from tests.security.tenants import tenants_root
from tests.support.brokers import Cluster

#: the attacker's client address: another loopback address than the bystander's (127.0.0.1),
#: as two tenants on two hosts would be
ATTACKER = "127.0.0.2"


def login(
    address: str, user: str, source_host: str = "", timeout_s: float = 15
) -> Connection | None:
    """A connection logged in as ``user`` (PLAIN), or None if the broker refused or closed;
    an answer not there within ``timeout_s`` fails the connection's next call."""
    try:
        conn = Connection(address, timeout_s=timeout_s, source_host=source_host)
        if conn.call(SaslHandshakeRequest(mechanism="PLAIN")).error_code != 0:
            conn.close()
            return None
        token = f"\0{user}\0{user}-pw".encode()
        if conn.call(SaslAuthenticateRequest(auth_bytes=token)).error_code != 0:
            conn.close()
            return None
        return conn
    except (OSError, AttributeError, TypeError, AssertionError):
        return None


def bystander(address: str, logins: int, requests: int) -> tuple[int, list[float]]:
    """alice's successful logins of ``logins``, and the times of her Metadata requests
    in ms (empty if her connection failed)."""
    ok = 0
    for _ in range(logins):
        conn = login(address, "alice")
        if conn is not None:
            ok += 1
            conn.close()
    conn = login(address, "alice")
    if conn is None:
        return ok, []
    request = MetadataRequest(
        topics=(MetadataRequestTopic(topic_id=None, name="alice.orders"),),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    times = []
    try:
        for _ in range(requests):
            began = time.perf_counter()
            conn.call(request)
            times.append(1000 * (time.perf_counter() - began))
    except (OSError, AttributeError, TypeError, AssertionError):
        return ok, []
    finally:
        conn.close()
    return ok, times


def measured(address: str, logins: int, requests: int, hold_s: float) -> tuple[str, float, float]:
    """alice's rounds of :func:`bystander` until ``hold_s`` have passed (one at least):
    her logins (``ok/tried``), and her Metadata p99 and slowest in ms over every round
    (one request queued behind a held pool is in the slowest, not in a p99)."""
    ok = tried = 0
    times: list[float] = []
    began = time.monotonic()
    while True:
        round_ok, round_times = bystander(address, logins, requests)
        ok, tried = ok + round_ok, tried + logins
        if not round_times:
            return f"{ok}/{tried}", float("inf"), float("inf")
        times += round_times
        if time.monotonic() - began >= hold_s:
            break
    times.sort()
    return f"{ok}/{tried}", times[int(0.99 * (len(times) - 1))], times[-1]


@contextlib.contextmanager
def held_sockets(address: str, count: int, first_bytes: bytes = b"") -> Iterator[None]:
    """``count`` connections from :data:`ATTACKER` that never log in, each having sent
    ``first_bytes``, held open until the block ends."""
    host, port = address.rsplit(":", 1)
    held = []
    for _ in range(count):
        with contextlib.suppress(OSError):
            s = socket.create_connection((host, int(port)), timeout=5, source_address=(ATTACKER, 0))
            held.append(s)
            if first_bytes:
                s.sendall(first_bytes)
    try:
        yield
    finally:
        for s in held:
            s.close()


def preauth(address: str) -> contextlib.AbstractContextManager[None]:
    # a 100 MiB frame announced, 1 MiB of it sent
    return held_sockets(address, 20, struct.pack(">i", 100 << 20) + bytes(1 << 20))


def ip_flood(address: str) -> contextlib.AbstractContextManager[None]:
    return held_sockets(address, 1000)


@contextlib.contextmanager
def principal_flood(address: str) -> Iterator[None]:
    # from four addresses, so the per-IP cap is not what stops bob (his principal's is)
    logins = (login(address, "bob", f"127.0.1.{i % 4 + 1}") for i in range(600))
    held = [c for c in logins if c is not None]
    print(f"  bob holds {len(held)} logged-in connections", file=sys.stderr)
    try:
        yield
    finally:
        for c in held:
            c.close()


@contextlib.contextmanager
def partitions(address: str) -> Iterator[None]:
    conn = login(address, "bob", ATTACKER)
    assert conn is not None
    topics = tuple(
        CreatableTopic(
            name=f"bob.t{i}",
            num_partitions=100,
            replication_factor=1,
            assignments=(),
            configs=(),
        )
        for i in range(200)
    )
    answer = conn.call(
        CreateTopicsRequest(
            topics=topics, timeout=datetime.timedelta(seconds=60), validate_only=False
        )
    )
    refused = sum(1 for t in answer.topics if t.error_code != 0)
    print(f"  bob's 200 x 100 partitions: {refused} topics refused", file=sys.stderr)
    conn.close()
    yield


def set_quota(address: str, entity: tuple[str, str], key: str, value: float | None) -> None:
    """Set (None: remove) quota ``key`` of ``entity`` (type, name) as admin."""
    admin = login(address, "admin")
    assert admin is not None
    op = OpData(key=key, value=value or 0.0, remove=value is None)  # type: ignore[arg-type]
    answer = admin.call(
        AlterClientQuotasRequest(
            entries=(
                EntryData(
                    entity=(EntityData(entity_type=entity[0], entity_name=entity[1]),), ops=(op,)
                ),
            ),
            validate_only=False,
        )
    )
    assert answer.entries[0].error_code == 0, answer
    admin.close()


@contextlib.contextmanager
def looping(workers: list[Callable[[threading.Event], None]]) -> Iterator[threading.Event]:
    """Run each worker on a thread until the block ends (the event is set)."""
    stop = threading.Event()
    threads = [threading.Thread(target=w, args=(stop,), daemon=True) for w in workers]
    for t in threads:
        t.start()
    try:
        yield stop
    finally:
        stop.set()


def bob_floods(address: str) -> None:
    """bob's side of ``quota_flood``, run in a process of its own (as on another host):
    600 logins (512 held, his cap), a produce loop on each; prints ``ready`` once the
    loops run and the throttled answers when its stdin closes."""
    # each answer awaited longer than the longest throttle (30 s): bob's connections stay
    # through their mutes and send again when they end, as a flooding client that ignores
    # throttle_time_ms does
    logins = (login(address, "bob", f"127.0.1.{i % 4 + 1}", 120) for i in range(600))
    held = [c for c in logins if c is not None]
    request = ProduceRequest(
        transactional_id=None,
        acks=1,  # type: ignore[arg-type]
        timeout=datetime.timedelta(seconds=10),  # type: ignore[arg-type]
        topic_data=(
            TopicProduceData(
                name="bob.flood",
                partition_data=(
                    PartitionProduceData(
                        index=0,  # type: ignore[arg-type]
                        records=record_batch_bytes([b"x" * 10_000]),
                    ),
                ),
            ),
        ),
    )
    throttled = [0]

    def produce(conn: Connection) -> Callable[[threading.Event], None]:
        def loop(stop: threading.Event) -> None:
            with contextlib.suppress(OSError, AttributeError, AssertionError):
                while not stop.is_set():
                    if conn.call(request).throttle_time.total_seconds() > 0:
                        throttled[0] += 1

        return loop

    with looping([produce(c) for c in held]):
        print(f"ready {len(held)}", flush=True)
        sys.stdin.read()  # until the bench closes it
        print(f"throttled {throttled[0]}", flush=True)
    for c in held:
        c.close()


@contextlib.contextmanager
def quota_flood(address: str) -> Iterator[None]:
    set_quota(address, ("user", "bob"), "producer_byte_rate", 1024.0)
    set_quota(address, ("user", "bob"), "request_percentage", 10.0)
    # bob in a process of his own: his 512 client threads must not take the bystander
    # client's interpreter (its GIL) in this process, as they would not from another host
    bob = subprocess.Popen(
        [sys.executable, __file__, "--bob-floods", address],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert bob.stdin is not None and bob.stdout is not None
    print(f"  bob produces on {bob.stdout.readline().split()[-1]} connections", file=sys.stderr)
    try:
        yield
    finally:
        bob.stdin.close()
        print(f"  bob's throttled answers: {bob.stdout.readline().split()[-1]}", file=sys.stderr)
        bob.wait(60)
    set_quota(address, ("user", "bob"), "producer_byte_rate", None)
    set_quota(address, ("user", "bob"), "request_percentage", None)


@contextlib.contextmanager
def creation_flood(address: str) -> Iterator[None]:
    set_quota(address, ("ip", ATTACKER), "connection_creation_rate", 10.0)
    counts = {"tried": 0, "served": 0}
    versions = ApiVersionsRequest(client_software_name="t", client_software_version="1")

    def connect(stop: threading.Event) -> None:
        while not stop.is_set():
            counts["tried"] += 1
            with contextlib.suppress(OSError, AttributeError, AssertionError):
                conn = Connection(address, timeout_s=5, source_host=ATTACKER)
                try:
                    conn.send_frame(conn.encode(versions))
                    if conn.read_frame() is not None:
                        counts["served"] += 1
                finally:
                    conn.close()

    with looping([connect] * 8):
        yield
        print(f"  127.0.0.2's connections: {counts}", file=sys.stderr)
    set_quota(address, ("ip", ATTACKER), "connection_creation_rate", None)


ATTACKS: dict[str, Callable[[str], contextlib.AbstractContextManager[None]]] = {
    "preauth": preauth,
    "ip_flood": ip_flood,
    "principal_flood": principal_flood,
    "partitions": partitions,
    "quota_flood": quota_flood,
    "creation_flood": creation_flood,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--logins", type=int, default=30)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--attacks", default=",".join(ATTACKS))
    parser.add_argument(
        "--hold-s",
        type=float,
        default=40.0,
        help="alice measures the quota flood this long, in rounds (past the longest "
        "throttle, 30 s, so her requests meet bob's connections coming out of their mutes)",
    )
    parser.add_argument(
        "--principal-requests",
        type=int,
        default=0,
        help="the broker's queued_max_requests_per_principal (0: its default, a quarter "
        "of num_io_threads)",
    )
    parser.add_argument("--bob-floods", metavar="ADDRESS", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.bob_floods:
        bob_floods(args.bob_floods)
        return
    with tempfile.TemporaryDirectory() as workdir:
        path = Path(workdir)
        cluster = Cluster(path, tenants_root(path))
        broker = cluster.start(
            0,
            kafka_security_protocol="SASL_PLAINTEXT",
            sasl_enabled_mechanisms="PLAIN",
            authorizer="acl",
            super_users="User:admin",
            max_topics_per_principal=100,
            max_partitions_per_principal=1000,
            **(
                {"queued_max_requests_per_principal": args.principal_requests}
                if args.principal_requests
                else {}
            ),
        )
        address = broker.kafka_address
        assert address is not None
        admin = login(address, "admin")
        assert admin is not None
        admin.call(
            CreateTopicsRequest(
                topics=tuple(
                    CreatableTopic(
                        name=name,
                        num_partitions=4 if name == "alice.orders" else 1,
                        replication_factor=1,
                        assignments=(),
                        configs=(),
                    )
                    for name in ("alice.orders", "bob.flood")
                ),
                timeout=datetime.timedelta(seconds=30),
                validate_only=False,
            )
        )
        admin.close()
        rows = []
        try:
            bystander(address, 5, 50)  # warm-up: the first requests of a fresh broker are slow
            base_ok, base_p99, base_max = measured(address, args.logins, args.requests, 0)
            rows.append(("none (baseline)", base_ok, base_p99, base_max))
            for name in args.attacks.split(","):
                print(f"attack {name}", file=sys.stderr)
                with ATTACKS[name](address):
                    hold_s = args.hold_s if name == "quota_flood" else 0
                    ok, p99, slowest = measured(address, args.logins, args.requests, hold_s)
                rows.append((name, ok, p99, slowest))
        finally:
            cluster.stop_all()
    print(
        f"\n## A bystander (alice) during each attack: {args.logins} logins, "
        f"{args.requests} Metadata requests"
    )
    print("| attack | alice's logins | Metadata p99 ms | p99 vs baseline | slowest ms |")
    print("|---|---|---|---|---|")
    for name, ok, p99, slowest in rows:
        print(f"| {name} | {ok} | {p99:.1f} | {p99 / base_p99:.2f}x | {slowest:.1f} |")
    print(f"\nmedian of the p99s under attack: {statistics.median(r[2] for r in rows[1:]):.1f} ms")


if __name__ == "__main__":
    main()
