"""Chaos fixtures: the moto S3 server behind a fault-injecting proxy.

moto checks ``If-None-Match: *`` and then stores the object, two steps a
racing PUT can pass between (S3 does both atomically).  The create-only races
of brokers would then test moto, not sparklog, so the chaos tests serialise
moto's PUT handler (:func:`atomic_moto_puts`): the server they test against
has S3's semantics for create-only writes.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

import pytest

from tests.chaos.proxy import FaultProxy
from tests.support.s3 import MotoS3


@contextmanager
def serialised_moto_puts() -> Iterator[None]:
    """While active, moto's PUT handler runs one request at a time in this process."""
    from moto.s3.responses import S3Response

    original = S3Response.put_object
    lock = threading.Lock()

    @functools.wraps(original)
    def put_object(self: Any, *args: Any, **kwargs: Any) -> Any:
        with lock:
            return original(self, *args, **kwargs)

    S3Response.put_object = put_object  # type: ignore[method-assign]
    try:
        yield
    finally:
        S3Response.put_object = original  # type: ignore[method-assign]


@dataclass
class ProxiedS3:
    """A fresh bucket on moto, reached through ``proxy``."""

    moto: MotoS3
    proxy: FaultProxy
    root: str

    def storage_options(self, request_timeout_ms: int = 2_000) -> dict[str, Any]:
        return {
            "key": "testing",
            "secret": "testing",
            "request_timeout_ms": request_timeout_ms,
            "client_kwargs": {"endpoint_url": self.proxy.endpoint_url, "region_name": "us-east-1"},
            # botocore's own retries stay inside the deadline; keep them few so tests are quick
            "config_kwargs": {"retries": {"max_attempts": 2, "mode": "standard"}},
            "skip_instance_cache": True,
        }


@pytest.fixture(scope="session", autouse=True)
def atomic_moto_puts() -> Iterator[None]:
    """Make moto's conditional PUT atomic (one PUT at a time in the test's moto server)."""
    with serialised_moto_puts():
        yield


@pytest.fixture
def proxied_s3(moto_s3: MotoS3) -> Iterator[ProxiedS3]:
    url = urlparse(moto_s3.endpoint_url)
    proxy = FaultProxy.start((url.hostname or "127.0.0.1", int(url.port or 80)))
    try:
        yield ProxiedS3(moto_s3, proxy, moto_s3.fresh_root())
    finally:
        proxy.stop()
