"""One tenant's topics do not slow the others, and validate_only checks what creating does (#38.7).

* An all-topics Metadata is built for the topics its caller may describe only
  (a broker started in this process; the topics each Metadata build is asked
  for are recorded, the build itself runs);
* CreateTopics with ``validate_only`` refuses what the real request refuses (a
  partition count over the bound, a topic that exists), through confluent-kafka;
* per-principal caps on topics and partitions (off by default) refuse the
  CreateTopics and CreatePartitions that would pass them.
"""

from __future__ import annotations

import datetime
import pathlib
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from kio.schema.metadata.v12.request import MetadataRequest

from sparklog.broker_lite.config import load_config
from sparklog.broker_lite.server import start_broker, stop_broker
from tests.kafka.test_security import _plain_login
from tests.security.tenants import tenants_root


def _start(tmp_path: pathlib.Path, **config: Any) -> tuple[Any, Any]:
    root = tenants_root(tmp_path)
    base = {
        "root": root, "listen": "127.0.0.1:0", "metrics_listen": "",
        "kafka_listen": "127.0.0.1:0", "kafka_security_protocol": "SASL_PLAINTEXT",
        "authorizer": "acl", "super_users": "User:admin",
    }  # fmt: skip
    server, broker, _ = start_broker(load_config(None, {**base, **config}, env={}))
    return server, broker


@pytest.fixture
def tenants(tmp_path: pathlib.Path) -> Iterator[tuple[Any, Any]]:
    server, broker = _start(tmp_path)
    yield server, broker
    stop_broker(server, broker)


def _admin(server: Any, user: str) -> AdminClient:
    return AdminClient(
        {"bootstrap.servers": server.kafka.advertised, "security.protocol": "SASL_PLAINTEXT",
         "sasl.mechanism": "PLAIN", "sasl.username": user, "sasl.password": f"{user}-pw"}
    )  # fmt: skip


def _create(admin: AdminClient, topics: list[NewTopic], **options: Any) -> dict[str, Any]:
    """Each topic's error code (0: created or valid)."""
    out: dict[str, Any] = {}
    for name, future in admin.create_topics(topics, **options).items():
        try:
            future.result(timeout=30)
            out[name] = 0
        except KafkaException as exc:
            out[name] = exc.args[0].code()
    return out


def test_all_topics_metadata_builds_only_the_callers_topics(
    tenants: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    server, broker = tenants
    names = [f"alice.t{i}" for i in range(12)] + ["bob.data"]
    assert set(_create(_admin(server, "admin"), [NewTopic(n, 3, 1) for n in names]).values()) == {0}
    built: list[str] = []
    real = broker.metadata

    def recording(topics: Any = None) -> Any:
        built.extend(topics or ["<every topic>"])
        return real(topics)

    monkeypatch.setattr(broker, "metadata", recording)
    bob = _plain_login(server.kafka.advertised, "bob", "bob-pw")
    answer = bob.call(
        MetadataRequest(
            topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False
        )
    )
    bob.close()
    assert [t.name for t in answer.topics] == ["bob.data"]
    assert set(built) == {"bob.data"}


def test_validate_only_refuses_what_creating_refuses(tenants: tuple[Any, Any]) -> None:
    server, _ = tenants
    alice = _admin(server, "alice")
    assert _create(alice, [NewTopic("alice.exists", 1, 1)]) == {"alice.exists": 0}
    for options in ({"validate_only": True}, {}):
        got = _create(
            alice,
            [NewTopic("alice.huge", 100_000, 1), NewTopic("alice.exists", 1, 1)],
            **options,
        )
        assert got == {
            "alice.huge": KafkaError.INVALID_PARTITIONS,
            "alice.exists": KafkaError.TOPIC_ALREADY_EXISTS,
        }, options


def test_per_principal_caps_on_topics_and_partitions(tmp_path: pathlib.Path) -> None:
    from sparklog import Admin
    from sparklog.errors import PolicyViolationError

    server, broker = _start(tmp_path, max_topics_per_principal=3, max_partitions_per_principal=10)
    try:
        bob, alice, admin = (_admin(server, u) for u in ("bob", "alice", "admin"))
        refused = KafkaError.POLICY_VIOLATION
        assert _create(bob, [NewTopic("bob.t0", 4, 1), NewTopic("bob.t1", 4, 1)]) == {
            "bob.t0": 0,
            "bob.t1": 0,
        }
        # a third topic of 4 partitions passes the partitions cap (12 > 10), of 2 does not
        for options in ({"validate_only": True}, {}):
            assert _create(bob, [NewTopic("bob.t2", 4, 1)], **options) == {"bob.t2": refused}
        assert _create(bob, [NewTopic("bob.t2", 2, 1)], validate_only=True) == {"bob.t2": 0}
        assert _create(bob, [NewTopic("bob.t2", 2, 1)]) == {"bob.t2": 0}
        assert _create(bob, [NewTopic("bob.t3", 1, 1)]) == {"bob.t3": refused}  # 4 topics
        grown = bob.create_partitions([NewPartitions("bob.t0", 5)])["bob.t0"]
        with pytest.raises(KafkaException) as raised:
            grown.result(timeout=30)
        assert raised.value.args[0].code() == refused
        assert "max_partitions_per_principal" in raised.value.args[0].str()
        # Flight is the same door: bob's own client is refused too
        flight = Admin(
            f"sparklog://127.0.0.1:{server.port}",
            security_protocol="SASL_PLAINTEXT",
            sasl_plain_username="bob",
            sasl_plain_password="bob-pw",
        )
        with pytest.raises(PolicyViolationError, match="max_topics_per_principal"), flight as a:
            a.create_topic("bob.flight", 1)
        # other tenants and super users count their own
        assert _create(alice, [NewTopic("alice.t0", 10, 1)]) == {"alice.t0": 0}
        assert set(_create(admin, [NewTopic(f"ops.t{i}", 5, 1) for i in range(5)]).values()) == {0}
        assert set(broker.root.list_topics()) >= {"bob.t0", "bob.t1", "bob.t2", "alice.t0"}
        assert "bob.t3" not in broker.root.list_topics()
    finally:
        stop_broker(server, broker)


RACERS = 12


def test_concurrent_creates_of_one_principal_never_pass_its_cap(tmp_path: pathlib.Path) -> None:
    """Twelve connections of bob each send a CreateTopics at once (a barrier, then one
    frame each): the cap of 3 topics holds, the others are refused POLICY_VIOLATION.
    The cap is checked inside the metadata commit, so racing creates see each other."""
    import threading

    from kio.schema.create_topics.v5.request import CreatableTopic, CreateTopicsRequest

    server, broker = _start(tmp_path, max_topics_per_principal=3)
    conns = [_plain_login(server.kafka.advertised, "bob", "bob-pw") for _ in range(RACERS)]
    try:
        requests = [
            CreateTopicsRequest(
                topics=(
                    CreatableTopic(
                        name=f"bob.race{i}",
                        num_partitions=1,  # type: ignore[arg-type]
                        replication_factor=1,  # type: ignore[arg-type]
                        assignments=(),
                        configs=(),
                    ),
                ),
                timeout=datetime.timedelta(seconds=30),  # type: ignore[arg-type]
                validate_only=False,
            )
            for i in range(RACERS)
        ]
        frames = [conn.encode(request) for conn, request in zip(conns, requests, strict=True)]
        start = threading.Barrier(RACERS)
        codes: list[int] = []

        def race(i: int) -> None:
            start.wait()
            conns[i].send_frame(frames[i])

        racers = [threading.Thread(target=race, args=(i,)) for i in range(RACERS)]
        for thread in racers:
            thread.start()
        for thread in racers:
            thread.join()
        for conn, request in zip(conns, requests, strict=True):
            frame = conn.read_frame()
            assert frame is not None, "the broker closed the connection"
            codes.append(_create_topics_code(frame, request))
        created = sorted(n for n in broker.root.list_topics() if n.startswith("bob.race"))
        assert len(created) == 3, created
        assert sorted(codes) == [0, 0, 0] + [KafkaError.POLICY_VIOLATION] * (RACERS - 3)
    finally:
        for conn in conns:
            conn.close()
        stop_broker(server, broker)


def _create_topics_code(frame: bytes, request: Any) -> int:
    """The error code of the one topic in a CreateTopics answer ``frame``."""
    from kio.index import load_response_schema
    from kio.serial import entity_reader

    cls = load_response_schema(request.__api_key__, request.__version__)
    _header, offset = entity_reader(cls.__header_schema__)(frame, 0)
    answer, _ = entity_reader(cls)(frame, offset)
    return int(answer.topics[0].error_code)
