"""Every CLI command run as a subprocess, as a person would, against file and s3 (moto) roots."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@dataclass
class Result:
    code: int
    out: str
    err: str


Runner = Callable[..., Result]


def _runner(env_extra: dict[str, str], global_args: list[str]) -> Runner:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPARKLOG_")}
    env.update(env_extra, PYTHONPATH=str(REPO), COLUMNS="200")

    def run(*args: str, input: str | None = None, ok: bool = True) -> Result:
        proc = subprocess.run(
            [sys.executable, "-m", "sparklog.cli", *global_args, *args],
            input=input,
            capture_output=True,
            text=True,
            env=env,
            cwd=REPO,
            timeout=120,
        )
        result = Result(proc.returncode, proc.stdout, proc.stderr)
        if ok and proc.returncode != 0:
            raise AssertionError(f"sparklog {' '.join(args)} failed: {proc.stderr}")
        return result

    return run


@pytest.fixture(params=["file", "s3-env", "s3-options", "broker"])
def cli(request, tmp_path) -> Runner:
    if request.param == "file":
        return _runner({"SPARKLOG_ADDRESS": str(tmp_path / "root")}, [])
    if request.param == "broker":
        cluster = request.getfixturevalue("broker")
        return _runner({}, ["--address", cluster.address])
    s3 = request.getfixturevalue("moto_s3")
    root = s3.fresh_root()
    if request.param == "s3-env":
        return _runner(
            {
                "SPARKLOG_ADDRESS": root,
                "SPARKLOG_STORAGE_KEY": "testing",
                "SPARKLOG_STORAGE_SECRET": "testing",
                "SPARKLOG_STORAGE_CLIENT_KWARGS": json.dumps(
                    {"endpoint_url": s3.endpoint_url, "region_name": "us-east-1"}
                ),
            },
            [],
        )
    return _runner(
        {},
        [
            "--address",
            root,
            "--storage-option",
            "key=testing",
            "-S",
            "secret=testing",
            "-S",
            f"client_kwargs.endpoint_url={s3.endpoint_url}",
            "-S",
            "client_kwargs.region_name=us-east-1",
        ],
    )


def _one_error_line(result: Result, *needles: str) -> None:
    assert result.code != 0
    assert "Traceback" not in result.err
    lines = [line for line in result.err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.err
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_topic_commands(cli):
    cli("topics", "create", "orders", "--partitions", "3", "--config", "retention.ms=60000")
    assert json.loads(cli("-o", "json", "topics", "list").out) == ["orders"]
    desc = json.loads(cli("--output", "json", "topics", "describe", "orders").out)
    assert [p["partition"] for p in desc["partitions"]] == [0, 1, 2]
    assert desc["config"]["retention.ms"] == 60000
    table = cli("topics", "describe", "orders").out
    assert "high watermark" in table and "retention.ms" in table
    cli("topics", "alter", "orders", "--config", "retention.ms=120000")
    cli("topics", "add-partitions", "orders", "--partitions", "5")
    desc = json.loads(cli("-o", "json", "topics", "describe", "orders").out)
    assert len(desc["partitions"]) == 5 and desc["config"]["retention.ms"] == 120000
    cli("topics", "delete", "orders")
    assert json.loads(cli("-o", "json", "topics", "list").out) == []
    _one_error_line(cli("topics", "describe", "orders", ok=False), "orders")


#: how S3 options reach the CLI (variables or -S) is all s3-env and s3-options differ in:
#: test_topic_commands checks both ways; the long tests the default run checks on s3-env
#: (the soak on both)
LONG_ON_EACH_BACKEND = pytest.mark.parametrize(
    "cli",
    ["file", "s3-env", pytest.param("s3-options", marks=pytest.mark.soak), "broker"],
    indirect=True,
)


@LONG_ON_EACH_BACKEND
def test_produce_consume_offsets_groups(cli, tmp_path):
    cli("topics", "create", "events", "-p", "2")
    cli(
        "produce", "events", "--key-separator", ":", "--header", "src=cli",
        input="k1:hello\nk2:world\nk1:again\n",
    )  # fmt: skip
    lines = tmp_path / "lines.txt"
    lines.write_text("".join(f"line-{i}\n" for i in range(50)))
    out = json.loads(cli("-o", "json", "produce", "events", "--file", str(lines)).out)
    assert out["records"] == 50
    got = cli("consume", "events", "--from-beginning", "--timeout-ms", "1500", "--format", "json")
    records = [json.loads(line) for line in got.out.splitlines()]
    assert len(records) == 53
    keyed = [r for r in records if r["key"] is not None]
    assert {(r["key"], r["value"]) for r in keyed} == {
        ("k1", "hello"), ("k2", "world"), ("k1", "again"),
    }  # fmt: skip
    assert all(r["headers"] == [["src", "cli"]] for r in keyed)
    assert len({r["partition"] for r in keyed if r["key"] == "k1"}) == 1
    # without --from-beginning a consumer starts at the end
    assert cli("consume", "events", "--timeout-ms", "800").out == ""
    part = keyed[0]["partition"]
    first = cli(
        "consume", "events", "--partition", str(part), "--offset", "1", "--max-messages", "1"
    )
    assert first.out.strip() == next(
        r["value"] for r in records if r["partition"] == part and r["offset"] == 1
    )
    assert len(cli("consume", "events", "--from-time", "2000-01-01T00:00:00Z",
                   "--timeout-ms", "1000").out.splitlines()) == 53  # fmt: skip
    assert cli("consume", "events", "--from-time", "2999-01-01", "--timeout-ms", "500").out == ""
    kv = cli("consume", "events", "--group", "audit", "--from-beginning", "--max-messages", "53",
             "--format", "key-value")  # fmt: skip
    assert "k1\thello" in kv.out.splitlines()
    offsets = {
        p["partition"]: p["offset"]
        for p in json.loads(cli("-o", "json", "offsets", "events").out)["partitions"]
    }
    assert sum(offsets.values()) == 53
    earliest = json.loads(cli("-o", "json", "offsets", "events", "--time", "earliest").out)
    assert [(p["partition"], p["offset"]) for p in earliest["partitions"]] == [(0, 0), (1, 0)]
    assert json.loads(cli("-o", "json", "groups", "list").out) == ["audit"]
    group = json.loads(cli("-o", "json", "groups", "describe", "audit").out)
    assert group["total_lag"] == 0
    assert {p["partition"]: p["committed"] for p in group["partitions"]} == {
        p: v for p, v in offsets.items()
    }
    assert "lag" in cli("groups", "describe", "audit").out
    plan = json.loads(cli("-o", "json", "groups", "reset-offsets", "audit", "--topic", "events",
                          "--to-earliest").out)  # fmt: skip
    assert not plan["executed"] and {r["new"] for r in plan["partitions"]} == {0}
    group = json.loads(cli("-o", "json", "groups", "describe", "audit").out)
    assert group["total_lag"] == 0, "a dry run changes nothing"
    cli("groups", "reset-offsets", "audit", "--topic", "events", "--shift-by", "-2", "--execute")
    shifted = sum(min(2, end) for end in offsets.values())  # clamped at the log start
    assert json.loads(cli("-o", "json", "groups", "describe", "audit").out)["total_lag"] == shifted
    again = cli("consume", "events", "--group", "audit", "--max-messages", str(shifted))
    assert len(again.out.splitlines()) == shifted
    cli("groups", "reset-offsets", "audit", "--topic", "events", "--to-datetime",
        "2000-01-01T00:00:00Z", "--execute")  # fmt: skip
    assert json.loads(cli("-o", "json", "groups", "describe", "audit").out)["total_lag"] == 53
    for how in (["--to-latest"], ["--to-offset", "1"]):
        cli("groups", "reset-offsets", "audit", "--topic", "events", *how, "--execute")
    cli("groups", "delete", "audit")
    assert json.loads(cli("-o", "json", "groups", "list").out) == []


MISTAKES = [
    (["topics", "describe", "missing"], ["missing"]),
    (["topics", "create", "bad name!"], ["accepted"]),
    (["topics", "create", "t", "--config", "retention.ms=soon"], ["retention.ms"]),
    (["topics", "create", "t", "--config", "nonsense"], ["key=value"]),
    (["topics", "create", "t", "--bogus"], ["--bogus"]),
    (["topics", "nope"], ["nope"]),
    (["--output", "yaml", "topics", "list"], ["table, json"]),
    (["offsets", "missing"], ["missing"]),
    (["offsets", "t0", "--time", "yesterday"], ["yesterday", "ISO 8601"]),
    (["consume", "t0", "--format", "xml"], ["value, key-value, json"]),
    (["consume", "missing", "--group", "g"], ["missing"]),
    (["consume", "t0", "--partition", "7"], ["0-0"]),
    (["consume", "t0", "--from-time", "not-a-time"], ["not-a-time"]),
    (["produce", "t0", "--file", "/no/such/file"], ["/no/such/file"]),
    (["produce", "t0", "--key-separator", ":"], ["line 1", "separator"]),
    (["groups", "reset-offsets", "g", "--topic", "t0"], ["to-earliest"]),
    (["groups", "describe", "nobody"], ["nobody"]),
]


@LONG_ON_EACH_BACKEND
def test_user_mistakes_are_one_line(cli):
    cli("topics", "create", "t0")
    for args, needles in MISTAKES:
        _one_error_line(cli(*args, input="no-separator\n", ok=False), *needles)


def test_bad_addresses_are_one_line(tmp_path):
    for address, needle in [
        ("sparklog://nohost", "host:port"),
        ("ftp://x/y", "ftp"),
        ("s3://", "bucket"),
    ]:
        run = _runner({"SPARKLOG_ADDRESS": address}, [])
        _one_error_line(run("topics", "list", ok=False), needle)
    unreachable = _runner({}, ["--address", "sparklog://127.0.0.1:1"])
    result = unreachable("topics", "list", ok=False)
    _one_error_line(result)
    assert "127.0.0.1:1" in result.err
