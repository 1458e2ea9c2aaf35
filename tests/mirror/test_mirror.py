"""Mirror links between roots: offsets, records and provenance kept; exactly-once across kills."""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest

from sparklog.errors import InvalidConfigurationError, PolicyViolationError
from sparklog.mirror.copier import Mirror, lag, promote
from sparklog.mirror.links import (
    MirrorLinkExistsError,
    UnknownMirrorLinkError,
    create_link,
    delete_link,
    get_link,
    list_links,
    set_paused,
)
from sparklog.storage import LogRoot, make_batch, open_root
from sparklog.storage.maintenance import delete_records
from tests.mirror.support import (
    REPO,
    assert_same,
    kill,
    mirrored_total,
    produce,
    records,
    run_once,
    start_mirror,
    wait_for,
)
from tests.support.s3 import MotoS3


def _roots(tmp_path, moto_s3: MotoS3) -> tuple[LogRoot, LogRoot]:
    """A source on moto's S3 (one region) and a destination in a local folder (another)."""
    source = open_root(moto_s3.fresh_root(), moto_s3.storage_options, create=True)
    dest = open_root(f"file://{tmp_path}/dest", {}, create=True)
    return source, dest


def _link(dest: LogRoot, source: LogRoot, name: str = "dr", **kwargs) -> None:
    create_link(
        dest,
        name,
        source=source.url,
        source_options=source.store.storage_options,
        topics=kwargs.pop("topics", ".*"),
        **kwargs,
    )


def test_links_live_in_the_destinations_metadata_log(tmp_path):
    dest = open_root(f"file://{tmp_path}/dest", {}, create=True)
    create_link(dest, "dr", source=str(tmp_path / "src"), topics="orders|pay.*", groups="g.*")
    with pytest.raises(MirrorLinkExistsError):
        create_link(dest, "dr", source="/elsewhere", topics=".*")
    with pytest.raises(InvalidConfigurationError, match="is this root"):
        create_link(dest, "self", source=str(tmp_path / "dest"), topics=".*")
    with pytest.raises(InvalidConfigurationError, match="regular expression"):
        create_link(dest, "bad", source="/elsewhere", topics="(")
    link = get_link(dest, "dr")
    assert link.source == f"file://{tmp_path}/src"  # relative paths: the same from any runner
    assert link.selects_topic("orders") and link.selects_topic("payments")
    assert not link.selects_topic("orders2") and link.selects_group("g1")
    assert dest.metadata.image().mirror_links["dr"]["topics"] == "orders|pay.*"
    assert set_paused(dest, "dr", True).paused
    assert not set_paused(dest, "dr", False).paused
    assert [x.name for x in list_links(dest)] == ["dr"]
    delete_link(dest, "dr")
    assert list_links(dest) == []
    with pytest.raises(UnknownMirrorLinkError):
        get_link(dest, "dr")


def test_cli_creates_lists_describes_and_runs_a_link(tmp_path):
    source = open_root(f"file://{tmp_path}/src", {}, create=True)
    source.create_topic("orders", partitions=2)
    produce(source, "orders", 2, rounds=3)

    def cli(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "sparklog", "-a", str(tmp_path / "dst"), *args],
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    cli("mirror", "create", "dr", "--source", str(tmp_path / "src"), "--topics", "orders")
    assert "dr" in cli("mirror", "list")
    assert "copied 30 records" in cli("mirror", "run", "dr", "--once")
    described = cli("--output", "json", "mirror", "describe", "dr")
    assert '"lag_records": 0' in described and '"mirror_end": 15' in described
    cli("mirror", "pause", "dr")
    assert "paused" in cli("mirror", "list")
    assert_same(source, open_root(str(tmp_path / "dst")), "orders")


def test_root_to_root_keeps_offsets_records_and_follows_partitions_and_configs(tmp_path, moto_s3):
    source, dest = _roots(tmp_path, moto_s3)
    source.create_topic("orders", partitions=3, config={"retention.ms": 3_600_000})
    produce(source, "orders", 3, rounds=4)
    _link(dest, source, topics="orders")
    mirror = Mirror(dest, get_link(dest, "dr"))
    report = mirror.step()
    assert report.topics_created == ["orders"]
    assert report.records == 60 and report.objects_copied == 4  # one object per flush
    assert assert_same(source, dest, "orders") == 60
    info = dest.describe_topic("orders")
    assert info.mirror and info.mirror["link"] == "dr" and info.config["retention.ms"] == 3_600_000
    # the source grows, gains a partition and changes a config: all follow
    source.add_partitions("orders", 4)
    source.alter_topic_config("orders", {"retention.ms": 7_200_000})
    produce(source, "orders", 4, rounds=2)
    assert mirror.step().records == 40
    assert mirror.step().records == 0  # caught up: nothing copied twice
    assert assert_same(source, dest, "orders") == 100
    info = dest.describe_topic("orders")
    assert info.partitions == 4 and info.config["retention.ms"] == 7_200_000
    assert all(x.lag_records == 0 for x in lag(dest, get_link(dest, "dr")))


def test_mirror_topics_refuse_producers_until_promoted(tmp_path, moto_s3):
    from sparklog import Producer

    source, dest = _roots(tmp_path, moto_s3)
    source.create_topic("orders", partitions=1)
    produce(source, "orders", 1, rounds=2)
    _link(dest, source)
    Mirror(dest, get_link(dest, "dr")).step()
    with pytest.raises(PolicyViolationError, match="link 'dr'") as refused:
        dest.topic("orders").append(0, records(0, 0, 1))
    assert refused.value.errno == 44  # POLICY_VIOLATION
    producer = Producer(dest.url)
    with pytest.raises(PolicyViolationError, match="mirror promote orders"):
        producer.send("orders", b"x", partition=0).get(timeout=30)
    producer.close()
    promote(dest, "orders")
    assert dest.topic("orders").append(0, records(0, 99, 1)).base_offset == 10  # the next offset
    # a promoted topic is no longer copied (the source's new records stay there)
    produce(source, "orders", 1, rounds=1)
    assert Mirror(dest, get_link(dest, "dr")).step().records == 0


def test_a_gap_from_source_retention_is_recorded(tmp_path):
    source = open_root(f"file://{tmp_path}/src", {}, create=True)
    dest = open_root(f"file://{tmp_path}/dst", {}, create=True)
    source.create_topic("t", partitions=1)
    produce(source, "t", 1, rounds=2)  # offsets 0-9 in two segments
    _link(dest, source)
    mirror = Mirror(dest, get_link(dest, "dr"))
    mirror.step()
    produce(source, "t", 1, rounds=3)  # 10-24 in three segments, then retention drops 10-19
    delete_records(source.topic("t").partition(0), 20)
    assert mirror.step().records == 5
    log = dest.topic("t").partition(0).refresh()
    assert log.high_watermark == 25 and log.mirror_gaps == [(10, 20)]
    got = dest.topic("t").partition(0).read(0)
    assert got.column("offset").to_pylist() == [*range(10), *range(20, 25)]
    assert lag(dest, get_link(dest, "dr"))[0].gaps == [(10, 20)]


def test_exactly_once_across_sigkills_while_a_producer_writes(tmp_path, moto_s3):
    _sigkill_drill(tmp_path, moto_s3, topics=2, partitions=3, kills=3)


@pytest.mark.slow
@pytest.mark.soak  # the long form of the test above
def test_exactly_once_across_ten_sigkills_four_topics_eight_partitions(tmp_path, moto_s3):
    _sigkill_drill(tmp_path, moto_s3, topics=4, partitions=8, kills=10)


def _sigkill_drill(tmp_path, moto_s3: MotoS3, *, topics: int, partitions: int, kills: int) -> None:
    """A producer writes the source (S3) while `sparklog mirror run` is SIGKILLed ``kills``
    times after it made progress; in the end both sides match record by record."""
    source, dest = _roots(tmp_path, moto_s3)
    names = [f"t{i}" for i in range(topics)]
    for i, name in enumerate(names):  # (odd topics: two shards, two commits per step)
        source.create_topic(name, partitions=partitions, config={"commit.shards": 1 + i % 2})
    _link(dest, source)
    stop = threading.Event()
    failures: list[BaseException] = []

    def write() -> None:
        try:
            r = 0
            while not stop.is_set():
                for name in names:
                    source.topic(name).produce({p: records(p, r * 3, 3) for p in range(partitions)})
                r += 1
        except BaseException as exc:  # pragma: no cover - reported below
            failures.append(exc)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    log_path = tmp_path / "mirror.log"
    try:
        seen = 0
        for _ in range(kills):
            proc = start_mirror(dest.url, "dr", None, log_path)
            wait_for(
                lambda seen=seen: mirrored_total(dest, names) > seen,
                timeout_s=120,
                what="the mirror to copy more",
            )
            kill(proc)
            seen = mirrored_total(dest, names)
    finally:
        stop.set()
        writer.join(timeout=60)
    assert not failures, failures
    run_once(dest.url, "dr", None)
    total = sum(assert_same(source, dest, name) for name in names)
    assert total == mirrored_total(dest, names) and total > 0
    # nothing recorded as a gap: the source lost nothing, so neither did the copy
    for name in names:
        for p in range(partitions):
            assert dest.topic(name).partition(p).refresh().mirror_gaps == []


def test_merged_and_compacted_source_segments_are_mirrored_with_their_offsets(tmp_path):
    from sparklog.storage.maintenance import compact, merge_small_segments

    source = open_root(f"file://{tmp_path}/src", {}, create=True)
    dest = open_root(f"file://{tmp_path}/dst", {}, create=True)
    source.create_topic("t", partitions=1, config={"cleanup.policy": "compact"})
    topic = source.topic("t")
    for _ in range(2):
        topic.append(0, records(0, 0, 5))  # the same keys twice: compaction drops 0-4
    _link(dest, source)
    mirror = Mirror(dest, get_link(dest, "dr"))
    assert mirror.step().records == 10
    topic.append(0, records(0, 5, 5))
    topic.append(0, records(0, 10, 5))
    # the source merges its segments: one straddles the copy's end (offset 10)
    assert merge_small_segments(source.topic("t"), 0).new_segments >= 1
    assert mirror.step().records == 10
    assert assert_same(source, dest, "t") == 20
    # a compacted source (segments with gaps, carrying offsets) mirrored onto a fresh root
    compact(source.topic("t"), 0)
    fresh = open_root(f"file://{tmp_path}/fresh", {}, create=True)
    _link(fresh, source)
    Mirror(fresh, get_link(fresh, "dr")).step()
    copied = assert_same(source, fresh, "t")
    assert 0 < copied < 20 and fresh.topic("t").partition(0).refresh().high_watermark == 20


def test_two_buckets_on_one_endpoint_copy_server_side(moto_s3):
    source = open_root(moto_s3.fresh_root(), moto_s3.storage_options, create=True)
    dest = open_root(moto_s3.fresh_root(), moto_s3.storage_options, create=True)
    source.create_topic("orders", partitions=2)
    produce(source, "orders", 2, rounds=3)
    _link(dest, source)
    report = Mirror(dest, get_link(dest, "dr")).step()
    assert report.objects_server_side == report.objects_copied == 3
    assert report.bytes_copied == 0  # no bytes through the mirror process
    assert assert_same(source, dest, "orders") == 30


def test_active_active_with_prefixes_never_mirrors_a_topic_back(tmp_path, moto_s3):
    east, west = _roots(tmp_path, moto_s3)
    for region, root in (("east", east), ("west", west)):
        root.create_topic("orders", partitions=2)
        produce(root, "orders", 2, rounds=2 if region == "east" else 3)
    _link(west, east, name="from-east", prefix="east.")
    _link(east, west, name="from-west", prefix="west.")
    to_west = Mirror(west, get_link(west, "from-east"))
    to_east = Mirror(east, get_link(east, "from-west"))
    for _ in range(3):  # both directions, several rounds: a cycle would show up by now
        to_west.step()
        to_east.step()
    assert east.list_topics() == ["orders", "west.orders"]
    assert west.list_topics() == ["east.orders", "orders"]
    assert assert_same(east, west, "orders", "east.orders") == 20
    assert assert_same(west, east, "orders", "west.orders") == 30
    assert west.describe_topic("east.orders").mirror["source_topic"] == "orders"


def test_run_reports_lag_as_metrics_and_keeps_its_position_while_the_source_is_away(
    tmp_path, moto_s3
):
    from sparklog.mirror.metrics import MirrorMetrics
    from sparklog.mirror.runner import run

    source, dest = _roots(tmp_path, moto_s3)
    source.create_topic("orders", partitions=2)
    produce(source, "orders", 2, rounds=2)
    _link(dest, source)
    metrics = MirrorMetrics()
    stop = threading.Event()

    def sample(name: str, **labels: str) -> float | None:
        return metrics.registry.get_sample_value(name, labels)

    def start() -> threading.Thread:
        stop.clear()
        kwargs = {"interval_ms": 10, "stop": stop, "metrics": metrics}
        runner = threading.Thread(target=run, args=(dest, "dr"), kwargs=kwargs)
        runner.start()
        return runner

    runner = start()
    try:
        wait_for(lambda: sample("sparklog_mirror_records_total", link="dr") == 20, what="copy")
        labels = {"link": "dr", "topic": "orders", "partition": "0"}
        assert sample("sparklog_mirror_lag_records", **labels) == 0
        assert sample("sparklog_mirror_up", link="dr") == 1
        set_paused(dest, "dr", True)
        produce(source, "orders", 2, rounds=1)
    finally:
        stop.set()
        runner.join(timeout=60)
    assert [x.lag_records for x in lag(dest, get_link(dest, "dr"))] == [5, 5]
    # the source region becomes unreachable: the link (re-created with its new address)
    # fails, says so, and keeps its position
    delete_link(dest, "dr")
    away = {
        **moto_s3.storage_options,
        "client_kwargs": {"endpoint_url": "http://127.0.0.1:9", "region_name": "us-east-1"},
        "config_kwargs": {"retries": {"max_attempts": 1}},
        "request_timeout_ms": 2000,
    }
    create_link(dest, "dr", source=source.url, source_options=away, topics=".*")
    runner = start()
    try:
        wait_for(lambda: sample("sparklog_mirror_up", link="dr") == 0, what="the failure")
    finally:
        stop.set()
        runner.join(timeout=60)
    assert dest.topic("orders").partition(0).refresh().high_watermark == 10
    done = subprocess.run(
        [sys.executable, "-m", "sparklog", "-a", dest.url, "mirror", "describe", "dr"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert "source unreachable" in done.stdout, done.stdout + done.stderr
    # back: the link resumes from its position, nothing copied twice
    delete_link(dest, "dr")
    _link(dest, source)
    runner = start()
    try:
        wait_for(lambda: sample("sparklog_mirror_records_total", link="dr") == 30, what="resume")
    finally:
        stop.set()
        runner.join(timeout=60)
    assert assert_same(source, dest, "orders") == 30
    delete_link(dest, "dr")
    run(dest, "dr")  # a deleted link: the runner stops at once


def test_typed_topics_follow_their_schema_evolution(tmp_path):
    import pyarrow as pa

    source = open_root(f"file://{tmp_path}/src", {}, create=True)
    dest = open_root(f"file://{tmp_path}/dst", {}, create=True)
    v1 = pa.struct([("id", pa.int64())])
    v2 = pa.struct([("id", pa.int64()), ("note", pa.string())])
    source.create_topic("typed", partitions=1, value_type=v1)
    source.topic("typed").append(0, make_batch([{"id": 1}, {"id": 2}], value_type=v1))
    source.evolve_value_type("typed", v2)
    _link(dest, source)
    mirror = Mirror(dest, get_link(dest, "dr"))
    mirror.step()
    source.topic("typed").append(0, make_batch([{"id": 3, "note": "x"}], value_type=v2))
    mirror.step()
    assert assert_same(source, dest, "typed") == 3
    assert dest.describe_topic("typed").value_type == v2


def test_a_topics_share_of_a_shared_object_is_mirrored_without_the_other_topics(tmp_path, moto_s3):
    """A broker flush of several topics writes one object for all of them
    (storage/shared_objects.py); mirroring one topic copies its byte ranges only,
    never the other topic's records, and keeps offsets and records."""
    from sparklog.storage.shared_objects import write_shared_object

    source, dest = _roots(tmp_path, moto_s3)
    source.create_topic("orders", partitions=2)
    source.create_topic("secret", partitions=1)
    for r in range(2):
        orders, secret = source.topic("orders"), source.topic("secret")
        parts = {p: orders.normalize(records(p, r * 5, 5)) for p in range(2)}
        hidden = {0: secret.normalize(make_batch([b"do-not-copy"] * 3))}
        staged = write_shared_object(
            source.store, [(orders, orders.section(parts)), (secret, secret.section(hidden))]
        )
        orders.commit(staged[0])
        secret.commit(staged[1])
    _link(dest, source, topics="orders")
    report = Mirror(dest, get_link(dest, "dr")).step()
    assert report.records == 20
    assert assert_same(source, dest, "orders") == 20
    copied = dest.topic("orders").store.list_objects("objects")
    assert copied and not dest.store.list_objects("objects")  # under the topic, not shared
    for obj in copied:
        assert b"do-not-copy" not in dest.topic("orders").store.get(obj.key)


def test_records_a_broker_journalled_and_has_not_folded_are_mirrored_with_their_offsets(
    tmp_path,
):
    """Format 3: a broker acknowledges records once its journal holds them and folds them
    into the shard logs only every fold_interval_ms. A mirror (no broker) reads the source's
    shard logs and their journal tails, so records not yet folded are mirrored at their
    offsets, and so are the later ones once folded (issue 37 item 7)."""
    from tests.chaos.inproc import inproc_broker

    url = f"file://{tmp_path}/source"
    source = open_root(url, {}, create=True)
    dest = open_root(f"file://{tmp_path}/dest", {}, create=True)
    with inproc_broker(url, fold_interval_ms=3_600_000) as (server, _):
        broker = server.broker
        broker.create_topic("orders", 2)
        for r in range(3):
            broker.produce("orders", [(p, records(p, r * 5, 5)) for p in range(2)])
        assert broker.state.journal is not None and broker.state.journal.unfolded_keys()
        _link(dest, source, topics="orders")
        mirror = Mirror(dest, get_link(dest, "dr"))
        assert mirror.step().records == 30  # read through the journal's tail
        assert assert_same(source, dest, "orders") == 30
        broker.produce("orders", [(0, records(0, 15, 5))])
        broker.produce_path.fold_shards(0)  # folded into the shard logs now
        assert not broker.state.journal.unfolded_keys()
        assert mirror.step().records == 5
        assert assert_same(source, dest, "orders") == 35
