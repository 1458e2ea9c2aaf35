"""The fault proxy's own contract, where a test's verdict depends on it."""

from __future__ import annotations

import socket
import threading

from tests.support.tcp_proxy import FaultProxy

INTERIM = b"HTTP/1.1 100 Continue\r\n\r\n"
ANSWER = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"


def test_an_answer_sharing_a_chunk_with_100_continue_is_still_lost() -> None:
    """CI once saw a create "succeed" with every answer to be lost: S3's interim
    100 Continue and its 200 arrived in one read, and the proxy passed both."""
    upstream = socket.socket()
    upstream.bind(("127.0.0.1", 0))
    upstream.listen(1)

    def serve() -> None:
        conn, _ = upstream.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(INTERIM + ANSWER)  # one write: one chunk on loopback
            conn.recv(65536)  # until the proxy closes

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    proxy = FaultProxy.start(upstream.getsockname())
    try:
        proxy.lose_next_answers(1)
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=30) as client:
            client.sendall(b"PUT /k HTTP/1.1\r\nExpect: 100-continue\r\n\r\n")
            received = b""
            try:
                while ANSWER not in received and (chunk := client.recv(65536)):
                    received += chunk
            except ConnectionResetError:
                pass
        assert received == INTERIM
    finally:
        proxy.stop()
        upstream.close()
        server.join(timeout=10)
