"""Is an address that Flight cannot reach a sparklog broker's Kafka listener?

A user who gives sparklog's clients (or the CLI) the Kafka port instead of the
Flight port otherwise only hears that the broker is unreachable.  gRPC's preface
makes the Kafka listener close the connection, so an unreachable address is
probed once with Kafka's own requests, hand-encoded (they are tiny and fixed):
ApiVersions v0 (any answer with our correlation id means a Kafka listener),
Metadata v1 without topics (the broker ids and addresses), and DescribeConfigs v0
of that broker (its ``sparklog.flight.address`` entry).
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass

from sparklog.errors import InvalidConfigurationError

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
CLIENT_ID = b"sparklog-probe"


@dataclass(frozen=True)
class KafkaListener:
    """What the probe learned: the address is a Kafka listener, and its Flight address
    ("" when the listener did not say)."""

    address: str
    flight_address: str


def probe(location: str, timeout_s: float = 2.0) -> KafkaListener | None:
    """The Kafka listener at ``location`` (``host:port``), or None if it is not one."""
    host, _, port = location.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s) as sock:
            conn = _Conn(sock)
            if conn.call(18, 0, b"") is None:
                return None
            return KafkaListener(location, _flight_address(conn, host, int(port)))
    except (OSError, ValueError, struct.error):
        return None


def kafka_listener_error(location: str) -> InvalidConfigurationError | None:
    """The error for a Flight client given ``location`` if it is a Kafka listener, else None."""
    found = probe(location)
    if found is None:
        return None
    flight_address = found.flight_address.removeprefix("grpc://")
    use = (
        f"use its Flight address: sparklog://{flight_address}"
        if flight_address
        else "use the broker's Flight address (its 'listen' key; `sparklog broker start` "
        "logs it as 'location')"
    )
    return InvalidConfigurationError(
        f"{location} is a Kafka protocol listener (for Kafka clients), not sparklog's "
        f"Flight listener; {use}"
    )


def _flight_address(conn: _Conn, host: str, port: int) -> str:
    try:
        meta = conn.call(3, 1, _I32.pack(0))  # Metadata v1, no topics
        if meta is None:
            return ""
        brokers, pos = [], 0
        (count,) = _I32.unpack_from(meta, pos)
        pos += 4
        for _ in range(count):
            (node_id,) = _I32.unpack_from(meta, pos)
            b_host, pos = _string(meta, pos + 4)
            (b_port,) = _I32.unpack_from(meta, pos)
            _rack, pos = _string(meta, pos + 4)
            brokers.append((node_id, b_host, b_port))
        node = next((b[0] for b in brokers if b[2] == port and b[1] == host), None)
        if node is None:
            node = next((b[0] for b in brokers if b[2] == port), None)
        if node is None:
            return ""
        key = b"sparklog.flight.address"
        body = (
            _I32.pack(1)
            + struct.pack(">b", 4)
            + _encode_string(str(node).encode())
            + _I32.pack(1)
            + _encode_string(key)
        )
        configs = conn.call(32, 0, body)  # DescribeConfigs v0 of that broker
        if configs is None:
            return ""
        pos = 4 + 4  # throttle time, results count
        (error,) = _I16.unpack_from(configs, pos)
        if error:
            return ""
        _message, pos = _string(configs, pos + 2)
        _name, pos = _string(configs, pos + 1)
        (entries,) = _I32.unpack_from(configs, pos)
        pos += 4
        for _ in range(entries):
            name, pos = _string(configs, pos)
            value, pos = _string(configs, pos)
            pos += 3  # read_only, is_default, is_sensitive
            if name == key.decode() and value:
                return value
    except (OSError, ValueError, struct.error):
        pass
    return ""


class _Conn:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.correlation = 0

    def call(self, api_key: int, version: int, body: bytes) -> bytes | None:
        """The response body (after the correlation id), or None if it is not an answer."""
        self.correlation += 1
        header = struct.pack(">hhi", api_key, version, self.correlation) + _encode_string(CLIENT_ID)
        payload = header + body
        self.sock.sendall(_I32.pack(len(payload)) + payload)
        head = self._read(4)
        if head is None:
            return None
        (size,) = _I32.unpack(head)
        if not 4 <= size <= 1 << 24:
            return None
        frame = self._read(size)
        if frame is None or _I32.unpack_from(frame, 0)[0] != self.correlation:
            return None
        return frame[4:]

    def _read(self, size: int) -> bytes | None:
        data = b""
        while len(data) < size:
            chunk = self.sock.recv(size - len(data))
            if not chunk:
                return None
            data += chunk
        return data


def _encode_string(data: bytes) -> bytes:
    return _I16.pack(len(data)) + data


def _string(buf: bytes, pos: int) -> tuple[str, int]:
    (size,) = _I16.unpack_from(buf, pos)
    pos += 2
    if size < 0:
        return "", pos
    return buf[pos : pos + size].decode("utf-8", errors="replace"), pos + size
