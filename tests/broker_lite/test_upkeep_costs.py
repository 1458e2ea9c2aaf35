"""A broker's costs that must not grow with idle topics (issue 37 items 5 and 6): idle
control ticks, cleaner passes over unchanged topics, and Metadata's work per partition.
Calls and requests are counted, never timed."""

from __future__ import annotations

import re
from contextlib import contextmanager

from sparklog.broker_lite.cleaner import Cleaner
from sparklog.storage import make_batch, open_root
from tests.chaos.inproc import inproc_broker

#: a broker whose cleaner reads every led log in its first pass (the tests of what that
#: read costs and finds; the first read's spread is tested apart)
FIRST_READ_AT_ONCE = {"cleaner_first_pass_spread_ms": 0}


def test_an_idle_tick_walks_no_topic(tmp_path, monkeypatch):
    """Issue 37: the control loop walked every topic and partition each tick, so idle CPU
    grew with topics. Leadership is derived again only when the image's topics, the live
    set or the lease's health changed (counted calls, not time)."""
    from sparklog.broker_lite.cluster import Cluster

    url = f"file://{tmp_path}/root"
    root = open_root(url)
    for i in range(20):
        root.create_topic(f"idle{i}", 4)
    asked: list[tuple[str, int]] = []
    original = Cluster.is_leader

    def counted(self, topic, partition):
        asked.append((topic, partition))
        return original(self, topic, partition)

    monkeypatch.setattr(Cluster, "is_leader", counted)
    with inproc_broker(url, metadata_refresh_ms=600_000) as (server, _):
        broker = server.broker
        broker._update_leadership()
        assert len(broker.led_partitions()) == 80
        asked.clear()
        for _ in range(3):
            broker._update_leadership()  # nothing changed
        assert asked == []
        root.create_topic("new", 2)
        broker.root.metadata.refresh()
        broker._update_leadership()
        assert {("new", 0), ("new", 1)} <= set(asked)
        assert len(broker.led_partitions()) == 82


def test_a_cleaner_pass_over_idle_topics_lists_and_writes_nothing(tmp_path, monkeypatch):
    """Issue 37: every cleaner pass listed each led topic's objects and shard logs and
    wrote its GC marks (2.93 LIST/s for an idle cluster of 1,000 topics). A topic whose
    shard logs have not moved since its last pass, with nothing waiting, is skipped: one
    probe per shard, no LIST, no PUT (requests counted, not timed); so are the cluster's
    own upkeep jobs that found nothing changed (metadata log, shared objects, groups)."""
    from sparklog.storage.objectstore import ObjectStore

    url = f"file://{tmp_path}/root"
    root = open_root(url)
    for i in range(10):
        root.create_topic(f"quiet{i}", 2)
        root.topic(f"quiet{i}").produce({0: make_batch([b"x"])})
    counts: dict[str, int] = {}
    for name in ("list_objects", "list_names", "put", "create", "create_streamed", "delete"):
        original = getattr(ObjectStore, name)

        def counted(store, *args, _name=name, _call=original, **kwargs):
            counts[_name] = counts.get(_name, 0) + 1
            return _call(store, *args, **kwargs)

        monkeypatch.setattr(ObjectStore, name, counted)
    with inproc_broker(url, **FIRST_READ_AT_ONCE) as (server, _):
        broker = server.broker
        cleaner = Cleaner(broker.upkeep, 60_000)
        cleaner.run_once()
        first = sum(counts.get(n, 0) for n in ("list_objects", "list_names"))
        assert first >= 10  # the first pass opens each log (no snapshot hint: a listing)
        counts.clear()
        summary = cleaner.run_once()
        assert summary["gc_topics"] == 10
        writes = {k: v for k, v in counts.items() if k != "list_objects" and k != "list_names"}
        topic_lists = counts.get("list_objects", 0) + counts.get("list_names", 0)
        # the cluster's upkeep too (shared objects, metadata log, groups) lists nothing now
        assert topic_lists == 0 and writes == {}, counts
        broker.produce("quiet3", [(0, make_batch([b"y"]))])  # a topic that moved
        counts.clear()
        cleaner.run_once()
        assert 1 <= counts.get("list_objects", 0) + counts.get("list_names", 0) <= 4, counts


READS = ("get", "get_or_none", "get_many", "get_buffer", "get_range", "get_tail", "exists")
LISTS_AND_WRITES = ("list_objects", "list_names", "put", "create", "create_streamed", "delete")


def count_store_calls(monkeypatch, names) -> dict[str, int]:
    """Count calls of ``names`` on every ObjectStore (the requests a pass makes)."""
    from sparklog.storage.objectstore import ObjectStore

    counts: dict[str, int] = {}
    for name in names:
        original = getattr(ObjectStore, name)

        def counted(store, *args, _name=name, _call=original, **kwargs):
            counts[_name] = counts.get(_name, 0) + 1
            return _call(store, *args, **kwargs)

        monkeypatch.setattr(ObjectStore, name, counted)
    return counts


def test_a_cleaner_pass_over_idle_partitions_makes_no_request(tmp_path, monkeypatch):
    """Issue 37 item 5: an idle cluster of 1,000 topics paid a few GETs per led partition
    every cleaner pass (probes of its shard log, twice more for GC and pruning). A led
    partition whose log this broker holds unchanged in memory, with no work due by its
    topic's rules before a later time (its oldest segment's expiry), is skipped with no
    request at all; the broker's own write to it, or its oldest segment expiring, brings
    it back into the next pass (requests counted, not timed)."""
    from sparklog.broker_lite import upkeep
    from sparklog.storage import maintenance
    from sparklog.storage.log import ShardLog

    url = f"file://{tmp_path}/root"
    root = open_root(url)
    for i in range(10):
        root.create_topic(f"still{i}", 2, {"retention.ms": 7_200_000})
        root.topic(f"still{i}").produce({0: make_batch([b"x"]), 1: make_batch([b"y"])})
    counts = count_store_calls(monkeypatch, READS + LISTS_AND_WRITES)
    clock = [upkeep.now_ms()]
    monkeypatch.setattr(upkeep, "now_ms", lambda: clock[0])
    monkeypatch.setattr(maintenance, "now_ms", lambda: clock[0])
    monkeypatch.setattr(upkeep, "SHARED_GC_INTERVAL_MS", 1 << 50)  # another job, counted apart
    # so are the topics' GC and pruning, whose first full pass may fall within the hour
    monkeypatch.setattr(upkeep, "_full_pass_offset_ms", lambda topic: 1 << 40)
    with inproc_broker(
        url, **FIRST_READ_AT_ONCE, metadata_refresh_ms=600_000, gc_grace_ms=1 << 40
    ) as (server, _):
        broker = server.broker
        cleaner = Cleaner(broker.upkeep, 60_000)
        cleaner.run_once()
        counts.clear()
        summary = cleaner.run_once()
        assert summary["partitions"] == 20 and summary["errors"] == 0
        assert counts == {}, counts  # 20 partitions, 10 topics: not one request
        clock[0] += upkeep.UPKEEP_RECHECK_MS  # memory is trusted for so long: one probe each
        counts.clear()
        probes = []
        probe = ShardLog.refresh
        monkeypatch.setattr(
            ShardLog, "refresh", lambda log, *a: probes.append(log) or probe(log, *a)
        )
        cleaner.run_once()
        monkeypatch.setattr(ShardLog, "refresh", probe)
        assert len(probes) == len(set(map(id, probes))) == 10  # one per shard, not per partition
        assert not any(counts.get(n) for n in LISTS_AND_WRITES), counts
        counts.clear()
        cleaner.run_once()
        assert counts == {}, counts
        clock[0] += 7_200_000  # every topic's records are past retention.ms now
        cleaner.run_once()
        assert all(
            broker.topic(f"still{i}").partition(p).refresh().log_start_offset >= 1
            for i in range(10)
            for p in range(2)
        )
        cleaner.run_once()
        counts.clear()
        broker.produce("still3", [(1, make_batch([b"z"]))])
        cleaner.run_once()
        assert sum(counts.get(n, 0) for n in READS) >= 1, counts  # the moved one is read


def test_a_brokers_first_pass_reads_each_idle_log_once(tmp_path, monkeypatch):
    """At a broker's start the cleaner's first pass opened its own handle of every led
    topic and read every shard log again beside the broker's own, and listed every
    topic's log folder to prune it: about 2,200 requests a minute for 100 idle topics on
    S3. Now a partition with nothing due is judged on the broker's own read of its log,
    and a log too young to have a snapshot is not listed for pruning."""
    from sparklog.broker_lite.upkeep import Upkeep

    url = f"file://{tmp_path}/root"
    root = open_root(url)
    for i in range(10):
        root.create_topic(f"fresh{i}", 2, {"retention.ms": 7_200_000})
        root.topic(f"fresh{i}").produce({0: make_batch([b"x"]), 1: make_batch([b"y"])})
    counts = count_store_calls(monkeypatch, LISTS_AND_WRITES)
    opened: list[str] = []
    original = Upkeep._maintenance_topic
    monkeypatch.setattr(
        Upkeep, "_maintenance_topic", lambda self, name: opened.append(name) or original(self, name)
    )
    with inproc_broker(url, **FIRST_READ_AT_ONCE, metadata_refresh_ms=600_000) as (server, _):
        counts.clear()
        summary = Cleaner(server.broker.upkeep, 60_000).run_once()
    assert summary["partitions"] == 20 and summary["errors"] == 0
    assert opened == []  # nothing due: no second handle, no second read
    # the cluster's own upkeep lists the metadata log and the shared objects once each;
    # GC and pruning list no topic: what a previous leader left waits for the topic's
    # slot of the daily full pass (opening a log without a snapshot hint lists its folder
    # once: list_names)
    assert counts.get("list_objects", 0) <= 2, counts


def test_a_topic_whose_retention_is_altered_is_maintained_at_the_next_pass(tmp_path, monkeypatch):
    """A partition skipped because nothing was due by its topic's rules comes back into the
    next pass when the rules change (an altered retention.ms), not when the old rules
    would have made it due."""
    from sparklog.broker_lite import upkeep
    from sparklog.storage import maintenance

    url = f"file://{tmp_path}/root"
    root = open_root(url)
    for name in ("kept", "shortened"):
        root.create_topic(name, 1, {"retention.ms": 7 * 24 * 3_600_000})
        root.topic(name).produce({0: make_batch([b"x"])})
    clock = [upkeep.now_ms()]
    monkeypatch.setattr(upkeep, "now_ms", lambda: clock[0])
    monkeypatch.setattr(maintenance, "now_ms", lambda: clock[0])
    with inproc_broker(url, metadata_refresh_ms=600_000) as (server, _):
        broker = server.broker
        cleaner = Cleaner(broker.upkeep, 60_000)
        cleaner.run_once()
        cleaner.run_once()  # both skipped: due in a week
        broker.alter_topic_config("shortened", {"retention.ms": "60000"}, [])
        # read-your-writes: the broker's image holds its own alter once it is answered
        assert broker.root.describe_topic("shortened").config["retention.ms"] == 60_000
        # the broker re-opens the altered topic; a reader (a fetch) reads its log before the
        # cleaner's next pass does (CI once saw this order: retention never ran)
        st = broker.state.partition_state(broker.state.topic("shortened"), 0)
        with st.lock:
            st.refresh()
        clock[0] += 120_000
        cleaner.run_once()
        starts = {
            n: broker.topic(n).partition(0).refresh().log_start_offset
            for n in ("kept", "shortened")
        }
        assert starts == {"kept": 0, "shortened": 1}


def test_metadata_reads_a_topics_config_once_not_once_per_partition(tmp_path, monkeypatch):
    """An all-topics Metadata derived each partition's shard from the topic's whole
    effective config (a dict of every Kafka key), so its CPU grew faster than its
    partitions; now once per topic."""
    from sparklog.storage import catalog

    url = f"file://{tmp_path}/root"
    root = open_root(url)
    for i in range(5):
        root.create_topic(f"wide{i}", 64)
    calls = []
    original = catalog.effective_config

    def counted(config):
        calls.append(1)
        return original(config)

    monkeypatch.setattr(catalog, "effective_config", counted)
    with inproc_broker(url) as (server, _):
        answer = server.broker.metadata()
        calls.clear()
        answer = server.broker.metadata()
    assert sum(len(t["partitions"]) for t in answer["topics"].values()) == 5 * 64
    assert len(calls) <= 5 * 2, len(calls)


def test_idle_passes_list_nothing_while_old_metadata_commits_wait_out_their_retention(
    tmp_path, monkeypatch
):
    """Issue 37: after a cluster created many topics, an idle cleaner still made about one
    LIST per pass: the metadata log's commits below its newest snapshot wait out the
    one-hour log retention, and each pass listed the log again to find them still
    waiting. A pass now remembers when the oldest waiting file comes of age and lists
    again only then (or once the log moves), when it deletes them."""
    url = f"file://{tmp_path}/root"
    root = open_root(url, snapshot_interval=4)
    for i in range(12):  # snapshots of the metadata log, with commits below them
        root.create_topic(f"made{i}", 1)
    counts = count_store_calls(monkeypatch, ("list_objects", "list_names"))
    with inproc_broker(url, metadata_refresh_ms=600_000) as (server, _):
        cleaner = Cleaner(server.broker.upkeep, 60_000)
        clock = [cleaner.clock_ms()]
        cleaner.clock_ms = lambda: clock[0]
        assert cleaner.run_once().get("pruned_files", 0) == 0  # all younger than an hour
        for _ in range(3):
            counts.clear()
            cleaner.run_once()
            assert counts == {}, counts
        clock[0] += 2 * 60 * 60 * 1000  # of age now: the next pass lists and deletes them
        assert cleaner.run_once()["pruned_files"] >= 8


@contextmanager
def _two_topics_rechecked(tmp_path, monkeypatch, asked: list[str]):
    """A broker leading topics ``kept`` and ``gone`` (4 partitions, 2 shards each), its
    cleaner past a first pass and an hourly recheck (which probed each shard); ``asked``
    collects the topics whose rules the broker's root is asked for in that second pass."""
    from sparklog.broker_lite import upkeep

    url = f"file://{tmp_path}/root"
    root = open_root(url)
    for name in ("kept", "gone"):
        root.create_topic(name, 4, {"commit.shards": 2})
    clock = [upkeep.now_ms()]
    monkeypatch.setattr(upkeep, "now_ms", lambda: clock[0])
    with inproc_broker(url, **FIRST_READ_AT_ONCE, metadata_refresh_ms=600_000) as (server, _):
        broker = server.broker
        describe = broker.root.describe_topic  # the real root, counted
        monkeypatch.setattr(
            broker.root, "describe_topic", lambda name: asked.append(name) or describe(name)
        )
        cleaner = Cleaner(broker.upkeep, 60_000)
        cleaner.run_once()  # (its GC of each topic, listed once, reads the rules again)
        clock[0] += upkeep.UPKEEP_RECHECK_MS  # the hourly recheck probes each shard once
        asked.clear()
        cleaner.run_once()
        yield broker, cleaner


def test_a_pass_reads_each_topics_rules_once_not_once_per_partition(tmp_path, monkeypatch):
    """The cleaner asked the metadata image for a topic's rules once per partition per
    pass; once per topic is enough."""
    from collections import Counter

    asked: list[str] = []
    with _two_topics_rechecked(tmp_path, monkeypatch, asked):
        assert Counter(asked) == {"kept": 1, "gone": 1}  # 4 each before


def test_a_pass_forgets_the_shards_of_a_deleted_topic(tmp_path, monkeypatch):
    """The cleaner kept its probe times of shards it no longer led (deleted topics,
    leadership moved) for ever."""
    with _two_topics_rechecked(tmp_path, monkeypatch, []) as (broker, cleaner):
        assert {key[0] for key in broker.upkeep._probed} == {"kept", "gone"}
        broker.delete_topic("gone")
        broker._update_leadership()
        cleaner.run_once()
        assert {key[0] for key in broker.upkeep._probed} == {"kept"}
        assert len(broker.upkeep._probed) == 2  # kept's two shards


def test_a_broker_start_and_its_first_cleaner_pass_cost_about_a_request_per_topic(moto_s3):
    """Issue 37: an idle cluster of 1,000 topics averaged 29.8 requests/s over the 30
    minutes after its start (9.0 after the first pass), because a broker's first cleaner
    pass read each led shard log several times and listed every topic's objects for GC:
    about 14 requests per idle topic.  Now its start and first pass read each log once
    (an empty one: its hint and one listing, no versions), not again for the shard's other
    partitions, and put a topic's GC and pruning off to the topic's slot of the daily
    full pass.  20 topics of 4 partitions, 2 with four commits by a brokerless writer, on
    S3 through the counting proxy, requests counted per topic (not timed)."""
    from urllib.parse import unquote

    from tests.support.counting_s3 import CountingProxy

    proxy = CountingProxy(moto_s3.endpoint_url)
    per_topic: dict[str, int] = {}
    count = proxy.count

    def count_per_topic(method: str, path: str) -> None:
        count(method, path)
        found = re.search(r"/topics/([^/&]+)/", unquote(path))
        if found:
            per_topic[found.group(1)] = per_topic.get(found.group(1), 0) + 1

    proxy.count = count_per_topic  # type: ignore[method-assign]
    try:
        url, options = moto_s3.fresh_root(), proxy.storage_options()
        root = open_root(url, options, create=True)
        topics = [f"idle{i}" for i in range(20)]
        for name in topics:
            root.create_topic(name, 4, {"commit.shards": 1})
        written = topics[:2]
        for name in written:
            for p in range(4):
                root.topic(name).append(p, make_batch([b"x"] * 10))
        per_topic.clear()
        intervals = {"lease_interval_ms": 600_000, "lease_timeout_ms": 1_800_000}
        with inproc_broker(
            url,
            storage_options=options,
            metadata_refresh_ms=600_000,
            **intervals,
            **FIRST_READ_AT_ONCE,
        ) as (server, _):
            started = proxy.snapshot()
            summary = Cleaner(server.broker.upkeep, 60_000).run_once()
            passed = proxy.snapshot()
        assert summary["partitions"] == 4 * len(topics) and summary["errors"] == 0
        first_pass = passed - started
        assert first_pass["PUT"] == first_pass["DELETE"] == 0, first_pass
        # a log never written: its hint and one listing (17 requests before)
        assert {per_topic.get(name, 0) for name in topics[2:]} == {2}, per_topic
        # a log of four commits: its hint, one listing, its versions and the next (31)
        assert {per_topic[name] for name in written} == {7}, per_topic
    finally:
        proxy.close()


def test_garbage_a_started_broker_puts_off_is_collected_at_the_topics_full_pass(
    tmp_path, monkeypatch
):
    """A broker that starts puts each topic's GC off to the topic's slot of the daily full
    pass (no LIST per topic in its first pass); an abandoned upload found then is
    collected as before.  A topic whose maintenance in that first pass unreferenced an
    object (retention) is collected at once, as at any change.  The full pass is ten
    minutes here, on a clock the test moves."""
    from sparklog.broker_lite import upkeep
    from sparklog.storage import maintenance

    url = f"file://{tmp_path}/root"
    root = open_root(url)
    root.create_topic("left", 1)
    left = root.topic("left")
    left.produce({0: make_batch([b"x"])})
    abandoned = f"topics/left/{left.info.topic_id}/objects/20260101/abandoned.arrow"
    root.store.put(abandoned, b"an upload no commit names")
    root.create_topic("expired", 1, {"retention.ms": 60_000})
    expired = root.topic("expired")
    expired.produce({0: make_batch([b"old"], timestamps_ms=[upkeep.now_ms() - 3_600_000])})
    (old_object,) = [o.key for o in expired.store.list_objects("objects")]
    clock = [upkeep.now_ms()]
    monkeypatch.setattr(upkeep, "now_ms", lambda: clock[0])
    monkeypatch.setattr(maintenance, "now_ms", lambda: clock[0])
    monkeypatch.setattr(upkeep, "UPKEEP_FULL_PASS_MS", 600_000)
    with inproc_broker(url, **FIRST_READ_AT_ONCE, metadata_refresh_ms=600_000, gc_grace_ms=0) as (
        server,
        _,
    ):
        cleaner = Cleaner(server.broker.upkeep, 60_000)
        for _ in range(2):  # marked, then deleted (no grace)
            assert cleaner.run_once()["errors"] == 0
        assert not expired.store.exists(old_object)  # retention unreferenced it: collected
        assert root.store.exists(abandoned)  # put off to the topic's full pass
        clock[0] += 600_000
        for _ in range(2):
            cleaner.run_once()
        assert not root.store.exists(abandoned)


def topics_read(monkeypatch) -> set[str]:
    """The topics under whose folders any store request (a read or a listing) is made."""
    from sparklog.storage.objectstore import ObjectStore

    read: set[str] = set()
    for name in (*READS, "list_objects", "list_names"):
        original = getattr(ObjectStore, name)

        def counted(store, key, *args, _call=original, **kwargs):
            keys = [key] if isinstance(key, str) else list(key)
            for k in keys:
                found = re.search(r"/topics/([^/]+)/", f"{store.url}/{k}")
                if found:
                    read.add(found.group(1))
            return _call(store, key if isinstance(key, str) else keys, *args, **kwargs)

        monkeypatch.setattr(ObjectStore, name, counted)
    return read


def test_a_started_broker_reads_no_idle_log_before_its_topics_slot(tmp_path, monkeypatch):
    """Issue 37: a started broker's first cleaner pass read every led log (a hint GET and
    a LIST for each never-written one): 1,800 requests for 1,000 idle topics on three
    brokers, the whole budget of their first 30 minutes at 10 requests/s.  The first
    read of a log no client has touched waits for its topic's slot of
    ``cleaner_first_pass_spread_ms``: the first pass reads no topic's folder, each later
    pass those whose slot came, each once (requests counted per topic, on a clock the
    test moves)."""
    from sparklog.broker_lite import upkeep
    from sparklog.storage import maintenance

    url = f"file://{tmp_path}/root"
    root = open_root(url)
    topics = [f"idle{i}" for i in range(20)]
    for name in topics:
        root.create_topic(name, 4, {"commit.shards": 1})
    for name in topics[:2]:  # records from before the start, by a brokerless writer
        for p in range(4):
            root.topic(name).append(p, make_batch([b"x"] * 10))
    clock = [upkeep.now_ms()]
    monkeypatch.setattr(upkeep, "now_ms", lambda: clock[0])
    monkeypatch.setattr(maintenance, "now_ms", lambda: clock[0])
    spread_ms = 600_000
    read = topics_read(monkeypatch)
    with inproc_broker(
        url, metadata_refresh_ms=600_000, cleaner_first_pass_spread_ms=spread_ms
    ) as (server, _):
        cleaner = Cleaner(server.broker.upkeep, 60_000)
        read.clear()
        summary = cleaner.run_once()
        assert summary["partitions"] == 4 * len(topics) and summary["errors"] == 0
        assert read == set()  # every topic before: 2 requests each, 7 with records
        slots_ms = {name: upkeep._first_read_offset_ms(name, spread_ms) for name in topics}
        clock[0] += spread_ms // 2
        cleaner.run_once()
        due = {name for name, slot_ms in slots_ms.items() if slot_ms <= spread_ms // 2}
        assert read == due and 0 < len(due) < len(topics), slots_ms
        read.clear()
        clock[0] += spread_ms - spread_ms // 2
        cleaner.run_once()
        assert read == set(topics) - due  # all by the end of the spread, each once
        read.clear()
        cleaner.run_once()
        assert read == set()  # then from memory, as any idle partition


def test_records_past_retention_wait_at_most_the_spread_or_none_once_a_client_touches_them(
    tmp_path, monkeypatch
):
    """The bound of the spread: records written before a broker's start and past their
    topic's retention are deleted by the first pass at or after the topic's slot, which
    is within ``cleaner_first_pass_spread_ms`` of the pass that first saw the topic,
    not before it; a log a client produces to joins the passes at once (its retention
    runs at the next pass).  The clock is the test's."""
    from sparklog.broker_lite import upkeep
    from sparklog.storage import maintenance

    url = f"file://{tmp_path}/root"
    root = open_root(url)
    old_ms = upkeep.now_ms() - 3_600_000
    for name in ("untouched", "touched"):
        root.create_topic(name, 1, {"retention.ms": 60_000})
        root.topic(name).produce({0: make_batch([b"old"], timestamps_ms=[old_ms])})

    def log_start(name: str) -> int:
        return root.topic(name).partition(0).refresh().log_start_offset

    clock = [upkeep.now_ms()]
    monkeypatch.setattr(upkeep, "now_ms", lambda: clock[0])
    monkeypatch.setattr(maintenance, "now_ms", lambda: clock[0])
    spread_ms = 600_000
    slot_ms = upkeep._first_read_offset_ms("untouched", spread_ms)
    assert 0 < slot_ms < spread_ms
    with inproc_broker(
        url, metadata_refresh_ms=600_000, cleaner_first_pass_spread_ms=spread_ms
    ) as (server, _):
        broker = server.broker
        cleaner = Cleaner(broker.upkeep, 60_000)
        first_seen_ms = clock[0]
        assert cleaner.run_once()["errors"] == 0
        assert log_start("untouched") == log_start("touched") == 0  # both wait
        broker.produce("touched", [(0, make_batch([b"new"]))])  # a client touches it
        cleaner.run_once()
        assert log_start("touched") == 1  # at the next pass
        clock[0] = first_seen_ms + slot_ms - 1
        cleaner.run_once()
        assert log_start("untouched") == 0  # its slot has not come
        clock[0] = first_seen_ms + slot_ms
        cleaner.run_once()
        assert log_start("untouched") == 1
