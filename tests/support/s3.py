"""A real S3 endpoint for tests: moto's server in a thread on 127.0.0.1, port 0."""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from typing import Any

import boto3
from moto.server import ThreadedMotoServer

CREDENTIALS = {"key": "testing", "secret": "testing"}


@dataclass
class MotoS3:
    server: ThreadedMotoServer
    endpoint_url: str

    @classmethod
    def start(cls) -> MotoS3:
        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        host, port = server.get_host_and_port()
        return cls(server, f"http://{host}:{port}")

    def stop(self) -> None:
        self.server.stop()

    @property
    def storage_options(self) -> dict[str, Any]:
        return {
            **CREDENTIALS,
            "client_kwargs": {"endpoint_url": self.endpoint_url, "region_name": "us-east-1"},
        }

    def env(self) -> dict[str, str]:
        """Environment variables that point boto-based tools at this server."""
        return {
            "AWS_ACCESS_KEY_ID": CREDENTIALS["key"],
            "AWS_SECRET_ACCESS_KEY": CREDENTIALS["secret"],
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": self.endpoint_url,
        }

    def fresh_root(self) -> str:
        """A new bucket, returned as an ``s3://bucket/prefix`` root URL."""
        bucket = f"b-{uuid.uuid4().hex[:20]}"
        boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            aws_access_key_id=CREDENTIALS["key"],
            aws_secret_access_key=CREDENTIALS["secret"],
            region_name="us-east-1",
        ).create_bucket(Bucket=bucket)
        return f"s3://{bucket}/root"
