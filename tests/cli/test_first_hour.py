"""The first hour of a Kafka user with the CLI (issue 14): help, addresses, read-only roots,
no silent successes, output shapes, startup imports."""

from __future__ import annotations

import contextlib
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
    ["connect"],
    ["connect", "delta-sink"],
    ["connect", "postgres-source"],
    ["connect", "list"],
    ["connect", "status"],
    ["connect", "run"],
    ["connect", "stop"],
    ["mirror"],
    ["mirror", "create"],
    ["mirror", "list"],
    ["mirror", "describe"],
    ["mirror", "pause"],
    ["mirror", "resume"],
    ["mirror", "delete"],
    ["mirror", "promote"],
    ["mirror", "reverse"],
    ["mirror", "run"],
    ["users"],
    ["users", "create"],
    ["users", "delete"],
    ["users", "list"],
    ["acls"],
    ["acls", "add"],
    ["acls", "remove"],
    ["acls", "list"],
    ["quotas"],
    ["quotas", "alter"],
    ["quotas", "describe"],
    ["log"],
    ["log", "check"],
    ["log", "recover"],
    ["transactions"],
    ["transactions", "list"],
    ["transactions", "describe"],
    ["transactions", "abort"],
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
    # command summaries are whole sentences, not cut with "..."
    cut = [line for line in result.out.splitlines() if line.endswith("...")]
    assert [line for line in cut if not line.startswith("Usage:")] == []
    assert list(tmp_path.iterdir()) == []


# -- 2. read-only commands never create a root; host:port is a broker -----------------------
READ_ONLY = [
    ["topics", "list"],
    ["topics", "describe", "events"],
    ["groups", "list"],
    ["groups", "describe", "g"],
    ["consume", "events", "--timeout-ms", "200"],
    ["offsets", "events"],
    ["mirror", "list"],
    ["mirror", "describe", "dr"],
    ["connect", "list"],
    ["connect", "status", "cdc"],
    ["users", "list"],
    ["acls", "list"],
    ["quotas", "describe"],
    ["log", "check"],
    ["log", "recover", "events"],
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
    monkeypatch.delenv("SPARKLOG_ADDRESS", raising=False)
    with pytest.raises(SparklogError):
        Consumer("events", group_id="g")  # a Kafka user's guess: the topic as first argument
    with pytest.raises(SparklogError, match="no sparklog root"):
        Consumer(address="events", group_id="g")
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


@pytest.fixture
def local(tmp_path):
    """A runner on a fresh local root with topic ``t`` (2 partitions)."""
    run = _runner({"SPARKLOG_ADDRESS": str(tmp_path / "root")}, [])
    run("topics", "create", "t", "-p", "2")
    return run


# -- 4. no silent successes ------------------------------------------------------------------
def test_deleting_a_missing_group_is_an_error(local):
    _one_error_line(local("groups", "delete", "nobody", ok=False), "nobody")


def test_out_of_range_reset_targets_are_reported(local):
    local("produce", "t", "-p", "0", input="a\nb\nc\n")
    result = local("groups", "reset-offsets", "g", "--topic", "t:0", "--to-offset", "99")
    assert "clamped to 3" in result.err and "offset 99" in result.err
    doc = json.loads(local("-o", "json", "groups", "reset-offsets", "g", "-t", "t",
                           "--to-offset", "99").out)  # fmt: skip
    assert [(r["partition"], r["new"], r["clamped"]) for r in doc["partitions"]] == [
        (0, 3, True), (1, 0, True),
    ]  # fmt: skip


def test_malformed_file_writes_nothing(local, tmp_path):
    lines = tmp_path / "in.txt"
    lines.write_text("k:1\nk:2\nbroken\nk:4\n")
    _one_error_line(local("produce", "t", "-K", ":", "--file", str(lines), ok=False), "line 3")
    offsets = json.loads(local("-o", "json", "offsets", "t").out)["partitions"]
    assert sum(p["offset"] for p in offsets) == 0


def test_malformed_stdin_line_reports_what_was_written(local):
    result = local("produce", "t", "-K", ":", "-p", "1", input="k:1\nk:2\nbroken\nk:4\n", ok=False)
    _one_error_line(result, "line 3", "2 records before it were written", "partition 1: 2")
    offsets = json.loads(local("-o", "json", "offsets", "t").out)["partitions"]
    assert [p["offset"] for p in offsets] == [0, 2]


# -- 5. output -------------------------------------------------------------------------------
def test_json_shapes_and_json_errors(local):
    topic = json.loads(local("-o", "json", "topics", "describe", "t").out)
    created = json.loads(local("-o", "json", "topics", "create", "u").out)
    assert set(topic) == set(created) == {
        "topic", "topic_id", "partitions", "replication_factor", "config",
    }  # fmt: skip
    assert set(topic["partitions"][0]) == {
        "topic", "partition", "leader", "log_start_offset", "high_watermark", "size_bytes",
    }  # fmt: skip
    failed = local("-o", "json", "topics", "describe", "missing", ok=False)
    error = json.loads(failed.err)["error"]
    assert error["code"] == "UNKNOWN_TOPIC_OR_PARTITION" and "missing" in error["message"]
    assert json.loads(local("-o", "json", "topics", "delete", "u").out) == {
        "topic": "u", "deleted": True,
    }  # fmt: skip


def test_consume_honours_output_json(local):
    local("produce", "t", "-K", ":", input="k:v\n")
    got = local("-o", "json", "consume", "t", "--from-beginning", "-e")
    (doc,) = [json.loads(line) for line in got.out.splitlines()]
    assert (doc["key"], doc["value"], doc["offset"]) == ("k", "v", 0)


def test_piped_tables_are_not_cut(tmp_path):
    run = _runner({"SPARKLOG_ADDRESS": str(tmp_path / "root")}, [])
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    env.update(SPARKLOG_ADDRESS=str(tmp_path / "root"), PYTHONPATH=str(REPO))
    run("topics", "create", "t", "-c", "retention.ms=604800000", "-c", "segment.bytes=1048576")
    out = subprocess.run(
        [sys.executable, "-m", "sparklog.cli", "topics", "describe", "t"],
        capture_output=True, text=True, env=env, timeout=120,
    ).stdout  # fmt: skip
    assert "high watermark" in out and "…" not in out
    assert max(len(line) for line in out.splitlines()) <= 200


@pytest.mark.parametrize("count", [5000, 3], ids=["writing", "idle"])
def test_consume_into_head_exits_quietly(local, tmp_path, count):
    """Whether it is writing or waiting for new records, a consumer stops when head exits."""
    local("produce", "t", "-p", "0", input="".join(f"{i}\n" for i in range(count)))
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPARKLOG_")}
    env.update(SPARKLOG_ADDRESS=str(tmp_path / "root"), PYTHONPATH=str(REPO))
    proc = subprocess.run(
        f"{sys.executable} -m sparklog.cli consume t --from-beginning | head -1; "
        "echo status=${PIPESTATUS[0]}",
        shell=True, executable="/bin/bash", capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert proc.stdout.splitlines() == ["0", "status=0"] and proc.stderr == "", proc.stderr


# -- 6. startup imports ----------------------------------------------------------------------
#: what ``topics list`` on a local root must not load: Spark, pandas, Arrow and numpy (the
#: record model and the logs: listing reads topic documents only), fsspec (a local root is
#: os calls), the broker client, S3's transport, rich (plain lines need none), pydantic
#: (typer 0.29 coerces every option through it: locked below 0.29), the group coordinator,
#: the topic data handle, the logs and maintenance (not used)
HEAVY = (
    "pyspark",
    "pandas",
    "pyarrow",
    "numpy",
    "fsspec",
    "s3fs",
    "botocore",
    "aiohttp",
    "rich",
    "pydantic",
    "typer.rich_utils",
    "sparklog.groups.coordinator",
    "sparklog.storage.topics",
    "sparklog.storage.log",
    "sparklog.storage.shard_codec",
    "sparklog.storage.maintenance",
)


def _imported(cwd: Path, *args: str) -> set[str]:
    code = (
        "import sys, runpy; sys.argv = ['sparklog', *sys.argv[1:]]\n"
        "try:\n    runpy.run_module('sparklog.cli', run_name='__main__')\n"
        "except SystemExit:\n    pass\n"
        "sys.stderr.write('\\nMODULES ' + ' '.join(sorted(sys.modules)))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPARKLOG_")}
    env.update(PYTHONPATH=str(REPO))
    proc = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, cwd=cwd,
        timeout=120,
    )  # fmt: skip
    return set(proc.stderr.rsplit("MODULES ", 1)[1].split())


def test_metadata_command_imports_little(local, tmp_path):
    modules = _imported(tmp_path, "-a", str(tmp_path / "root"), "topics", "list")
    assert "sparklog.client.admin" in modules  # it did run the command
    assert [m for m in HEAVY if m in modules] == []
    help_modules = _imported(tmp_path, "--help")
    assert not [m for m in ("pyarrow", "sparklog.client", "fsspec") if m in help_modules]


def test_metadata_commands_through_a_broker_import_no_arrow(broker, tmp_path):
    """``topics list`` and ``groups list`` through a broker take the small request path
    (one DoAction over grpcio): neither Arrow Flight nor pyarrow nor numpy is loaded."""
    address = broker.address.removeprefix("sparklog://")
    assert _run_in(tmp_path, "-a", address, "topics", "create", "small-path").code == 0
    listed = _run_in(tmp_path, "-a", address, "-o", "json", "topics", "list")
    assert listed.code == 0 and json.loads(listed.out) == ["small-path"], listed.err
    for command in (("topics", "list"), ("groups", "list")):
        modules = _imported(tmp_path, "-a", address, *command)
        assert "sparklog.client.transports.flight_actions" in modules  # it did run the call
        assert [m for m in ("pyarrow", "pyarrow.flight", "numpy") if m in modules] == []


# -- 3. the everyday tools --------------------------------------------------------------------
def test_tombstones_and_parsed_headers(local):
    local("produce", "t", "-p", "0", "-K", ":", "-Z", "--parse-headers",
          input="src:cli,v:1\tk1:hello\n\tk2:\n")  # fmt: skip
    docs = [
        json.loads(line)
        for line in local("-o", "json", "consume", "t", "--from-beginning", "-e").out.splitlines()
    ]
    assert [(d["key"], d["value"], d["headers"]) for d in docs] == [
        ("k1", "hello", [["src", "cli"], ["v", "1"]]),
        ("k2", None, []),
    ]
    # Kafka's property names work too (KIP-798 parse.headers, KIP-810 null.marker)
    local("produce", "t", "-p", "1", "--property", "parse.key=true", "--property",
          "key.separator=|", "--property", "null.marker=NULL", input="k3|NULL\n")  # fmt: skip
    props = ["print.key=true", "print.offset=true", "print.partition=true"]
    got = local(
        "consume", "t", "-p", "1", "--offset", "0", "-e", *[f"--property={p}" for p in props]
    )
    assert got.out == "Partition:1\tOffset:0\tk3\tnull\n"


def test_format_string_exit_at_end_and_several_topics(local):
    local("topics", "create", "u")
    local("produce", "t", "-p", "0", "-K", ":", "-H", "h=1", input="a:x\n")
    local("produce", "u", input="plain\n")
    got = local("consume", "t", "u", "--from-beginning", "-e", "-f", "%t %k %s %p %o %h|%S")
    lines = sorted(got.out.splitlines())
    assert lines == ["t a x 0 0 h=1|1", "u  plain 0 0 |5"]
    regex = local("consume", "--include", "t|u", "--from-beginning", "-e", "-f", "%t")
    assert sorted(regex.out.split()) == ["t", "u"]


def test_alter_delete_config(local):
    local("topics", "alter", "t", "--config", "retention.ms=1000")
    assert (
        json.loads(local("-o", "json", "topics", "describe", "t").out)["config"]["retention.ms"]
        == 1000
    )
    local("topics", "alter", "t", "--delete-config", "retention.ms")
    after = json.loads(local("-o", "json", "topics", "describe", "t").out)["config"]
    assert after["retention.ms"] != 1000


def test_reset_offsets_scopes_and_files(local, tmp_path):
    local("topics", "create", "u")
    local("produce", "t", "-p", "0", input="a\nb\nc\n")
    local("produce", "t", "-p", "1", input="d\ne\n")
    local("produce", "u", input="f\n")
    local("consume", "t", "u", "--group", "g", "--from-beginning", "--max-messages", "6")

    def committed() -> dict[tuple[str, int], int]:
        doc = json.loads(local("-o", "json", "groups", "describe", "g").out)
        return {(p["topic"], p["partition"]): p["committed"] for p in doc["partitions"]}

    assert committed() == {("t", 0): 3, ("t", 1): 2, ("u", 0): 1}
    local("groups", "reset-offsets", "g", "--topic", "t:0", "--to-offset", "1", "--execute")
    assert committed() == {("t", 0): 1, ("t", 1): 2, ("u", 0): 1}
    local("groups", "reset-offsets", "g", "--all-topics", "--to-earliest", "--execute")
    assert set(committed().values()) == {0}
    exported = local("groups", "reset-offsets", "g", "-t", "t", "-t", "u", "--to-latest",
                     "--export").out  # fmt: skip
    assert exported.splitlines() == ["t,0,3", "t,1,2", "u,0,1"]
    plan = tmp_path / "plan.csv"
    plan.write_text(exported)
    local("groups", "reset-offsets", "g", "--from-file", str(plan), "--execute")
    assert committed() == {("t", 0): 3, ("t", 1): 2, ("u", 0): 1}
    current = json.loads(local("-o", "json", "groups", "reset-offsets", "g", "--all-topics",
                               "--to-current").out)  # fmt: skip
    assert all(r["new"] == r["committed"] for r in current["partitions"])
    local("groups", "reset-offsets", "g", "-t", "t", "--by-duration", "P1D", "--execute")
    assert committed() == {("t", 0): 0, ("t", 1): 0, ("u", 0): 1}
    _one_error_line(
        local("groups", "reset-offsets", "g", "-t", "t", "--by-duration", "1 day", ok=False),
        "PT1H",
    )


@pytest.mark.parametrize(
    ("args", "hint"),
    [
        (["consume", "--topic", "t"], "sparklog consume t"),
        (["topics", "list", "--bootstrap-server", "h:1"], "-a HOST:PORT"),
        (["topics", "describe", "t", "--create"], "topics create"),
        (["groups", "describe", "g", "--delete-offsets"], "groups delete-offsets"),
        (["consume", "t", "--address", "x"], "sparklog --address HOST:PORT consume"),
    ],
)
def test_kafka_flags_get_a_hint(local, args, hint):
    _one_error_line(local(*args, ok=False), hint)


def test_perf_commands(local):
    doc = json.loads(local("-o", "json", "perf", "produce", "t", "-n", "300", "-s", "64",
                           "--throughput", "2000").out)  # fmt: skip
    assert doc["records"] == 300 and doc["record_size"] == 64
    assert doc["records_per_s"] <= 2000 * 1.2  # the cap holds
    assert 0 < doc["p50_ms"] <= doc["p99_ms"] <= doc["max_ms"]
    read = json.loads(local("-o", "json", "perf", "consume", "t", "-n", "1000").out)
    assert read["records"] == 300 and read["bytes"] == 300 * 64
    table = local("perf", "produce", "t", "-n", "10").out
    assert "records/s" in table and "99th" in table


def test_delete_records_and_dump_log(local):
    local("produce", "t", "-p", "0", input="a\nb\n")
    local("produce", "t", "-p", "0", input="c\nd\n")
    dump = json.loads(local("-o", "json", "dump-log", "t", "-p", "0", "--print-data").out)
    spans = [(s["base_offset"], s["last_offset"], s["records"]) for s in dump["segments"]]
    assert spans == [(0, 1, 2), (2, 3, 2)]
    assert [r["value"] for r in dump["segments"][1]["data"]] == ["c", "d"]
    assert all(s["object"].endswith(".arrow") for s in dump["segments"])
    done = json.loads(local("-o", "json", "delete-records", "t", "-p", "0", "--offset", "3").out)
    assert done["partitions"] == [{"topic": "t", "partition": 0, "log_start_offset": 3}]
    assert local("consume", "t", "-p", "0", "--offset", "earliest", "-e").out == "d\n"
    after = json.loads(local("-o", "json", "dump-log", "t", "-p", "0").out)["segments"]
    assert [s["base_offset"] for s in after] == [2]  # the wholly deleted segment is gone
    _one_error_line(local("delete-records", "t", "--offset", "99", ok=False), "0-4")


def test_broker_start_serves_the_exported_address(local, tmp_path):
    """README: ``export SPARKLOG_ADDRESS=...; sparklog broker start`` serves that root."""
    from tests.support.waiting import wait_for

    env = {k: v for k, v in os.environ.items() if not k.startswith("SPARKLOG_")}
    env.update(SPARKLOG_ADDRESS=str(tmp_path / "root"), PYTHONPATH=str(REPO))
    env.update(SPARKLOG_METRICS_LISTEN="127.0.0.1:0")
    log_path = tmp_path / "broker.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "sparklog.cli", "broker", "start", "--listen", "127.0.0.1:0"],
            env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=log,
        )  # fmt: skip
    try:

        def started_port() -> int | None:
            """The port the broker got (port 0), from its "broker started" log line."""
            text = log_path.read_text(errors="replace")
            assert proc.poll() is None, text
            for line in text.splitlines():
                with contextlib.suppress(ValueError):
                    entry = json.loads(line)
                    if isinstance(entry, dict) and entry.get("msg") == "broker started":
                        return int(entry["port"])
            return None

        port = wait_for(started_port, 120, "the broker to start")

        def listed() -> list[str] | None:
            assert proc.poll() is None, log_path.read_text(errors="replace")
            got = _run_in(tmp_path, "-a", f"127.0.0.1:{port}", "-o", "json", "topics", "list")
            return json.loads(got.out) if got.code == 0 else None

        assert wait_for(listed, 120, "the broker") == ["t"]  # the topic made on the root
        assert not (tmp_path / "sparklog-data").exists()  # not the config file's default root
    finally:
        proc.terminate()
        proc.wait(timeout=60)


# -- Kafka reflexes and plain English (issue 29, the first hour) -----------------------------
def test_kafka_group_and_topic_reflexes(local):
    assert "with 1 partition" in local("topics", "create", "one", "-p", "1").out
    _one_error_line(
        local("topics", "alter", "one", "--partitions", "6", ok=False),
        "sparklog topics add-partitions one --partitions 6",
    )
    local("produce", "one", input="a\nb\n")
    local("consume", "one", "--group", "g", "--from-beginning", "--exit-at-end")
    by_argument = json.loads(local("-o", "json", "groups", "describe", "g").out)
    by_option = json.loads(local("-o", "json", "groups", "describe", "--group", "g").out)
    assert by_option == by_argument and by_option["group"] == "g"
    plan = local("groups", "reset-offsets", "--group", "g", "-t", "one", "--to-earliest",
                 "--dry-run")  # fmt: skip
    assert "dry run: nothing changed" in plan.err
    assert json.loads(local("-o", "json", "groups", "describe", "g").out) == by_argument
    _one_error_line(
        local("groups", "reset-offsets", "g", "-t", "one", "--to-earliest", "--dry-run",
              "--execute", ok=False),
        "--dry-run and --execute",
    )  # fmt: skip
    _one_error_line(local("groups", "describe", ok=False), "--group GROUP")
    assert "members" in local("groups", "describe", "g", "--members").out.splitlines()[0]
    assert json.loads(local("-o", "json", "groups", "list", "--state", "Empty").out) == ["g"]
    assert json.loads(local("-o", "json", "groups", "list", "--state", "Stable").out) == []


# -- issue 29 item 7: rough edges of the first hour -------------------------------------------
def test_a_root_that_is_a_file_is_named_as_such(tmp_path):
    (tmp_path / "afile").write_text("not a root")
    for command in (["topics", "list"], ["topics", "create", "x"]):
        result = _run_in(tmp_path, "--address", "afile", *command)
        _one_error_line(result, "is a file", "accepted: a folder")


def test_object_store_options_on_a_local_root_are_refused(local, tmp_path):
    result = local("-S", "endpoint=http://oops", "topics", "list", ok=False)
    _one_error_line(result, "endpoint", "not accepted for a local root")
    assert local("-S", "request_timeout_ms=5000", "topics", "list").out == "t\n"


def test_an_out_of_range_offset_is_one_warning_line_with_the_way_out(local):
    local("produce", "t", "-p", "0", input="a\nb\nc\n")
    result = local("consume", "t", "-p", "0", "--offset", "99", "-e")
    assert result.err.splitlines()[0] == (
        "warning: --offset 99 is out of range for t-0 (log start 0, end 3); reading from 3; "
        "--offset earliest reads from the log start"
    )
    assert result.out == ""


def test_the_tab_default_reads_in_consume_help(tmp_path):
    result = _run_in(tmp_path, "consume", "--help")
    [line] = [line for line in result.out.splitlines() if "--separator" in line]
    assert "[default: (tab)]" in line


def test_counts_read_as_english(local):
    assert local("produce", "t", "-p", "0", input="a\n").out == (
        "produced 1 record to t (1 partition)\n"
    )
