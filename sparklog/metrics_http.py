"""Serving a Prometheus registry on ``/metrics`` for the long-running tools (mirror, connect)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, start_http_server


def serve(registry: CollectorRegistry, listen: str) -> int:
    """Serve ``registry`` on ``host:port`` (port 0: any free one); return the port."""
    host, _, port = listen.rpartition(":")
    server, _thread = start_http_server(int(port), addr=host or "127.0.0.1", registry=registry)
    return int(server.server_port)
