"""The Metadata answer's topic entries, kept encoded (issue 37 item 6).

Each topic's entry is built and encoded by kio once and kept while the topic's document
and leaders are unchanged; the answer is spliced from the kept bytes. These tests hold
the splice to kio's own encoding, byte for byte, for every version the listener serves
(with topics in error, the internal topic, topic ids and authorised operations), and
show that a kept entry is dropped when what it says changes: partitions added, a topic
deleted and created again, leadership moved to a broker that joined, and back when it
left.
"""

from __future__ import annotations

import dataclasses
import io
import tempfile
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer

from sparklog.broker_lite.config import load_config
from sparklog.broker_lite.kafka import consumer_offsets
from sparklog.broker_lite.kafka.messages import make, nested
from sparklog.broker_lite.kafka.metadata import entries_view, kafka_brokers
from sparklog.broker_lite.kafka.metadata_entries import TopicEntries
from sparklog.broker_lite.kafka.topic_ids import topic_uuid
from sparklog.broker_lite.kafka.versions import API_TABLE
from sparklog.broker_lite.server import start_broker, stop_broker
from tests.kafka.wire import Connection
from tests.support.waiting import wait_for

VERSIONS = range(API_TABLE[3].min_version, API_TABLE[3].max_version + 1)


def _config(root: str, broker_id: int) -> Any:
    return load_config(
        None,
        {
            "root": root,
            "broker_id": broker_id,
            "listen": "127.0.0.1:0",
            "metrics_listen": "",
            "kafka_listen": "127.0.0.1:0",
            "cleaner_interval_ms": 0,
            "lease_interval_ms": 100,
            "metadata_refresh_ms": 50,
        },
        env={},
    )


@pytest.fixture(scope="module")
def broker() -> Iterator[tuple[Any, Any]]:
    """One in-process broker with a Kafka listener for the module: (server, broker)."""
    with tempfile.TemporaryDirectory() as tmp:
        root = f"file://{tmp}/root"
        server, broker = start_broker(_config(root, 1))[:2]
        try:
            broker.create_topic("orders", 3)
            broker.create_topic("audit", 1)
            yield server, broker
        finally:
            stop_broker(server, broker)


def _encoded(cls: type, value: Any) -> bytes:
    buffer = io.BytesIO()
    entity_writer(cls)(buffer, value)
    return buffer.getvalue()


def _request(version: int, names: list[str] | None, ids: tuple[uuid.UUID, ...] = ()) -> Any:
    """A Metadata request of ``version``: every topic (None), or these names and ids."""
    cls = load_request_schema(3, version)
    topic_cls = nested(cls, "MetadataRequestTopic")
    if names is None and version > 0:
        topics = None
    else:
        topics = tuple(make(topic_cls, name=n, topic_id=None) for n in names or ())
        topics += tuple(make(topic_cls, name=None, topic_id=i) for i in ids)
    return make(
        cls,
        topics=topics,
        allow_auto_topic_creation=False,
        include_cluster_authorized_operations=True,
        include_topic_authorized_operations=True,
    )


def _answer(server: Any, request: Any) -> tuple[bytes, Any]:
    """(the answer's body as the listener sent it, that body decoded by kio)."""
    conn = Connection(server.kafka.advertised)
    try:
        conn.send_frame(conn.encode(request))
        frame = conn.read_frame()
    finally:
        conn.close()
    assert frame is not None
    cls = load_response_schema(3, request.__version__)
    _header, offset = entity_reader(cls.__header_schema__)(frame, 0)
    response, size = entity_reader(cls)(frame, offset)
    assert offset + size == len(frame)
    return frame[offset:], response


def _partitions(response: Any, name: str) -> list[tuple[int, int]]:
    """(partition, leader) of topic ``name`` in ``response``."""
    (topic,) = [t for t in response.topics if t.name == name]
    return [(p.partition_index, p.leader_id) for p in topic.partitions]


@pytest.mark.parametrize("version", VERSIONS)
def test_the_spliced_answer_is_kios_encoding_byte_for_byte(broker: Any, version: int) -> None:
    server, _ = broker
    for _ in range(2):  # built and kept, then spliced from the kept bytes
        body, response = _answer(server, _request(version, None))
        assert body == _encoded(type(response), response)
        names = {t.name for t in response.topics}
        assert {"orders", "audit", consumer_offsets.TOPIC} <= names
    cls = type(response)
    entries = server.kafka.metadata_entries
    view = entries.view(entries_view(broker[1], _brokers(broker)))
    kept, built = entries.find(cls, broker[1].root.metadata.image().topics, view, ["orders"])
    assert "orders" in kept and not built  # the answer came from kept entries
    whole = entries.whole(cls, broker[1].root.metadata.image().topics, view)
    assert whole is not None and len(whole) == len(response.topics)  # and was kept whole
    internal = [t for t in response.topics if t.name == consumer_offsets.TOPIC]
    assert getattr(internal[0], "is_internal", True)  # (v1+ says so)
    assert len(internal[0].partitions) == consumer_offsets.PARTITIONS

    # named topics: kept entries beside errors (unknown, invalid, unknown id) in one answer
    ids = (uuid.uuid4(),) if version >= 12 else ()  # (v10-v11 name no topic by id alone)
    unknown = f"nope-{version}"  # (v0-v3 create it, as Kafka's auto-creation does)
    body, response = _answer(server, _request(version, ["orders", unknown, "bad name!"], ids))
    assert body == _encoded(type(response), response)
    codes = {t.name: int(t.error_code) for t in response.topics}
    assert codes["orders"] == 0 and codes["bad name!"] == 17  # INVALID_TOPIC_EXCEPTION
    assert codes[unknown] == (3 if version >= 4 else 0)  # UNKNOWN_TOPIC_OR_PARTITION
    if version >= 10:
        assert all(t.topic_id.int for t in response.topics if t.name == "orders")
    if version >= 12:
        assert codes[None] == 100  # UNKNOWN_TOPIC_ID


def _brokers(broker: Any) -> dict[int, tuple[str, int]]:
    return kafka_brokers(broker[1])


@pytest.mark.parametrize("version", [0, 3, 8, 9, 10, 12])
def test_write_splices_kept_entries_and_others_as_kio_writes_them(version: int) -> None:
    """Kept entries, entries built for one answer, authorised operations set, the
    internal topic, topic ids: the answer's bytes are kio's."""
    cls = load_response_schema(3, version)
    topic_cls = nested(cls, "MetadataResponseTopic")
    partition_cls = nested(cls, "MetadataResponsePartition")
    broker_cls = nested(cls, "MetadataResponseBroker")

    def topic(name: str, partitions: int, **extra: Any) -> Any:
        return make(
            topic_cls,
            error_code=extra.pop("error_code", 0),
            name=name,
            topic_id=uuid.uuid4(),
            is_internal=extra.pop("is_internal", False),
            partitions=tuple(
                make(
                    partition_cls,
                    error_code=0,
                    partition_index=p,
                    leader_id=p % 2,
                    leader_epoch=-1,
                    replica_nodes=(p % 2,),
                    isr_nodes=(p % 2,),
                    offline_replicas=(),
                )
                for p in range(partitions)
            ),
            **extra,
        )

    entries = TopicEntries()
    kept = [topic(f"kept-{i}", i + 1) for i in range(3)]
    for entry in kept:  # (as built from a document and a view)
        inputs = (object(), ("view",))
        entries.keep(cls, entry.name, inputs, entry, inputs)
    others = [
        topic("denied", 0, error_code=29, topic_authorized_operations=-(2**31)),
        topic("ops", 2, topic_authorized_operations=0b11111000),
        topic(consumer_offsets.TOPIC, 4, is_internal=True),
    ]
    response = make(
        cls,
        throttle_time=7,
        brokers=tuple(
            make(broker_cls, node_id=b, host=f"h{b}", port=9092 + b, rack=None) for b in (0, 1)
        ),
        cluster_id="sparklog",
        controller_id=0,
        topics=(kept[0], *others[:2], *kept[1:], others[2]),
        cluster_authorized_operations=0b1010,
    )
    out = io.BytesIO()
    entries.write(out, response)
    assert out.getvalue() == _encoded(cls, response)
    out = io.BytesIO()  # no topics at all
    entries.write(out, dataclasses.replace(response, topics=()))
    assert out.getvalue() == _encoded(cls, dataclasses.replace(response, topics=()))


def test_a_kept_entry_follows_its_topics_partitions_and_incarnation(broker: Any) -> None:
    server, state = broker
    state.create_topic("growing", 2)
    request = _request(12, None)
    _body, before = _answer(server, request)
    assert [p for p, _ in _partitions(before, "growing")] == [0, 1]
    state.root.add_partitions("growing", 5)
    grown = wait_for(
        lambda: (a := _answer(server, request)) and len(_partitions(a[1], "growing")) == 5 and a,
        timeout_s=30,
        what="the answer to show the added partitions",
    )
    assert grown[0] == _encoded(type(grown[1]), grown[1])
    old_id = next(t.topic_id for t in grown[1].topics if t.name == "growing")

    state.delete_topic("growing")
    state.create_topic("growing", 1)
    again = wait_for(
        lambda: (
            (a := _answer(server, request))
            and [t.topic_id for t in a[1].topics if t.name == "growing"] not in ([], [old_id])
            and a
        ),
        timeout_s=30,
        what="the answer to show the topic created again",
    )
    assert _partitions(again[1], "growing") == [(0, 1)]
    assert again[0] == _encoded(type(again[1]), again[1])


@pytest.mark.parametrize("listens", [True, False], ids=["kafka-listener", "flight-only"])
def test_a_kept_entry_follows_leadership_to_a_broker_that_joins_and_back(
    broker: Any, listens: bool
) -> None:
    """A broker joins and takes some shards (with a Kafka listener: it leads them in the
    answer; without: they are LEADER_NOT_AVAILABLE, the Kafka brokers unchanged), then
    leaves and they come back."""
    server, state = broker
    topic = f"spread-{listens}"
    state.create_topic(topic, 4)
    request = _request(12, None)
    _body, alone = _answer(server, request)
    assert {leader for _, leader in _partitions(alone, topic)} == {1}
    config = _config(state.root.url, 2)
    if not listens:
        config = dataclasses.replace(config, kafka_listen="")
    other_server, other = start_broker(config)[:2]
    moved = {1, 2} if listens else {1, -1}
    try:
        both = wait_for(
            lambda: (
                (a := _answer(server, request))
                and {leader for _, leader in _partitions(a[1], topic)} == moved
                and a
            ),
            timeout_s=30,
            what="leadership of some shards to move to the broker that joined",
        )
        assert both[0] == _encoded(type(both[1]), both[1])
        if listens:
            _body, theirs = _answer(other_server, request)
            assert _partitions(theirs, topic) == _partitions(both[1], topic)
        else:
            (entry,) = [t for t in both[1].topics if t.name == topic]
            assert {int(p.error_code) for p in entry.partitions if p.leader_id == -1} == {5}
    finally:
        stop_broker(other_server, other)
    back = wait_for(
        lambda: (
            (a := _answer(server, request))
            and {leader for _, leader in _partitions(a[1], topic)} == {1}
            and a
        ),
        timeout_s=30,
        what="leadership to come back when the broker left",
    )
    assert back[0] == _encoded(type(back[1]), back[1])


@pytest.mark.parametrize("version", [10, 11])
def test_a_topic_asked_by_id_before_v12_is_an_invalid_request(broker: Any, version: int) -> None:
    """Metadata v10-v11 carry a topic id field but cannot answer a topic without a name:
    Kafka refuses such a request (INVALID_REQUEST on each topic asked, a null name
    answered as ""); the broker answered nothing and dropped the connection."""
    server, inner = broker
    known = topic_uuid(inner.topic("orders").info.topic_id)
    for ids in ((uuid.uuid4(),), (known,)):
        body, response = _answer(server, _request(version, ["orders"], ids))
        assert body == _encoded(type(response), response)
        assert [(t.name, int(t.error_code)) for t in response.topics] == [
            ("orders", 42),
            ("", 42),
        ]
        assert not any(t.partitions for t in response.topics)
    # and a request the version can answer is answered as before
    body, response = _answer(server, _request(version, ["orders"]))
    assert [(t.name, int(t.error_code)) for t in response.topics] == [("orders", 0)]
