"""`sparklog log recover`: damaged and missing commits and snapshots of shard logs,
group logs and the metadata log repaired; a dry run changes nothing; offsets a lost
commit may have given out are given up and never given out again (issue 26)."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

from sparklog.client.transports.flight_client import BrokerClient
from sparklog.storage import make_batch, open_root
from sparklog.storage.log_check import check_root
from sparklog.topic_partition import TopicPartition
from tests.chaos.inproc import inproc_broker


def _recover(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sparklog.cli", "-a", url, "log", "recover", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def _plan(url: str, *args: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-m", "sparklog.cli", "-a", url, "-o", "json", "log", "recover", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _tree(path: pathlib.Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def _values(url: str, topic: str, partition: int) -> list[bytes]:
    table = open_root(url).topic(topic).partition(partition).read(0)
    return table.column("value").to_pylist()


def _shard_commits(root_dir: pathlib.Path, shard: int) -> list[pathlib.Path]:
    [log] = [p for p in root_dir.rglob(f"shards/{shard:05d}/log")]
    return sorted(log.glob("*.json"))


def test_a_torn_last_commit_gives_up_its_offsets_and_never_gives_them_out_again(
    tmp_path,
) -> None:
    url = f"file://{tmp_path}/root"
    root = open_root(url)
    root.create_topic("t", 2, {"commit.shards": 2})
    topic = root.topic("t")
    for i in range(3):
        topic.append(0, make_batch([b"a%d" % i, b"b%d" % i]))
    acknowledged = topic.append(0, make_batch([b"lost-1", b"lost-2", b"lost-3"]))
    assert (acknowledged.base_offset, acknowledged.record_count) == (6, 3)
    topic.append(1, make_batch([b"other"]))
    last = _shard_commits(tmp_path / "root", 0)[-1]
    last.write_bytes(last.read_bytes()[:-9])  # torn
    before = _tree(tmp_path / "root")

    plan = _plan(url, "t", "--shard", "0")  # a dry run: reads only
    assert _tree(tmp_path / "root") == before
    [log] = plan["logs"]
    assert plan["executed"] is False
    assert [r["version"] for r in log["repairs"]] == [int(last.stem)]
    assert log["repairs"][0]["problem"].startswith("damaged: a torn document")
    assert log["given_up"] == {"0": [[6, 9]]}  # exactly the torn commit's records

    done = _recover(url, "t", "--shard", "0", "--execute")
    assert done.returncode == 0, done.stderr
    assert "partition 0: offsets [6, 9) given up" in done.stdout
    assert check_root(open_root(url)).findings == []
    assert _values(url, "t", 0) == [b"a0", b"b0", b"a1", b"b1", b"a2", b"b2"]
    again = open_root(url).topic("t").append(0, make_batch([b"after"]))
    assert again.base_offset == 9  # never an acknowledged offset (6-8) again
    assert _values(url, "t", 0)[-1] == b"after"
    assert _values(url, "t", 1) == [b"other"]  # the other shard untouched
    assert _plan(url, "t")["logs"][0]["repairs"] == []  # nothing left to repair
    # the repair is remembered through snapshots: producers may continue past its gap
    snapshotting = open_root(url, snapshot_interval=1).topic("t")
    snapshotting.append(0, make_batch([b"snapshot"]))
    assert list((tmp_path / "root").rglob("shards/00000/log/*.snapshot"))
    assert open_root(url).topic("t").partition(0).refresh().repaired_ms > 0


def test_a_missing_middle_commit_keeps_the_later_ones(tmp_path) -> None:
    url = f"file://{tmp_path}/root"
    root = open_root(url)
    root.create_topic("t", 2, {"commit.shards": 1})
    topic = root.topic("t")
    for i in range(4):
        topic.append(i % 2, make_batch([b"r%d" % i, b"s%d" % i]))
    commits = _shard_commits(tmp_path / "root", 0)
    lost = commits[-2]  # partition 0's second append (offsets 2-3)
    lost.unlink()

    log = _plan(url, "t")["logs"][0]
    assert [(r["version"], r["problem"]) for r in log["repairs"]] == [(int(lost.stem), "missing")]
    assert log["given_up"] == {"0": [[2, 4]]}  # exact: where the next sound commit starts
    assert _recover(url, "t", "--execute").returncode == 0
    assert _values(url, "t", 0) == [b"r0", b"s0"]
    assert _values(url, "t", 1) == [b"r1", b"s1", b"r3", b"s3"]  # the later commit kept
    assert open_root(url).topic("t").append(0, make_batch([b"x"])).base_offset == 4
    assert check_root(open_root(url)).findings == []


def test_damaged_snapshots_are_deleted_and_the_log_rebuilt_losing_nothing(tmp_path) -> None:
    """The newest snapshot damaged: rebuilt from the one before and the commits after
    it; an older damaged one is deleted too (the log check is clean after)."""
    url = f"file://{tmp_path}/root"
    root = open_root(url, snapshot_interval=3)
    root.create_topic("t", 1)
    topic = root.topic("t")
    for i in range(10):
        topic.append(0, make_batch([b"v%d" % i]))
    snapshots = sorted((tmp_path / "root").rglob("shards/*/log/*.snapshot"))
    assert len(snapshots) >= 3
    for damaged in (snapshots[0], snapshots[-1]):
        raw = bytearray(damaged.read_bytes())
        raw[len(raw) // 2] ^= 0xFF
        damaged.write_bytes(bytes(raw))
    assert len(check_root(open_root(url)).findings) == 2

    log = _plan(url, "t")["logs"][0]
    assert sorted(log["snapshots_deleted"]) == [int(snapshots[0].stem), int(snapshots[-1].stem)]
    assert snapshots[-2].name in log["base"]
    assert log["repairs"] == [] and log["given_up"] == {}
    assert _recover(url, "t", "--execute").returncode == 0
    assert not snapshots[0].exists() and not snapshots[-1].exists()
    assert check_root(open_root(url)).findings == []
    assert _values(url, "t", 0) == [b"v%d" % i for i in range(10)]
    assert open_root(url).topic("t").append(0, make_batch([b"v10"])).base_offset == 10


def test_group_and_metadata_logs_read_on_from_the_state_before_the_damage(tmp_path) -> None:
    url = f"file://{tmp_path}/root"
    root = open_root(url)
    root.create_topic("t", 1)
    root.groups.commit("team", {TopicPartition("t", 0): 5})
    root.groups.commit("team", {TopicPartition("t", 0): 7})
    root.create_topic("later", 1)
    group_last = sorted((tmp_path / "root" / "groups").rglob("log/*.json"))[-1]
    group_last.write_bytes(b"{}")
    meta_last = sorted((tmp_path / "root" / "cluster" / "metadata" / "log").glob("*.json"))[-1]
    meta_last.write_bytes(meta_last.read_bytes()[:-3])

    assert _recover(url, "--group", "team", "--execute").returncode == 0
    assert _recover(url, "--metadata", "--execute").returncode == 0
    fresh = open_root(url)
    assert check_root(fresh).findings == []
    assert fresh.groups.fetch("team")[TopicPartition("t", 0)].offset == 5
    assert "later" not in fresh.list_topics() and "t" in fresh.list_topics()
    fresh.groups.commit("team", {TopicPartition("t", 0): 9})
    assert open_root(url).groups.fetch("team")[TopicPartition("t", 0)].offset == 9


def test_a_running_broker_serves_the_repaired_shard(tmp_path) -> None:
    """The broker refuses the damaged shard, then serves it again once recovered,
    without a restart, from past the given-up offsets."""
    url = f"file://{tmp_path}/root"
    open_root(url).create_topic("t", 1)
    # format 2: the broker's flushes are shard-log commits (journalled ones are journal
    # versions, which `log check` names: tests/storage/test_conformance.py)
    with (
        inproc_broker(url, journal_records=False) as (_, location),
        BrokerClient(location) as client,
    ):
        for i in range(3):
            client.produce("t", 0, make_batch([b"r%d" % i]))
    last = _shard_commits(tmp_path / "root", 0)[-1]
    last.write_bytes(last.read_bytes()[:-9])
    with (
        inproc_broker(url, journal_records=False) as (_, location),
        BrokerClient(location, retry_timeout_ms=60_000) as client,
    ):
        try:
            client.fetch("t", 0, 0, max_wait_ms=0)
            raise AssertionError("the damaged shard was served")
        except Exception as exc:  # CorruptRecordError naming the file
            assert last.name in str(exc)
        assert _recover(url, "t", "--execute").returncode == 0
        assert client.produce("t", 0, make_batch([b"after"])).base_offset == 3
        got = client.fetch("t", 0, 0, max_wait_ms=0).batches
        assert [v for b in got for v in b.column("value").to_pylist()] == [b"r0", b"r1", b"after"]


def test_bad_targets_are_refused_clearly(tmp_path) -> None:
    url = f"file://{tmp_path}/root"
    open_root(url).create_topic("t", 1)
    for args, words in (
        ((), "accepted: TOPIC [--shard S], --group GROUP, --metadata or --journal BROKER/ID"),
        (("t", "--metadata"), "needs one log"),
        (("t", "--shard", "4"), "--shard 4: topic 't' has shards 0-0"),
        (("--group", "nobody"), "no such group"),
        (("--journal", "nobody"), "--journal 'nobody': expected BROKER/JOURNAL_ID"),
        (("--journal", "1/nothing"), "--journal '1/nothing': no such journal"),
    ):
        done = _recover(url, *args)
        assert done.returncode != 0 and words in done.stderr, done.stderr
        assert "Traceback" not in done.stderr


def test_a_damaged_journal_version_is_repaired_and_a_new_leader_goes_on(
    tmp_path, monkeypatch
) -> None:
    """A journalling broker stops without folding (as a crash leaves it) and a version of
    its journal is damaged: every reader of the shard fails and no broker can lease it.
    `log recover --journal` puts a repair version in its place: the versions after it
    keep their records, the damaged one's offsets are given up, and a new broker leads."""
    from sparklog.errors import CorruptRecordError
    from sparklog.storage.journal import JournalRef, forget_journal

    url = f"file://{tmp_path}/root"
    open_root(url).create_topic("t", 2)
    with inproc_broker(url, fold_interval_ms=3_600_000) as (server, _):
        broker = server.broker
        for i in range(3):  # one journal version each (the lease is a shard-log commit)
            broker.produce("t", [(0, make_batch([b"a%d" % i])), (1, make_batch([b"b%d" % i]))])
        assert broker.state.journal is not None
        ref = broker.state.journal.ref
        monkeypatch.setattr(broker, "_close_journal", lambda: None)  # a crash: nothing folded
    name = f"{ref.broker}/{ref.journal}"
    versions = sorted((tmp_path / "root" / ref.prefix).glob("*.json"))
    assert [int(v.stem) for v in versions] == [0, 1, 2]
    versions[1].write_bytes(versions[1].read_bytes()[:-9])  # torn
    forget_journal(open_root(url).store, JournalRef(ref.broker, ref.journal))  # as elsewhere
    with pytest.raises(CorruptRecordError, match=versions[1].name):
        open_root(url).topic("t").partition(0).read(0)
    found = check_root(open_root(url)).findings
    assert (f"journal {name}", versions[1].name) in {(f.log, f.file[-25:]) for f in found}
    # and the shard that reads it, with the command that repairs it
    assert any(f"log recover --journal {name}`" in f.problem for f in found), found
    before = _tree(tmp_path / "root")
    # the topic's recovery finds its shard logs sound and names the journal to repair
    by_topic = _recover(url, "t")
    assert by_topic.returncode == 0, by_topic.stderr
    assert "nothing to repair" not in by_topic.stdout
    assert f"sparklog log recover --journal {name}" in by_topic.stdout
    assert _plan(url, "t")["damaged_journals"] == [name]
    assert _tree(tmp_path / "root") == before

    plan = _plan(url, "--journal", name)  # a dry run: reads only
    assert _tree(tmp_path / "root") == before
    [log] = plan["logs"]
    assert [r["version"] for r in log["repairs"]] == [1]
    assert log["given_up"] == {"t/0": [[1, 2]], "t/1": [[1, 2]]}  # what version 2 starts at

    done = _recover(url, "--journal", name, "--execute")
    assert done.returncode == 0, done.stderr
    assert "partition t/0: offsets [1, 2) given up" in done.stdout
    forget_journal(open_root(url).store, JournalRef(ref.broker, ref.journal))
    assert check_root(open_root(url)).findings == []
    partition = open_root(url).topic("t").partition(0)
    assert partition.read(0).column("offset").to_pylist() == [0, 2]
    assert _values(url, "t", 0) == [b"a0", b"a2"] and _values(url, "t", 1) == [b"b0", b"b2"]
    with inproc_broker(url) as (server, _):  # leases the shard: folds the repaired journal
        [outcome] = server.broker.produce("t", [(0, make_batch([b"after"]))])
        assert outcome.base_offset == 3  # no offset given out twice
    assert _values(url, "t", 0) == [b"a0", b"a2", b"after"]
