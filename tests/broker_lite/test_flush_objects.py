"""A broker writes one object per flush whatever the number of topics (issue 37 item 1).

Ten producers of ten topics reach an in-process broker whose linger is an hour
and whose ``batch_bytes`` is their requests' total: the flush begins once all
ten are pending, so they are one flush by construction, not by timing.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor, wait

from sparklog.broker_lite.cleaner import Cleaner
from sparklog.storage import make_batch, open_root
from sparklog.storage.shared_objects import read_trailer
from tests.chaos.inproc import inproc_broker

TOPICS = [f"t{i}" for i in range(10)]


def test_one_flush_of_ten_topics_writes_one_object_on_one_flush_thread(tmp_path):
    url = f"file://{tmp_path}/root"
    root = open_root(url)
    for name in TOPICS:
        root.create_topic(name, 2)
    batch = make_batch([b"v" * 100, b"w" * 100])
    size_bytes = sum(n.size_bytes for n in root.topic(TOPICS[0]).normalize_many([batch]))
    with inproc_broker(url, linger_ms=3_600_000, batch_bytes=size_bytes * len(TOPICS)) as (
        server,
        _,
    ):
        broker = server.broker
        pool = ThreadPoolExecutor(len(TOPICS))
        futures = [pool.submit(broker.produce, t, [(1, batch)]) for t in TOPICS]
        # a bound for failure (batchers per topic never reach batch_bytes), not a wait
        done, _ = wait(futures, timeout=120)
        flushers = [t.name for t in threading.enumerate() if t.name.startswith("flush")]
    pool.shutdown()  # the broker's close flushed whatever was left
    assert len(done) == len(TOPICS), "the ten topics' requests were not flushed together"
    assert [f.result()[0].base_offset for f in futures] == [0] * len(TOPICS)
    assert flushers == ["flush"]  # one thread per broker, not one per topic
    shared = [o.key for o in root.store.list_objects("objects")]
    assert len(shared) == 1
    for name in TOPICS:
        topic = root.topic(name)
        assert not topic.store.list_objects("objects")
        assert topic.partition(1).read(0).column("value").to_pylist() == [b"v" * 100, b"w" * 100]
    sections = read_trailer(root.store, shared[0])
    assert sections is not None and sorted(s.topic for s in sections) == TOPICS
    with inproc_broker(url, gc_grace_ms=0) as (server, _):
        check_the_cleaner_collects_it_once_unreferenced(server.broker, root)


def check_the_cleaner_collects_it_once_unreferenced(broker, root) -> None:
    """The broker's cleaner pass keeps the shared object while any of its topics
    references it, marks it when none does, and deletes it at the next pass (grace 0)."""
    (key,) = [o.key for o in root.store.list_objects("objects")]
    cleaner = Cleaner(broker.upkeep, 60_000)
    for name in TOPICS[:-1]:
        root.delete_topic(name)
    assert "shared_objects_deleted" in cleaner.run_once() and root.store.exists(key)
    assert root.topic(TOPICS[-1]).partition(1).read(0).num_rows == 2
    root.delete_topic(TOPICS[-1])
    assert cleaner.run_once()["shared_objects_deleted"] == 0  # marked
    assert cleaner.run_once()["shared_objects_deleted"] == 1
    assert not root.store.exists(key)
