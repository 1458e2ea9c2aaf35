"""Damaged stored documents (group state, heartbeats, shard-log commits): reported as
CorruptRecordError naming the file, never as a raw parser error, a timeout or the
client's fault; the broker logs each damage once and serves every other shard.

Group-state documents are written in the checksummed envelope every stored
document shares (``storage/documents.py``), so damage that still parses as
JSON is caught too.
"""

from __future__ import annotations

import logging
import pathlib
import subprocess
import sys

import pytest

from sparklog.client.transports.flight_client import BrokerClient
from sparklog.errors import CorruptRecordError
from sparklog.groups.coordinator import GroupCoordinator
from sparklog.protocol import actions
from sparklog.storage import make_batch, open_root
from sparklog.storage.documents import encode_document, parse_document
from sparklog.storage.groups import group_key
from sparklog.topic_partition import TopicPartition
from tests.chaos.inproc import inproc_broker


def _state_files(root_dir: pathlib.Path, group: str) -> list[pathlib.Path]:
    return sorted((root_dir / group_key(group) / "state").glob("*.json"))


def _joined_group(tmp_path: pathlib.Path) -> tuple[str, GroupCoordinator]:
    url = f"file://{tmp_path}/root"
    root = open_root(url)
    root.create_topic("events", 2)
    groups = GroupCoordinator(root)
    groups.join_group("team", "", ["events"])
    return url, groups


def test_envelope_catches_damage_that_still_parses() -> None:
    raw = encode_document({"generation": 12, "members": {}})
    assert parse_document(raw, "f") == {"generation": 12, "members": {}}
    flipped = raw.replace(b"12", b"13")  # still valid JSON, wrong content
    with pytest.raises(CorruptRecordError, match="f is damaged: it fails its checksum"):
        parse_document(flipped, "f")
    with pytest.raises(CorruptRecordError, match="torn"):
        parse_document(raw[: len(raw) // 2], "f")
    # documents written before the envelope are still read
    assert parse_document(b'{"generation": 3}', "old") == {"generation": 3}


def test_a_torn_next_version_on_a_cached_read_names_the_file(tmp_path) -> None:
    _, groups = _joined_group(tmp_path)
    groups.describe_group("team")  # the state document is cached
    newest = _state_files(tmp_path / "root", "team")[-1]
    torn = newest.with_name(f"{int(newest.stem) + 1:020d}.json")
    torn.write_bytes(newest.read_bytes()[:20])  # what an unclean stop can leave
    with pytest.raises(CorruptRecordError) as info:
        groups.describe_group("team")
    assert torn.name in str(info.value) and not info.value.retriable


def test_broker_answers_damage_as_storage_damage_not_a_malformed_request(tmp_path, caplog) -> None:
    url, _ = _joined_group(tmp_path)
    newest = _state_files(tmp_path / "root", "team")[-1]
    raw = newest.read_bytes()
    newest.write_bytes(raw.replace(b'"generation":1', b'"generation":7'))  # parses; wrong
    assert newest.read_bytes() != raw
    with (
        caplog.at_level(logging.ERROR, logger="sparklog.broker_lite"),
        inproc_broker(url) as (_, location),
        BrokerClient(location) as client,
    ):
        with pytest.raises(CorruptRecordError) as info:
            client.call(actions.DESCRIBE_GROUP, group="team")
        assert newest.name in str(info.value)
        assert "malformed" not in str(info.value)
    damaged = [r for r in caplog.records if "damaged storage" in r.getMessage()]
    assert damaged and newest.name in damaged[0].getMessage()


def test_a_damaged_shard_commit_takes_only_its_shard(tmp_path, caplog) -> None:
    url = f"file://{tmp_path}/root"
    open_root(url).create_topic("t", 3, config={"commit.shards": 3})
    with inproc_broker(url) as (_, location), BrokerClient(location) as client:
        for p in range(3):
            client.produce("t", p, make_batch([b"a", b"b"]))
    shard_logs = sorted((tmp_path / "root").rglob("shards/*/log"))
    assert len(shard_logs) == 3
    commits = sorted(shard_logs[2].glob("*.json"))
    commits[-1].write_bytes(commits[-1].read_bytes()[:-10])  # a torn last commit
    with (
        caplog.at_level(logging.ERROR, logger="sparklog.broker_lite"),
        inproc_broker(url) as (_, location),
        BrokerClient(location, retry_timeout_ms=60_000) as client,
    ):
        damaged = [
            p
            for p in range(3)
            if _refused(lambda p=p: client.fetch("t", p, 0, max_wait_ms=0), commits[-1].name)
        ]
        assert len(damaged) == 1  # one shard of three: one partition
        for p in set(range(3)) - set(damaged):
            assert client.produce("t", p, make_batch([b"c"])).base_offset == 2
            got = client.fetch("t", p, 0, max_wait_ms=0).batches
            assert [v for b in got for v in b.column("value").to_pylist()] == [b"a", b"b", b"c"]
        assert _refused(
            lambda: client.produce("t", damaged[0], make_batch([b"c"])), commits[-1].name
        )
    reports = [r for r in caplog.records if "damaged storage" in r.getMessage()]
    assert len(reports) == 1 and commits[-1].name in reports[0].getMessage()


def _refused(call, file_name: str) -> bool:
    """True if ``call`` fails at once with a non-retriable CorruptRecordError naming the file."""
    try:
        call()
    except CorruptRecordError as exc:
        assert file_name in str(exc) and not exc.retriable
        return True
    return False


def test_log_check_lists_every_damaged_and_missing_file(tmp_path) -> None:
    """`sparklog log check`: a missing object; torn, flipped and missing commits and a
    damaged group log, all in one report; read-only; a sound root passes."""
    from sparklog.storage.log_check import check_root

    url = f"file://{tmp_path}/root"
    root = open_root(url)
    root.create_topic("t", 2, {"commit.shards": 2})
    topic = root.topic("t")
    for i in range(8):
        topic.append(i % 2, make_batch([b"r%d" % i]))
    root.groups.commit("team", {TopicPartition("t", 0): 1})
    root.groups.commit("team", {TopicPartition("t", 0): 2})
    assert check_root(open_root(url)).findings == []
    assert _cli_check(url).returncode == 0

    objects = sorted((tmp_path / "root").rglob("objects/*/*.arrow"))
    objects[0].unlink()
    [missing] = check_root(open_root(url)).findings
    assert missing.file == f"file://{objects[0]}"
    assert missing.problem == "missing: a live segment's object"

    shard0, shard1 = sorted((tmp_path / "root").rglob("shards/*/log"))
    s0 = sorted(shard0.glob("*.json"))
    s1 = sorted(shard1.glob("*.json"))
    assert len(s1) >= 3  # a middle commit to lose
    s0[-1].write_bytes(s0[-1].read_bytes()[:-7])  # torn
    raw = s1[-1].read_bytes()
    s1[-1].write_bytes(raw.replace(b'"base_offset":', b'"base_offsex":', 1))  # flipped bytes
    s1[1].unlink()  # a middle commit
    group_commits = sorted((tmp_path / "root" / "groups").rglob("log/*.json"))
    group_commits[-1].write_bytes(b"{}")
    before = sorted(p for p in (tmp_path / "root").rglob("*"))

    report = check_root(open_root(url))
    by_file = {f.file.removeprefix("file://"): f for f in report.findings}
    assert by_file[str(s0[-1])].problem.startswith("a torn document")
    assert "checksum" in by_file[str(s1[-1])].problem
    assert by_file[str(s1[1])].problem.startswith("missing")
    assert by_file[str(group_commits[-1])].log == "group 'team'"
    done = _cli_check(url)
    assert done.returncode == 1 and "damaged or missing file" in done.stderr
    assert sorted(p for p in (tmp_path / "root").rglob("*")) == before  # read-only


def _cli_check(url: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sparklog.cli", "-a", url, "log", "check"],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_kafka_clients_meeting_a_damaged_shard_commit_get_it_logged_once_and_counted(
    tmp_path,
) -> None:
    """Issue 36: consumers got CORRUPT_MESSAGE a hundred times over the Kafka listener
    while the brokers logged nothing. Every meeting is now counted in
    ``sparklog_damaged_storage_seen`` and the file is named in one ERROR line.

    And an idempotent librdkafka producer meeting the damaged shard stops within its
    delivery timeout (its records not persisted, so nothing is re-sent under a new
    epoch), and after ``log recover`` goes on without duplicates: the repair lost its
    acknowledged record, and the sequence gap that left is accepted once instead of
    OUT_OF_ORDER_SEQUENCE_NUMBER, which librdkafka makes fatal."""
    import re
    import urllib.request

    from confluent_kafka import Consumer, Producer
    from confluent_kafka import TopicPartition as KafkaTopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    from tests.support.brokers import Cluster
    from tests.support.waiting import wait_for

    cluster = Cluster(tmp_path, f"file://{tmp_path}/root")
    try:
        # format 2: damage to a flush's shard-log commit (a journalled broker's flushes are
        # journal versions, which `log check` names: tests/storage/test_conformance.py)
        cluster.start(0, journal_records=False)
        bootstrap = cluster.kafka_bootstrap
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("t", 3, 1, config={"commit.shards": "3"})])["t"].result(30)
        delivered: dict[bytes, str | None] = {}

        def idempotent(timeout_ms: int) -> Producer:
            config = {"enable.idempotence": True, "message.timeout.ms": timeout_ms}
            return Producer({"bootstrap.servers": bootstrap, **config})

        def produce(producer: Producer, value: bytes, partition: int, wait: bool = True) -> None:
            def report(err, msg) -> None:  # type: ignore[no-untyped-def]
                delivered[value] = None if err is None else err.name()

            producer.produce("t", value=value, partition=partition, on_delivery=report)
            if wait:
                assert producer.flush(60) == 0

        producer = idempotent(60_000)
        for p in range(3):
            produce(producer, b"a", p)
        produce(producer, b"b", 2)  # the commit to be torn: an acknowledged record
        cluster.brokers[0].terminate()
        commits = sorted(sorted((tmp_path / "root").rglob("shards/*/log"))[2].glob("*.json"))
        commits[-1].write_bytes(commits[-1].read_bytes()[:-10])  # a torn last commit
        broker = cluster.restart(0)
        url = f"http://127.0.0.1:{broker.metrics_port}/metrics"

        def seen() -> float:
            text = urllib.request.urlopen(url, timeout=10).read().decode()
            return float(re.findall(r"^sparklog_damaged_storage_seen (\S+)$", text, re.M)[0])

        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "damage-reader"})
        consumer.assign([KafkaTopicPartition("t", p, 0) for p in range(3)])
        try:
            wait_for(lambda: consumer.poll(0.2) is None and seen() >= 3, 60, "three meetings")
        finally:
            consumer.close()
        errors = [
            line
            for line in broker.log_lines()
            if line.get("levelname", line.get("level")) == "ERROR"
            and "damaged storage" in str(line.get("msg", line.get("message", "")))
        ]
        assert len(errors) == 1, errors
        assert commits[-1].name in str(errors[0])

        produce(idempotent(1_000), b"x", 2)  # refused while damaged: fails in its timeout
        assert delivered[b"x"] == "_MSG_TIMED_OUT"
        produce(producer, b"c", 2, wait=False)  # retried (not persisted) across the repair
        recover = ["log", "recover", "t", "--execute"]
        repaired = subprocess.run(
            [sys.executable, "-m", "sparklog.cli", "-a", cluster.root, *recover],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert repaired.returncode == 0, repaired.stderr
        assert producer.flush(60) == 0  # before: OUT_OF_ORDER_SEQUENCE_NUMBER, fatal
        produce(producer, b"d", 2)
        assert delivered[b"c"] is None and delivered[b"d"] is None
        values = open_root(cluster.root).topic("t").partition(2).read(0).column("value")
        assert values.to_pylist() == [b"a", b"c", b"d"]  # b lost with its commit; no duplicate
    finally:
        cluster.stop_all()
