"""A ZooKeeper stand-in for Burrow 1.2, which insists on one for its own bookkeeping.

Burrow 1.2 has no setting that avoids ZooKeeper: its zookeeper coordinator
panics without ``[zookeeper] servers`` and exits when it cannot create its root
path; the notifier coordinator then holds a lock there.  Nothing Kafka-related
goes through it.  This in-process server speaks just enough of ZooKeeper's
protocol (the session handshake, create with sequential names, delete, exists,
getData, getChildren/getChildren2, ping, close) over an in-memory tree; it
fires no watches and keeps no ephemeral-node semantics beyond the session.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading

OK, NO_NODE, NODE_EXISTS, UNIMPLEMENTED = 0, -101, -110, -6
CREATE, DELETE, EXISTS, GET_DATA, SET_DATA, CHILDREN, PING, CHILDREN2, CLOSE = (
    1,
    2,
    3,
    4,
    5,
    8,
    11,
    12,
    -11,
)
SEQUENTIAL = 2
STAT = struct.pack(">qqqqiiiqiiq", 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def int(self) -> int:
        (value,) = struct.unpack_from(">i", self.data, self.at)
        self.at += 4
        return int(value)

    def bytes(self) -> bytes:
        size = self.int()
        if size < 0:
            return b""
        value = self.data[self.at : self.at + size]
        self.at += size
        return value

    def string(self) -> str:
        return self.bytes().decode()


def _string(text: str) -> bytes:
    raw = text.encode()
    return struct.pack(">i", len(raw)) + raw


def _recv(conn: socket.socket, size: int) -> bytes | None:
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            return None
        data += chunk
    return data


class FakeZooKeeper:
    """``start()`` listens on 127.0.0.1 (``address``); ``stop()`` closes everything."""

    def __init__(self) -> None:
        self.nodes: dict[str, bytes] = {"/": b""}
        self.sequence = 0
        self.lock = threading.Lock()
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.address = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.conns: list[socket.socket] = []
        self.stopping = threading.Event()

    def start(self) -> FakeZooKeeper:
        threading.Thread(target=self._accept, daemon=True, name="fake-zk").start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        self.sock.close()
        for conn in self.conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()

    def _accept(self) -> None:
        while not self.stopping.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with contextlib.suppress(OSError):
            head = _recv(conn, 4)
            if head is None or _recv(conn, struct.unpack(">i", head)[0]) is None:
                return
            # protocol version, timeout (ms), session id, password (16 bytes)
            answer = struct.pack(">iiq", 0, 10_000, 1) + struct.pack(">i", 16) + bytes(16)
            conn.sendall(struct.pack(">i", len(answer)) + answer)
            while True:
                head = _recv(conn, 4)
                if head is None:
                    return
                frame = _recv(conn, struct.unpack(">i", head)[0])
                if frame is None:
                    return
                xid, opcode = struct.unpack_from(">ii", frame, 0)
                error, body = self._handle(opcode, _Reader(frame[8:]))
                reply = struct.pack(">iqi", xid, 1, error) + (body if error == OK else b"")
                conn.sendall(struct.pack(">i", len(reply)) + reply)
                if opcode == CLOSE:
                    return

    def _children(self, path: str) -> list[str]:
        prefix = path.rstrip("/") + "/"
        return sorted(
            name[len(prefix) :]
            for name in self.nodes
            if name.startswith(prefix) and "/" not in name[len(prefix) :] and name != "/"
        )

    def _handle(self, opcode: int, request: _Reader) -> tuple[int, bytes]:
        with self.lock:
            if opcode in (PING, CLOSE):
                return OK, b""
            path = request.string()
            parent = path.rsplit("/", 1)[0] or "/"
            if opcode == CREATE:
                data = request.bytes()
                for _ in range(request.int()):  # ACLs: perms, scheme, id
                    request.int(), request.string(), request.string()
                flags = request.int()
                if parent not in self.nodes:
                    return NO_NODE, b""
                if flags & SEQUENTIAL:
                    self.sequence += 1
                    path = f"{path}{self.sequence:010d}"
                if path in self.nodes:
                    return NODE_EXISTS, b""
                self.nodes[path] = data
                return OK, _string(path)
            if path not in self.nodes:
                return NO_NODE, b""
            if opcode == DELETE:
                del self.nodes[path]
                return OK, b""
            if opcode == EXISTS:
                return OK, STAT
            if opcode == GET_DATA:
                data = self.nodes[path]
                return OK, struct.pack(">i", len(data)) + data + STAT
            if opcode == SET_DATA:
                self.nodes[path] = request.bytes()
                return OK, STAT
            if opcode in (CHILDREN, CHILDREN2):
                names = self._children(path)
                body = struct.pack(">i", len(names)) + b"".join(_string(n) for n in names)
                return OK, body + (STAT if opcode == CHILDREN2 else b"")
            return UNIMPLEMENTED, b""
