"""Group offset sync and the failover drill: a group moves regions, processing nothing twice."""

from __future__ import annotations

from sparklog import Consumer
from sparklog.mirror.copier import Mirror, promote
from sparklog.mirror.links import create_link, get_link
from sparklog.storage import open_root
from tests.mirror.support import produce, wait_for


def _consume(address: str, options: dict, group: str, until, seen: list) -> None:
    """Read as group ``group``, committing after each poll, until ``until(seen)``."""
    consumer = Consumer(
        address,
        group_id=group,
        storage_options=options,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        max_poll_records=7,
        session_timeout_ms=3000,
        heartbeat_interval_ms=300,
    )
    consumer.subscribe(["orders"])
    try:

        def progress() -> bool:
            for r in consumer.poll_records(timeout_ms=100):
                seen.append((r.partition, r.offset, r.value))
            consumer.commit()
            return until(seen)

        wait_for(progress, timeout_s=60, what="the group to consume")
    finally:
        consumer.close(autocommit=False)


def test_failover_drill_group_resumes_on_the_destination_processing_nothing_twice(
    tmp_path, moto_s3
):
    source = open_root(moto_s3.fresh_root(), moto_s3.storage_options, create=True)
    dest = open_root(f"file://{tmp_path}/dest", {}, create=True)
    source.create_topic("orders", partitions=2)
    produce(source, "orders", 2, rounds=4)  # 40 records
    create_link(
        dest,
        "dr",
        source=source.url,
        source_options=source.store.storage_options,
        topics="orders",
        groups="app",
    )
    mirror = Mirror(dest, get_link(dest, "dr"))
    mirror.step()
    seen: list = []
    # the group reads part of the topic on the source, then its region goes away
    _consume(source.url, moto_s3.storage_options, "app", lambda s: len(s) >= 15, seen)
    on_source = len(seen)
    assert 15 <= on_source < 40
    produce(source, "orders", 2, rounds=2)  # written before the outage: 60 records in all
    report = mirror.step()
    assert report.groups_synced == 1
    synced = {tp.partition: c.offset for tp, c in dest.groups.fetch("app").items()}
    committed = {tp.partition: c.offset for tp, c in source.groups.fetch("app").items()}
    assert synced == committed  # the same offsets: no translation
    assert mirror.step().groups_synced == 0  # unchanged: nothing written again
    # failover: promote, the same group continues on the destination
    promote(dest, "orders")
    _consume(dest.url, {}, "app", lambda s: len(s) >= 60, seen)
    assert dest.groups.generation("app") >= 0  # it joined there: the mirror leaves it alone
    processed = [(p, o) for p, o, _ in seen]
    assert len(processed) == len(set(processed)) == 60  # records processed twice: 0
    assert sorted(set(processed)) == sorted((p, o) for p in range(2) for o in range(30))
    # the source group moving on later is not copied over the active destination group
    _consume(source.url, moto_s3.storage_options, "app", lambda s: len(s) >= 61, seen)
    mirror.step()
    after = {tp.partition: c.offset for tp, c in dest.groups.fetch("app").items()}
    assert after == {0: 30, 1: 30}


def test_failing_back_by_re_creating_the_topic_in_the_old_primary(tmp_path):
    east = open_root(f"file://{tmp_path}/east", {}, create=True)
    west = open_root(f"file://{tmp_path}/west", {}, create=True)
    east.create_topic("orders", partitions=2)
    produce(east, "orders", 2, rounds=2)
    create_link(west, "east", source=east.url, topics="orders")
    to_west = Mirror(west, get_link(west, "east"))
    to_west.step()
    ends = promote(west, "orders").mirror["promoted_ends"]
    assert ends == {"0": 10, "1": 10}
    produce(west, "orders", 2, rounds=1)  # written in west after the failover: 10-14
    # east returns: its stale topic goes, west's comes back with every offset
    east.delete_topic("orders")
    create_link(east, "back", source=west.url, topics="orders")
    back = Mirror(east, get_link(east, "back"))
    assert back.step().records == 30
    promote(east, "orders")
    for p in range(2):
        got = east.topic("orders").partition(p).read(0)
        assert got.column("offset").to_pylist() == list(range(15))
    # the old link on west neither copies the new east topic nor creates anything
    report = to_west.step()
    assert report.records == 0 and report.topics_created == []
    assert west.list_topics() == ["orders"] and east.list_topics() == ["orders"]


def _copy_all(root, link: str) -> int:
    mirror = Mirror(root, get_link(root, link))
    copied = 0
    while (report := mirror.step()).records:
        copied += report.records
    return copied


def _failed_over(tmp_path, rounds: int):
    """Root A mirrored to root B by link "dr" (``rounds`` rounds of 2 partitions), promoted."""
    a = open_root(f"file://{tmp_path}/a", {}, create=True)
    b = open_root(f"file://{tmp_path}/b", {}, create=True)
    a.create_topic("orders", partitions=2)
    produce(a, "orders", 2, rounds=rounds)
    create_link(b, "dr", source=a.url, topics="orders")
    assert _copy_all(b, "dr") == rounds * 10
    promote(b, "orders")
    return a, b


def test_mirror_reverse_copies_back_only_what_the_promoted_side_wrote(tmp_path):
    import pytest

    from sparklog.errors import PolicyViolationError
    from sparklog.mirror.copier import reverse
    from tests.mirror.support import assert_same, records

    a, b = _failed_over(tmp_path, rounds=3)  # 15 a partition
    b.topic("orders").produce({0: records(0, 15, 4), 1: records(1, 15, 2)})  # written on B

    back, turned = reverse(b, "dr")
    assert (back.name, back.source, back.topics, turned) == ("dr-back", b.url, "orders", ["orders"])
    assert get_link(a, "dr-back").source == b.url
    mirror = a.describe_topic("orders").mirror
    assert mirror["link"] == "dr-back" and mirror["state"] == "mirroring"
    with pytest.raises(PolicyViolationError, match="link 'dr-back'"):  # A is read-only now
        a.topic("orders").produce({0: records(0, 99, 1)})

    assert _copy_all(a, "dr-back") == 6  # only what B wrote, at B's offsets
    assert assert_same(b, a, "orders") == 36
    ends = {p: a.topic("orders").partition(p).refresh().high_watermark for p in range(2)}
    assert ends == {0: 19, 1: 17}
    assert reverse(b, "dr")[1] == []  # again: nothing more to turn, the link is there


def test_mirror_reverse_refuses_records_the_old_primary_never_mirrored(tmp_path):
    import pytest

    from sparklog.errors import InvalidRequestError
    from sparklog.mirror.copier import reverse
    from tests.mirror.support import records

    a, b = _failed_over(tmp_path, rounds=2)
    a.topic("orders").produce({1: records(1, 10, 3)})  # A kept writing, never mirrored
    with pytest.raises(InvalidRequestError, match=r"orders-1 offsets 10-12; nothing changed"):
        reverse(b, "dr")
    assert a.describe_topic("orders").mirror is None and a.metadata.image().mirror_links == {}
