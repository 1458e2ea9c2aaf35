"""The listener's answers to unusual and bad requests, at the byte level."""

from __future__ import annotations

import struct
from collections.abc import Callable
from datetime import timedelta

import pytest
from kio.index import load_response_schema
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.errors import ErrorCode
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.serial import entity_reader

from sparklog.broker_lite.kafka.versions import API_TABLE
from tests.kafka.wire import Connection, record_batch_bytes
from tests.support.brokers import Cluster


@pytest.fixture
def conn(brokers: Cluster):
    c = Connection(brokers.brokers[0].kafka_address)
    yield c
    c.close()


@pytest.fixture
def leader_conn(brokers: Cluster):
    """A connection to the leader of a topic's partition 0 (on three brokers, another
    broker answers NOT_LEADER_OR_FOLLOWER to a Produce, as Kafka's do)."""
    opened: list[Connection] = []

    def connect(topic: str) -> Connection:
        opened.append(Connection(brokers.kafka_leader(topic, 0)))
        return opened[-1]

    yield connect
    for c in opened:
        c.close()


def produce_request(topic: str, records: bytes) -> ProduceRequest:
    return ProduceRequest(
        transactional_id=None,
        acks=-1,
        timeout=timedelta(seconds=10),
        topic_data=(
            TopicProduceData(
                name=topic, partition_data=(PartitionProduceData(index=0, records=records),)
            ),
        ),
    )


def test_api_versions_lists_exactly_the_table(conn: Connection) -> None:
    response = conn.call(ApiVersionsRequest(client_software_name="t", client_software_version="1"))
    assert response.error_code == ErrorCode.none
    assert {(k.api_key, k.min_version, k.max_version) for k in response.api_keys} == {
        (a.key, a.min_version, a.max_version) for a in API_TABLE.values()
    }


def test_newer_api_versions_gets_the_kip_511_answer(conn: Connection) -> None:
    # ApiVersions v99: the broker cannot parse it, answers v0 with UNSUPPORTED_VERSION + ranges
    conn.send_frame(struct.pack(">hhih", 18, 99, 7, -1) + b"\x00garbage")
    frame = conn.read_frame()
    assert frame is not None
    correlation, error, count = struct.unpack_from(">ihi", frame, 0)
    assert (correlation, error, count) == (7, 35, len(API_TABLE))


def test_unknown_api_and_unsupported_version_close_the_connection_as_kafka(
    brokers: Cluster,
) -> None:
    # Kafka cannot parse such a request and closes the connection (a body in some
    # other version's layout would be misread); the broker keeps serving others
    address = brokers.brokers[0].kafka_address
    for api_key, version in ((9999, 0), (0, 12), (1, 99)):
        conn = Connection(address)
        try:
            conn.send_frame(struct.pack(">hhih", api_key, version, 5, -1))
            assert conn.read_frame() is None
        finally:
            conn.close()
    conn = Connection(address)
    try:
        assert conn.call(ApiVersionsRequest(client_software_name="t", client_software_version="1"))
    finally:
        conn.close()


def test_bad_crc_and_old_magic_are_refused_per_partition(
    brokers: Cluster, leader_conn: Callable[[str], Connection]
) -> None:
    from tests.kafka.test_roundtrip import create_topic

    create_topic(brokers.kafka_bootstrap, "wire", 1)
    conn = leader_conn("wire")
    good = record_batch_bytes([b"a", b"b"])
    corrupt = good[:-1] + bytes([good[-1] ^ 0xFF])
    old_magic = good[:16] + b"\x01" + good[17:]
    for records, code in ((corrupt, 2), (old_magic, 43), (good, 0)):
        response = conn.call(produce_request("wire", records))
        part = response.responses[0].partition_responses[0]
        assert part.error_code == code
    assert part.base_offset == 0  # only the good batch was written


def test_batch_over_max_message_bytes_is_message_too_large(
    brokers: Cluster, leader_conn: Callable[[str], Connection]
) -> None:
    from tests.kafka.test_roundtrip import create_topic

    create_topic(brokers.kafka_bootstrap, "small", 1, {"max.message.bytes": "2000"})
    conn = leader_conn("small")
    response = conn.call(produce_request("small", record_batch_bytes([b"x" * 3000])))
    assert response.responses[0].partition_responses[0].error_code == 10
    response = conn.call(produce_request("small", record_batch_bytes([b"x" * 100])))
    assert response.responses[0].partition_responses[0].error_code == 0


def test_oversized_and_garbage_frames_close_only_that_connection(brokers: Cluster) -> None:
    address = brokers.brokers[0].kafka_address
    other = Connection(address)
    big = Connection(address)
    big.sock.sendall(struct.pack(">i", 2**31 - 1))
    assert big.read_frame() is None  # over kafka_max_request_bytes: closed
    garbage = Connection(address)
    garbage.send_frame(struct.pack(">hhih", 3, 12, 1, 5) + b"\xff" * 3)
    assert garbage.read_frame() is None  # a header that does not parse: closed
    assert other.call(ApiVersionsRequest(client_software_name="t", client_software_version="1"))
    for c in (other, big, garbage):
        c.close()


def test_tail_fetch_serves_the_producers_batch_at_its_committed_offset(
    brokers: Cluster, leader_conn: Callable[[str], Connection]
) -> None:
    """A consumer at the tail gets the producer's own bytes (codec kept), with the
    base offset the commit gave them; a fetch from inside that batch gets the
    records from its offset on, encoded again."""
    from aiokafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
    from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic

    from tests.kafka.test_roundtrip import create_topic

    create_topic(brokers.kafka_bootstrap, "raw", 1)
    conn = leader_conn("raw")
    sent = []
    for first in (0, 3):
        builder = DefaultRecordBatchBuilder(
            2, DefaultRecordBatch.CODEC_ZSTD, 0, -1, -1, -1, 1 << 20
        )
        for i in range(3):
            builder.append(i, 1_700_000_000_000 + first + i, None, b"value-%d" % (first + i), [])
        sent.append(bytes(builder.build()))
        response = conn.call(produce_request("raw", sent[-1]))
        assert response.responses[0].partition_responses[0].base_offset == first

    def fetch(offset: int) -> bytes:
        request = FetchRequest(
            max_wait=timedelta(milliseconds=0),
            min_bytes=1,
            topics=(
                FetchTopic(
                    topic="raw",
                    partitions=(
                        FetchPartition(
                            partition=0, fetch_offset=offset, partition_max_bytes=1 << 20
                        ),
                    ),
                ),
            ),
            forgotten_topics_data=(),
        )
        records = conn.call(request).responses[0].partitions[0].records
        assert records is not None
        return bytes(records)

    fetched = fetch(3)
    assert fetched[8:] == sent[1][8:12] + b"\x00\x00\x00\x00" + sent[1][16:]
    batch = DefaultRecordBatch(fetched)
    assert batch.validate_crc() and batch.compression_type == DefaultRecordBatch.CODEC_ZSTD
    assert [(r.offset, r.value) for r in batch] == [
        (3 + i, b"value-%d" % (3 + i)) for i in range(3)
    ]
    middle = DefaultRecordBatch(fetch(4))
    assert middle.validate_crc() and middle.compression_type == DefaultRecordBatch.CODEC_NONE
    assert [r.offset for r in middle] == [4, 5]


def test_a_request_over_many_partitions_answers_each_and_keeps_each_ones_records(
    brokers: Cluster, leader_conn: Callable[[str], Connection]
) -> None:
    """The partitions of one Produce request are decoded into one Arrow batch and
    produced in one broker call (issue #22 item 6); each still gets its own answer
    and exactly its own records and headers back."""
    import pyarrow as pa

    from sparklog.broker_lite.kafka.records import encode_batch
    from sparklog.storage import make_batch, open_root
    from tests.kafka.test_roundtrip import create_topic

    # one shard: one leader answers for all four partitions
    create_topic(brokers.kafka_bootstrap, "fan", 4, {"commit.shards": "1"})
    conn = leader_conn("fan")

    def batch(values: list[bytes], headers: list | None = None) -> bytes:
        made = make_batch(values, timestamps_ms=[1_000] * len(values), headers=headers)
        return encode_batch(
            pa.RecordBatch.from_arrays(
                [pa.array(range(len(values)), pa.int64()), *made.columns],
                names=["offset", *made.schema.names],
            )
        )

    good = batch([b"a", b"b"])
    corrupt = good[:-1] + bytes([good[-1] ^ 0xFF])
    with_headers = batch([b"c", b"d", b"e"], [None, [("h", b"1")], [("x", b"2"), ("y", None)]])
    request = ProduceRequest(
        transactional_id=None,
        acks=-1,
        timeout=timedelta(seconds=10),
        topic_data=(
            TopicProduceData(
                name="fan",
                partition_data=(
                    PartitionProduceData(index=0, records=good),
                    PartitionProduceData(index=1, records=corrupt),
                    PartitionProduceData(index=2, records=with_headers),
                    PartitionProduceData(index=3, records=good + with_headers),
                ),
            ),
        ),
    )
    parts = conn.call(request).responses[0].partition_responses
    assert [(p.index, p.error_code, p.base_offset) for p in parts] == [
        (0, 0, 0),
        (1, 2, -1),
        (2, 0, 0),
        (3, 0, 0),
    ]
    topic = open_root(brokers.root).topic("fan")
    rows = {p: topic.partition(p).read(0).to_pylist() for p in range(4)}
    assert [r["value"] for r in rows[0]] == [b"a", b"b"] and rows[1] == []
    assert [r["value"] for r in rows[2]] == [b"c", b"d", b"e"]
    assert [r["headers"] for r in rows[2]] == [
        [],
        [{"key": "h", "value": b"1"}],
        [{"key": "x", "value": b"2"}, {"key": "y", "value": None}],
    ]
    assert [r["value"] for r in rows[3]] == [b"a", b"b", b"c", b"d", b"e"]
    assert [r["headers"] for r in rows[3]][2:] == [r["headers"] for r in rows[2]]


def test_pipelined_produce_requests_land_in_the_order_sent(
    brokers: Cluster, leader_conn: Callable[[str], Connection]
) -> None:
    """Kafka appends a connection's Produce requests in the order sent, idempotent
    or not (kcat sends its lines so; CI once saw them land c, a, b).  A slow first
    request (many gzip records over two topics, so it runs on the pool) sent
    just ahead of a one-record one must still come first."""
    from aiokafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

    from tests.kafka.test_roundtrip import create_topic

    create_topic(brokers.kafka_bootstrap, "order", 1)
    conn = leader_conn("order")
    # the side topic led by the same broker (on three brokers, the first name that is)
    for attempt in range(30):
        side = f"order-side-{attempt}"
        create_topic(brokers.kafka_bootstrap, side, 1)
        if brokers.kafka_leader(side, 0) == brokers.kafka_leader("order", 0):
            break
    builder = DefaultRecordBatchBuilder(2, DefaultRecordBatch.CODEC_GZIP, 0, -1, -1, -1, 1 << 26)
    many = 20_000
    for i in range(many):
        builder.append(i, 1_700_000_000_000, None, b"first-%06d" % i, [])
    slow = bytes(builder.build())
    first = ProduceRequest(
        transactional_id=None,
        acks=-1,
        timeout=timedelta(seconds=30),
        topic_data=tuple(
            TopicProduceData(
                name=name, partition_data=(PartitionProduceData(index=0, records=slow),)
            )
            for name in (side, "order")
        ),
    )
    second = produce_request("order", record_batch_bytes([b"second"]))
    conn.sock.sendall(
        b"".join(struct.pack(">i", len(f)) + f for f in (conn.encode(first), conn.encode(second)))
    )
    answers = []
    for _ in range(2):
        frame = conn.read_frame()
        assert frame is not None
        cls = load_response_schema(0, 9)
        _header, offset = entity_reader(cls.__header_schema__)(frame, 0)
        answers.append(entity_reader(cls)(frame, offset)[0])
    order = {t.name: t.partition_responses[0] for t in answers[0].responses}["order"]
    assert (order.error_code, order.base_offset) == (0, 0)
    after = answers[1].responses[0].partition_responses[0]
    assert (after.error_code, after.base_offset) == (0, many)
