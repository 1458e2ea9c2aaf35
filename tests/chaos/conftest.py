"""Chaos fixtures: the moto S3 server behind a fault-injecting proxy."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

import pytest

from tests.chaos.proxy import FaultProxy
from tests.support.s3 import MotoS3


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


@pytest.fixture
def proxied_s3(moto_s3: MotoS3) -> Iterator[ProxiedS3]:
    url = urlparse(moto_s3.endpoint_url)
    proxy = FaultProxy.start((url.hostname or "127.0.0.1", int(url.port or 80)))
    try:
        yield ProxiedS3(moto_s3, proxy, moto_s3.fresh_root())
    finally:
        proxy.stop()
