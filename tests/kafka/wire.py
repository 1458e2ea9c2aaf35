"""Raw Kafka requests over a socket (kio-encoded), for the wire and fuzz tests."""

from __future__ import annotations

import io
import socket
import struct
from typing import Any

import pyarrow as pa
from kio.index import load_response_schema
from kio.serial import entity_reader, entity_writer

from sparklog.broker_lite.kafka.records import encode_batch
from sparklog.storage.records import make_batch


class Connection:
    """One client connection; ``call`` sends a kio request and decodes the answer."""

    def __init__(self, address: str, timeout_s: float = 30, source_host: str = "") -> None:
        # a cluster's bootstrap list: the first broker (requests a leader must answer take
        # ``Cluster.kafka_leader``'s address instead); ``source_host`` (e.g. 127.0.0.2, also
        # loopback) is another client address on this host
        host, port = address.split(",")[0].rsplit(":", 1)
        self.sock = socket.create_connection(
            (host, int(port)), timeout=timeout_s, source_address=(source_host, 0)
        )
        self.correlation = 0

    def close(self) -> None:
        self.sock.close()

    def send_frame(self, payload: bytes) -> None:
        self.sock.sendall(struct.pack(">i", len(payload)) + payload)

    def read_frame(self) -> bytes | None:
        """The next response frame, or None if the broker closed the connection."""
        head = self._read(4)
        if head is None:
            return None
        return self._read(struct.unpack(">i", head)[0])

    def _read(self, size: int) -> bytes | None:
        data = b""
        while len(data) < size:
            try:
                chunk = self.sock.recv(size - len(data))
            except (ConnectionResetError, TimeoutError):
                return None
            if not chunk:
                return None
            data += chunk
        return data

    def encode(self, request: Any, client_id: str = "wire-test") -> bytes:
        self.correlation += 1
        header_cls = request.__header_schema__
        buf = io.BytesIO()
        entity_writer(header_cls)(
            buf,
            header_cls(
                request_api_key=request.__api_key__,
                request_api_version=request.__version__,
                correlation_id=self.correlation,
                client_id=client_id,
            ),
        )
        entity_writer(type(request))(buf, request)
        return buf.getvalue()

    def call(self, request: Any) -> Any:
        self.send_frame(self.encode(request))
        return self.answer(request)

    def answer(self, request: Any) -> Any:
        """The next answer on this connection, decoded as ``request``'s response."""
        frame = self.read_frame()
        assert frame is not None, "the broker closed the connection (or no answer in time)"
        response_cls = load_response_schema(request.__api_key__, request.__version__)
        _header, offset = entity_reader(response_cls.__header_schema__)(frame, 0)
        response, _ = entity_reader(response_cls)(frame, offset)
        return response


def record_batch_bytes(values: list[bytes]) -> bytes:
    """One v2 record batch holding ``values`` (offsets from 0)."""
    batch = make_batch(values, timestamps_ms=[1_000] * len(values))
    with_offsets = pa.RecordBatch.from_arrays(
        [pa.array(range(len(values)), pa.int64()), *batch.columns],
        names=["offset", *batch.schema.names],
    )
    return encode_batch(with_offsets)


def metadata_of(*topics: str) -> Any:
    """A Metadata v12 request for ``topics`` by name (no auto-creation)."""
    from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic

    return MetadataRequest(
        topics=tuple(MetadataRequestTopic(name=name, topic_id=None) for name in topics),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )


def join_group_v9(
    conn: Connection,
    group: str,
    protocols: dict[str, bytes],
    *,
    protocol_type: str = "consumer",
    session_s: float = 10,
    rebalance_s: float = 10,
) -> Any:
    """A new member's JoinGroup v9 (``protocols``: name -> metadata), answered."""
    from datetime import timedelta

    from kio.schema.join_group.v9.request import JoinGroupRequest, JoinGroupRequestProtocol
    from kio.schema.types import GroupId
    from kio.static.primitive import i32Timedelta

    return conn.call(
        JoinGroupRequest(
            group_id=GroupId(group),
            session_timeout=i32Timedelta.parse(timedelta(seconds=session_s)),
            rebalance_timeout=i32Timedelta.parse(timedelta(seconds=rebalance_s)),
            member_id="",
            group_instance_id=None,
            protocol_type=protocol_type,
            protocols=tuple(
                JoinGroupRequestProtocol(name=name, metadata=data)
                for name, data in protocols.items()
            ),
            reason=None,
        )
    )
