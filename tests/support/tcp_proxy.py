"""A TCP proxy on 127.0.0.1 (port 0) that can lose answers: the request arrives, the reply does not.

Put in front of a real server (moto's S3), it forwards bytes both ways; after
:meth:`LossyProxy.lose_next_answers`, the next answers the server sends are
swallowed and their client connection is reset. The server has then applied the
request (it answers only afterwards) while the client saw a dropped connection:
the "outcome unknown" case of a create-only write.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from dataclasses import dataclass, field


@dataclass
class LossyProxy:
    upstream: tuple[str, int]
    _listener: socket.socket = field(init=False)
    _answers_to_lose: int = field(default=0, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)
    _open: list[socket.socket] = field(default_factory=list, init=False)

    def __post_init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        threading.Thread(target=self._accept, name="lossy-proxy", daemon=True).start()

    @property
    def url(self) -> str:
        host, port = self._listener.getsockname()[:2]
        return f"http://{host}:{port}"

    def lose_next_answers(self, count: int) -> None:
        """Swallow the next ``count`` answers (each on whichever connection sends one)."""
        with self._lock:
            self._answers_to_lose = count

    def close(self) -> None:
        self._listener.close()
        with self._lock:
            for sock in self._open:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                with contextlib.suppress(OSError):
                    sock.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.upstream)
            with self._lock:
                self._open += [client, server]
            threading.Thread(target=self._pump, args=(client, server, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, True), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, answers: bool) -> None:
        try:
            while data := source.recv(65536):
                # an interim "100 Continue" comes before the body is sent: not the answer
                if answers and not data.startswith(b"HTTP/1.1 100") and self._take_one_loss():
                    # reset (not a clean close) so the client sees its answer lost mid-way
                    sink.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    break
                sink.sendall(data)
        except OSError:
            pass
        for sock in (source, sink):  # shutdown wakes the other direction's blocked recv
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                sock.close()

    def _take_one_loss(self) -> bool:
        with self._lock:
            if self._answers_to_lose <= 0:
                return False
            self._answers_to_lose -= 1
            return True
