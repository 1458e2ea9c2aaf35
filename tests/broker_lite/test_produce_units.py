"""Produce batching rules and the tail cache, in-process."""

from __future__ import annotations

import threading

import pyarrow as pa
import pytest

from sparklog.broker_lite.produce import (
    FlushBatcher,
    Latch,
    Outcome,
    ProduceOutcome,
    ProduceRequest,
    Run,
    take_runs,
)
from sparklog.broker_lite.tailcache import TailCache
from sparklog.errors import OutOfOrderSequenceError
from sparklog.storage import ProducerBatch, make_batch
from sparklog.storage.log import duplicate_of


def req(partition: int, pid: int | None = None, seq: int = 0, n: int = 2) -> ProduceRequest:
    producer = ProducerBatch(pid, 0, seq, n) if pid is not None else None
    return ProduceRequest(partition, [make_batch([b"x"] * n)], n, 10, producer)


def test_runs_merge_one_producer_contiguous_and_keep_order():
    a0, a1, b0, a2_gap, p1 = req(0, 7, 0), req(0, 7, 2), req(0, 8, 0), req(0, 7, 9), req(1)
    runs, rest = take_runs([a0, a1, b0, a2_gap, p1])
    by_partition = {r.partition: r for r in runs}
    assert by_partition[0].requests == [a0, a1]
    assert by_partition[0].producer == ProducerBatch(7, 0, 0, 4)
    assert by_partition[1].requests == [p1] and by_partition[1].producer is None
    assert rest == [b0, a2_gap]  # a different producer waits for the next flush, in order
    runs, rest = take_runs([req(2), req(2), req(2, 5, 0)])
    assert [len(r.requests) for r in runs] == [2] and len(rest) == 1


def test_linger_spaces_a_brokers_objects_and_an_idle_broker_flushes_at_once():
    """linger_ms is the least time between two flushes of a broker (its objects per
    second, whatever the number of topics), not a delay each request waits: after an
    idle spell a request is written at once.  The batcher runs on a fake clock; real
    waits are an hour long."""
    now = [0.0]
    read = threading.Event()  # the batcher's thread read the clock: it waits or flushes

    def clock() -> float:
        if threading.current_thread() is not threading.main_thread():
            read.set()
        return now[0]

    def submit_and_see_it_wait(request: ProduceRequest) -> None:
        read.clear()
        batcher.submit(request_topic[id(request)], [request])
        assert read.wait(30)  # the thread has seen the request and the time
        assert not request.future.done()

    flushed: list[dict[str, list[ProduceRequest]]] = []
    request_topic: dict[int, str] = {}

    def flush(runs: dict[str, list[Run]]) -> None:
        flushed.append({t: [r for run in rs for r in run.requests] for t, rs in runs.items()})
        for topic_runs in runs.values():
            for run in topic_runs:
                for r in run.requests:
                    r.future.set_result(ProduceOutcome(0, r.record_count))

    batcher = FlushBatcher(flush, linger_ms=3_600_000, batch_bytes=1 << 30, clock=clock)
    try:
        first = req(0)
        request_topic[id(first)] = "a"
        submit_and_see_it_wait(first)  # an hour has not passed since the batcher began
        now[0] = 3_601.0
        second = req(1)
        batcher.submit("b", [second])  # past the linger: both topics in one flush
        second.future.result(timeout=30)
        assert first.future.done() and flushed == [{"a": [first], "b": [second]}]
        now[0] = 3_602.0  # one second after that flush began: the next waits
        third = req(0)
        request_topic[id(third)] = "a"
        submit_and_see_it_wait(third)
        now[0] = 20_000.0  # an hour since: flushed with the next request
        fourth = req(1)
        batcher.submit("a", [fourth])
        fourth.future.result(timeout=30)
        assert flushed[1:] == [{"a": [third, fourth]}]
        now[0] = 30_000.0  # an idle broker: flushed at once, alone
        alone = req(0)
        batcher.submit("c", [alone])
        alone.future.result(timeout=30)
        assert flushed[2:] == [{"c": [alone]}]
    finally:
        batcher.close()


def test_outcomes_of_one_call_share_a_latch_that_opens_when_all_are_in():
    latch = Latch(3)
    outcomes = [Outcome(latch) for _ in range(3)]
    seen: list[Outcome] = []
    outcomes[1].add_done_callback(seen.append)
    outcomes[0].set_result(ProduceOutcome(5, 2))
    outcomes[1].set_exception(OutOfOrderSequenceError("late"))
    assert not latch.wait(timeout_s=0) and not outcomes[2].done()
    with pytest.raises(TimeoutError):
        outcomes[2].result(timeout=0)
    threading.Thread(target=outcomes[2].set_result, args=(ProduceOutcome(7, 1),)).start()
    assert latch.wait(timeout_s=30)
    assert outcomes[0].result() == ProduceOutcome(5, 2) and outcomes[2].result().base_offset == 7
    assert isinstance(outcomes[1].exception(), OutOfOrderSequenceError) and seen == [outcomes[1]]
    with pytest.raises(OutOfOrderSequenceError):
        outcomes[1].result()
    late: list[Outcome] = []
    outcomes[0].add_done_callback(late.append)  # already done: called at once
    assert late == [outcomes[0]]


def test_retry_of_part_of_a_merged_commit_is_a_duplicate_at_its_offset():
    """The broker's pre-check and the commit share storage's one dedup rule."""
    producers = {"7": {"epoch": 0, "last_seq": 5, "recent": [[0, 5, 100]]}}
    assert duplicate_of(producers, ProducerBatch(7, 0, 2, 2), "t-0") == 102
    assert duplicate_of(producers, ProducerBatch(7, 0, 6, 2), "t-0") is None  # the next batch
    assert duplicate_of(producers, ProducerBatch(7, 1, 0, 2), "t-0") is None  # a newer epoch
    old = {"7": {"epoch": 0, "last_seq": 50, "recent": [[40, 50, 900]]}}
    with pytest.raises(OutOfOrderSequenceError):
        duplicate_of(old, ProducerBatch(7, 0, 0, 2), "t-0")


def test_after_a_repair_a_producer_from_before_it_may_continue_past_a_gap_once():
    """Issue 36: a repair that gave up offsets lost some producer's sequences; the
    producer's next batch continues past the gap instead of being refused (fatal to
    librdkafka), and a retry of what the log holds is still a duplicate."""
    producers = {"7": {"epoch": 0, "last_seq": 5, "recent": [[0, 5, 100]], "ts": 1_000}}
    gap = ProducerBatch(7, 0, 9, 2)
    with pytest.raises(OutOfOrderSequenceError):
        duplicate_of(producers, gap, "t-0")
    assert duplicate_of(producers, gap, "t-0", repaired_ms=2_000) is None
    assert duplicate_of(producers, ProducerBatch(7, 0, 2, 2), "t-0", repaired_ms=2_000) == 102
    assert duplicate_of({}, ProducerBatch(8, 0, 4, 1), "t-0", repaired_ms=2_000) is None
    after = {"7": {**producers["7"], "ts": 3_000}}  # committed since the repair: the usual rule
    with pytest.raises(OutOfOrderSequenceError):
        duplicate_of(after, gap, "t-0", repaired_ms=2_000)


def test_tail_cache_serves_contiguous_ranges_and_evicts_oldest():
    cache = TailCache(max_bytes=40_000)
    key = ("t", "id", 0)
    batch = make_batch([b"v" * 100] * 10)
    cache.add(key, 0, [batch])
    cache.add(key, 10, [batch])
    got = cache.get(key, 5, 1 << 20)
    assert got is not None
    assert pa.Table.from_batches(got).column("offset").to_pylist() == list(range(5, 20))
    assert cache.get(key, 20, 1 << 20) is None
    cache.add(key, 25, [batch])  # another writer committed 20-24
    assert cache.get(key, 10, 1 << 20) is None and cache.get(key, 25, 1 << 20) is not None
    for i in range(100):  # far beyond the budget: old batches go
        cache.add(key, 35 + 10 * i, [batch])
    assert cache.size_bytes <= 40_000
    assert cache.get(key, 35, 1 << 20) is None and cache.get(key, 1030, 1 << 20) is not None
    cache.trim(key, 2000)
    assert cache.get(key, 1030, 1 << 20) is None


def _rss_anon_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no RssAnon in /proc/self/status")


def test_tail_cache_memory_stays_near_its_budget_with_tiny_batches():
    """Keyed producers over many partitions commit batches of a record or two: each
    costs kilobytes beyond its data, so counting data alone let a 16 MiB budget hold
    hundreds of MiB (the broker's RSS grew without bound in bench/soak.py)."""
    budget = 16 << 20
    cache = TailCache(max_bytes=budget)
    before = _rss_anon_bytes()
    offsets = [0] * 64
    for i in range(60_000):
        partition = i % 64
        batch = [make_batch([b"v" * 100, b"w" * 100])]
        cache.add(("t", "id", partition), offsets[partition], batch)
        offsets[partition] += 2
    grown = _rss_anon_bytes() - before
    assert cache.size_bytes <= budget
    assert grown < 3 * budget, f"the cache holds {grown >> 20} MiB for a 16 MiB budget"


def test_encoded_batch_cache_counts_each_entrys_overhead():
    """Encodings of one-record batches are a few dozen bytes: counted alone, a budget
    held entries whose keys and headers cost several times the bytes."""
    from sparklog.broker_lite.kafka.fetch import ENCODED_ENTRY_OVERHEAD_BYTES, EncodedCache

    cache = EncodedCache(32 * 1024)
    for offset in range(1000):
        cache.put(("id", 0, offset, offset, 1, False), b"x" * 10)
    kept = sum(cache.get(("id", 0, o, o, 1, False)) is not None for o in range(1000))
    assert kept <= 32 * 1024 // (10 + ENCODED_ENTRY_OVERHEAD_BYTES)
    assert cache.get(("id", 0, 999, 999, 1, False)) == b"x" * 10  # the newest stay
