"""An HTTP proxy in front of the tests' S3 server that counts requests by kind.

Tests that assert how many object-store requests an operation costs put it
between a client and :class:`tests.support.s3.MotoS3` (storage options from
:meth:`CountingProxy.storage_options`) and compare :meth:`CountingProxy.snapshot`
before and after.  Kinds: GET, HEAD, PUT, POST, DELETE and LIST (a GET with a
listing query).  Listens on 127.0.0.1, port 0; :meth:`close` stops it.
(bench/economy_bench.py and bench/scale_bench.py use it too.)
"""

from __future__ import annotations

import http.client
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from tests.support.s3 import CREDENTIALS


class CountingProxy:
    """Forwards every request to ``upstream`` (an S3 endpoint URL) and counts it;
    ``latency_ms`` (low, high) holds each request that long first (uniformly drawn), as
    S3's own round trips take (benchmarks only: tests count, they never time)."""

    def __init__(self, upstream: str, latency_ms: tuple[float, float] | None = None) -> None:
        self.upstream = urlsplit(upstream)
        self.latency_ms = latency_ms
        self.counts: Counter[str] = Counter()
        self.lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _forward(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                proxy.count(self.command, self.path)
                if proxy.latency_ms is not None:
                    time.sleep(random.uniform(*proxy.latency_ms) / 1000)
                conn = http.client.HTTPConnection(
                    proxy.upstream.hostname, proxy.upstream.port, timeout=60
                )
                headers = {k: v for k, v in self.headers.items() if k.lower() != "expect"}
                conn.request(self.command, self.path, body=body, headers=headers)
                response = conn.getresponse()
                data = response.read()
                self.send_response(response.status, response.reason)
                for key, value in response.getheaders():
                    if key.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)
                conn.close()

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def storage_options(self) -> dict[str, Any]:
        """Storage options that send an s3:// root's requests through this proxy."""
        return {
            **CREDENTIALS,
            "client_kwargs": {"endpoint_url": self.url, "region_name": "us-east-1"},
        }

    def count(self, method: str, path: str) -> None:
        query = urlsplit(path).query
        kind = method
        if method == "GET" and ("list-type" in query or "prefix=" in query or path.endswith("/")):
            kind = "LIST"
        with self.lock:
            self.counts[kind] += 1

    def snapshot(self) -> Counter[str]:
        with self.lock:
            return Counter(self.counts)

    def delta(self, call: Callable[[], object]) -> Counter[str]:
        """The requests ``call()`` made (nothing else may use the proxy meanwhile)."""
        before = self.snapshot()
        call()
        after = self.snapshot()
        after.subtract(before)
        return +after

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
