"""The first hour of a Kafka user with the CLI (issue 14): help, addresses, read-only roots,
no silent successes, output shapes, startup imports."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.test_cli import REPO, Result, _one_error_line, _runner

COMMANDS = [
    [],
    ["topics"],
    ["topics", "create"],
    ["topics", "list"],
    ["topics", "describe"],
    ["topics", "alter"],
    ["topics", "add-partitions"],
    ["topics", "delete"],
    ["groups"],
    ["groups", "list"],
    ["groups", "describe"],
    ["groups", "reset-offsets"],
    ["groups", "delete"],
    ["groups", "delete-offsets"],
    ["produce"],
    ["consume"],
    ["offsets"],
    ["delete-records"],
    ["dump-log"],
    ["perf", "produce"],
    ["perf", "consume"],
    ["broker"],
    ["broker", "start"],
    ["demo"],
]


def _run_in(cwd: Path, *args: str, env: dict[str, str] | None = None) -> Result:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SPARKLOG_")}
    clean.update(env or {}, PYTHONPATH=str(REPO), COLUMNS="200")
    proc = subprocess.run(
        [sys.executable, "-m", "sparklog.cli", *args],
        capture_output=True,
        text=True,
        env=clean,
        cwd=cwd,
        timeout=120,
    )
    return Result(proc.returncode, proc.stdout, proc.stderr)


# -- 1. help without an address -------------------------------------------------------------
@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "sparklog")
def test_every_help_works_without_an_address(command, tmp_path):
    result = _run_in(tmp_path, *command, "--help")
    assert result.code == 0, result.err
    assert "Usage" in result.out and result.err == ""
    # 5. no type-name noise in help
    assert "<str>" not in result.out and "<bool>" not in result.out
    assert list(tmp_path.iterdir()) == []


# -- 2. read-only commands never create a root; host:port is a broker -----------------------
READ_ONLY = [
    ["topics", "list"],
    ["topics", "describe", "events"],
    ["groups", "list"],
    ["groups", "describe", "g"],
    ["consume", "events", "--timeout-ms", "200"],
    ["offsets", "events"],
]


@pytest.mark.parametrize("command", READ_ONLY, ids=" ".join)
def test_read_only_commands_never_create_a_local_root(command, tmp_path):
    result = _run_in(tmp_path, "--address", "typo-root", *command)
    _one_error_line(result, "no sparklog root", "typo-root")
    assert not (tmp_path / "typo-root").exists()


def test_read_only_commands_never_create_a_bucket(moto_s3):
    import boto3

    s3 = boto3.client(
        "s3",
        endpoint_url=moto_s3.endpoint_url,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        region_name="us-east-1",
    )
    before = {b["Name"] for b in s3.list_buckets()["Buckets"]}
    run = _runner(
        {
            "SPARKLOG_ADDRESS": "s3://mistyped-bucket/root",
            "SPARKLOG_STORAGE_KEY": "testing",
            "SPARKLOG_STORAGE_SECRET": "testing",
            "SPARKLOG_STORAGE_CLIENT_KWARGS": json.dumps(
                {"endpoint_url": moto_s3.endpoint_url, "region_name": "us-east-1"}
            ),
        },
        [],
    )
    for command in (["topics", "list"], ["groups", "describe", "g"]):
        _one_error_line(run(*command, ok=False), "mistyped-bucket")
    after = {b["Name"] for b in s3.list_buckets()["Buckets"]}
    assert "mistyped-bucket" not in after and after == before


def test_consumer_never_creates_a_root(tmp_path, monkeypatch):
    from sparklog.client.consumer import Consumer
    from sparklog.errors import SparklogError

    monkeypatch.chdir(tmp_path)
    with pytest.raises(SparklogError, match="no sparklog root"):
        Consumer("events", group_id="g")  # a Kafka user's guess: the topic as first argument
    assert list(tmp_path.iterdir()) == []


def test_host_port_means_a_broker(tmp_path):
    with socket.socket() as sock:  # a port with nobody listening
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    result = _run_in(tmp_path, "-a", f"127.0.0.1:{port}", "topics", "list")
    _one_error_line(result, f"127.0.0.1:{port}")
    assert list(tmp_path.iterdir()) == []


def test_host_port_reaches_a_running_broker(broker, tmp_path):
    address = broker.address.removeprefix("sparklog://")
    assert _run_in(tmp_path, "-a", address, "topics", "create", "hp").code == 0
    listed = _run_in(tmp_path, "-a", address, "-o", "json", "topics", "list")
    assert listed.code == 0, listed.err
    assert json.loads(listed.out) == ["hp"]
