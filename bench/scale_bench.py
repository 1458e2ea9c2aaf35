"""Scale of the control plane: costs against topics, partitions, brokers, groups and members.

Run:  .venv/bin/python bench/scale_bench.py [--sections metadata,idle,groups,offsets,members]
                                             [--idle-topics 100] [--window-s 10]
                                             [--cpu-topics 1000,5000] [--cpu-idle-s 30]
                                             [--cpu-requests 100]
                                             [--idle-brokers 1,3,5] [--idle-data-topics 0]
                                             [--idle-parallel]

Sections (each prints a table; ratios are against the section's first row,
measured in the same run):

* ``cpu`` (only when named): an idle broker's CPU and the CPU of one all-topics
  Kafka Metadata request, by topics of 4 partitions (issue 37 item 6);
* ``metadata``: Metadata latency through a broker process on a local root, by
  Kafka (confluent-kafka ``list_topics``) and by Flight (``BrokerClient.metadata``),
  for 10, 100, 1,000 topics of 4 partitions and one topic of 1, 64, 1,024, 4,096
  partitions (median of 5; target: 1,000 x 4 within 0.5 s, growing linearly);
* ``idle``: requests per second by kind of 1, 3, 5 idle brokers on moto's S3
  behind the counting proxy, with ``--idle-topics`` topics, and the monthly bill
  at S3 list prices (target: 0 LIST; 3 brokers with 1,000 topics <= 10/s);
* ``groups``: requests per heartbeat and per offset commit of 1, 50, 500 groups
  at an in-memory coordinator on S3, and the bill of each committing once a
  second (target: 0 per heartbeat, 1 per commit);
* ``offsets``: write requests per offset commit of 1, 100, 1,000, 5,000 groups each
  committing (50 committers at once) through a broker's group store on S3, with
  the journal (format 3) against one group-log commit each (format 2) in the same
  run, with the p50/p99 commit latency and the bill of each group committing once
  a second (target: <= 0.1 write requests per commit at 1,000 groups);
* ``members``: time for a group of 1, 10, 50 members (threads, one coordinator
  in memory) to reach one stable assignment, in session timeouts (target <= 2).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from sparklog.client.transports.flight_client import BrokerClient  # noqa: E402
from sparklog.groups.coordinator import GroupCoordinator  # noqa: E402
from sparklog.storage import make_batch, open_root  # noqa: E402
from tests.broker_lite.members import Member  # noqa: E402
from tests.support.brokers import Cluster  # noqa: E402
from tests.support.counting_s3 import CountingProxy  # noqa: E402
from tests.support.s3 import MotoS3  # noqa: E402

PUT_PRICE_PER_1000 = 0.005  # PUT, COPY, POST, LIST
GET_PRICE_PER_1000 = 0.0004  # GET, HEAD
SECONDS_PER_MONTH = 30 * 24 * 3600


def monthly_bill(per_second: Counter[str]) -> float:
    expensive = sum(per_second[k] for k in ("PUT", "POST", "LIST", "COPY"))
    cheap = sum(per_second[k] for k in ("GET", "HEAD"))
    return (expensive * PUT_PRICE_PER_1000 + cheap * GET_PRICE_PER_1000) / 1000 * SECONDS_PER_MONTH


def median_s(call: Callable[[], object], runs: int = 5) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def load() -> str:
    return Path("/proc/loadavg").read_text().split()[0]


# -- metadata --------------------------------------------------------------------------------
def metadata_section() -> None:
    from confluent_kafka.admin import AdminClient

    print("\n## Metadata latency (broker process, local root), median of 5")
    print("| topics x partitions | Kafka list_topics ms | Flight metadata ms | per partition us |")
    print("|---|---|---|---|")
    for topics, partitions in ((10, 4), (100, 4), (1000, 4), (1, 1), (1, 64), (1, 1024), (1, 4096)):
        with tempfile.TemporaryDirectory() as work:
            root_url = f"file://{work}/root"
            root = open_root(root_url, create=True)
            for i in range(topics):
                root.create_topic(f"t{i}", partitions)
            cluster = Cluster(Path(work), root_url)
            try:
                cluster.start(1, lease_timeout_ms=30_000)
                cluster.wait_live(1)
                admin = AdminClient({"bootstrap.servers": cluster.kafka_bootstrap})
                admin.list_topics(timeout=60)  # connect
                kafka_s = median_s(lambda admin=admin: admin.list_topics(timeout=60))
                with BrokerClient(cluster.bootstrap) as client:
                    flight_s = median_s(lambda client=client: client.metadata(None))
            finally:
                cluster.stop()
        per = kafka_s / (topics * partitions) * 1e6
        print(
            f"| {topics} x {partitions} | {kafka_s * 1000:.1f} | {flight_s * 1000:.1f} "
            f"| {per:.1f} |"
        )


def _cpu_s(pid: int) -> float:
    """A process's CPU time so far (user + system), from /proc."""
    import os

    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_section(topic_counts: list[int], idle_s: float, requests: int) -> None:
    """Issue 37 item 6's first half: an idle broker's CPU and the CPU of one all-topics
    Kafka Metadata request, at several topic counts (4 partitions each): linear or better
    in topics, Metadata of 5,000 x 4 within 5x the CPU of 1,000 x 4."""
    from confluent_kafka.admin import AdminClient

    print(f"\n## Broker CPU by topics (x 4 partitions; broker process, local root), load {load()}")
    print("| topics | idle CPU % of a core | CPU ms per all-topics Metadata | ratio to the first |")
    print("|---|---|---|---|")
    first = None
    for topics in topic_counts:
        with tempfile.TemporaryDirectory() as work:
            root_url = f"file://{work}/root"
            root = open_root(root_url, create=True)
            for i in range(topics):
                root.create_topic(f"t{i}", 4)
            cluster = Cluster(Path(work), root_url)
            try:
                broker = cluster.start(1, lease_timeout_ms=30_000)
                cluster.wait_live(1)
                assert broker.proc is not None
                pid = broker.proc.pid
                admin = AdminClient({"bootstrap.servers": cluster.kafka_bootstrap})
                admin.list_topics(timeout=120)  # connect; leadership taken, handles opened
                started, cpu_before = time.monotonic(), _cpu_s(pid)
                time.sleep(idle_s)  # the measured window itself, not a synchronisation
                idle = (_cpu_s(pid) - cpu_before) / (time.monotonic() - started)
                cpu_before = _cpu_s(pid)
                for _ in range(requests):
                    admin.list_topics(timeout=120)
                per_request = (_cpu_s(pid) - cpu_before) / requests
            finally:
                cluster.stop()
        first = per_request if first is None else first
        print(
            f"| {topics:,} | {idle * 100:.1f} | {per_request * 1000:.1f} "
            f"| {per_request / first:.2f}x |"
        )


# -- idle brokers ----------------------------------------------------------------------------
def idle_section(
    moto: MotoS3,
    topics: int,
    window_s: float,
    brokers_list: tuple[int, ...] = (1, 3, 5),
    data_topics: int = 0,
    parallel: bool = False,
    cleaner_interval_ms: int = 300_000,
    first_pass_spread_ms: int | None = None,
) -> None:
    """Idle brokers' requests; ``data_topics`` of the topics hold records (so the cleaner
    has work: retention, GC, pruning); ``parallel`` measures every broker count at once
    (request counts do not depend on load; a cleaner pass may take longer);
    ``first_pass_spread_ms``: the brokers' ``cleaner_first_pass_spread_ms`` (None: their
    default)."""
    spread = (
        {}
        if first_pass_spread_ms is None
        else {"cleaner_first_pass_spread_ms": first_pass_spread_ms}
    )
    print(
        f"\n## Idle brokers on S3 (moto behind the counting proxy), {topics} topics x 4, "
        f"{data_topics} holding records, {window_s:.0f} s window, cleaner every "
        f"{cleaner_interval_ms / 1000:.0f} s"
    )
    print(
        "| brokers | GET/s | PUT/s | LIST/s | DELETE/s | all/s | busiest minute all/s | $/month |"
    )
    print("|---|---|---|---|---|---|---|---|")
    rows: dict[int, str] = {}

    def measure(brokers: int) -> None:
        proxy = CountingProxy(moto.endpoint_url)
        root_url = moto.fresh_root()
        options = proxy.storage_options()
        root = open_root(root_url, options, create=True)
        for i in range(topics):
            root.create_topic(f"t{i}", 4, {"commit.shards": 1})
        for i in range(data_topics):
            topic = root.topic(f"t{i}")
            for p in range(4):
                topic.append(p, make_batch([b"x" * 100] * 10))
        minutes: list[tuple[float, Counter[str]]] = []
        with tempfile.TemporaryDirectory() as work:
            cluster = Cluster(Path(work), root_url, options)
            try:
                for b in range(1, brokers + 1):
                    cluster.start(
                        b,
                        lease_interval_ms=1000,
                        lease_timeout_ms=6000,
                        metadata_refresh_ms=1000,
                        fetch_refresh_ms=200,
                        cleaner_interval_ms=cleaner_interval_ms,
                        **spread,
                    )
                cluster.wait_live(brokers)
                time.sleep(3)  # let start-up reads finish
                before = proxy.snapshot()
                last, deadline = before, time.monotonic() + window_s
                while (left := deadline - time.monotonic()) > 0:
                    time.sleep(min(60.0, left))
                    now = proxy.snapshot()
                    minute = now.copy()
                    minute.subtract(last)
                    minutes.append((min(60.0, left), minute))
                    last = now
                after = last
            finally:
                cluster.stop()
                proxy.close()
        after.subtract(before)
        rate = Counter({k: v / window_s for k, v in after.items()})
        total = sum(rate.values())
        busiest = max((sum(m.values()) / span for span, m in minutes), default=total)
        rows[brokers] = (
            f"| {brokers} | {rate['GET']:.2f} | {rate['PUT']:.2f} | {rate['LIST']:.2f} "
            f"| {rate['DELETE']:.2f} | {total:.2f} | {busiest:.2f} | {monthly_bill(rate):.2f} |"
        )
        print(rows[brokers], flush=True)
        timeline = ", ".join(f"{sum(m.values()) / span:.1f}" for span, m in minutes)
        lists = ", ".join(f"{m['LIST'] / span:.2f}" for span, m in minutes)
        print(f"({brokers} brokers, requests/s minute by minute: {timeline}; LIST/s: {lists})")

    if parallel:
        threads = [threading.Thread(target=measure, args=(b,)) for b in brokers_list]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        print("(in order)")
        for b in brokers_list:
            print(rows.get(b, f"| {b} | failed |"))
    else:
        for b in brokers_list:
            measure(b)


# -- groups ----------------------------------------------------------------------------------
def groups_section(moto: MotoS3) -> None:
    print("\n## Groups at an in-memory coordinator on S3: requests per operation")
    print("| groups | per heartbeat | per offset commit | $/month, each committing 1/s |")
    print("|---|---|---|---|")
    for groups in (1, 50, 500):
        proxy = CountingProxy(moto.endpoint_url)
        url = moto.fresh_root()
        open_root(url, proxy.storage_options(), create=True).create_topic("t", 4)
        root = open_root(url, proxy.storage_options(), metadata_max_staleness_ms=None)
        coordinator = GroupCoordinator(root, in_memory=True, min_session_timeout_ms=100)
        members = {}
        for g in range(groups):
            joined = coordinator.join_group(f"g{g}", "", ["t"], session_timeout_ms=1_800_000)
            coordinator.sync_group(f"g{g}", joined.generation, joined.member_id)
            members[g] = joined
            coordinator.commit_offsets(f"g{g}", joined.generation, joined.member_id, {("t", 0): 0})
        before = proxy.snapshot()
        for g, joined in members.items():
            coordinator.heartbeat(f"g{g}", joined.generation, joined.member_id)
        beats = proxy.snapshot()
        for g, joined in members.items():
            coordinator.commit_offsets(f"g{g}", joined.generation, joined.member_id, {("t", 0): 1})
        after = proxy.snapshot()
        proxy.close()
        beat_cost = beats.copy()
        beat_cost.subtract(before)
        commit_cost = after.copy()
        commit_cost.subtract(beats)
        per_commit = Counter({k: v / groups for k, v in commit_cost.items()})
        print(
            f"| {groups} | {sum(beat_cost.values()) / groups:.2f} "
            f"| {sum(per_commit.values()):.2f} ({dict(+per_commit)}) "
            f"| {monthly_bill(Counter({k: v * groups for k, v in per_commit.items()})):.2f} |"
        )


# -- offsets (format 3) ----------------------------------------------------------------------
def offsets_section(moto: MotoS3, rounds: int, flush_interval_ms: int) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from sparklog.storage.journal import JournalWriter

    print(
        f"\n## Offset commits on S3: requests per commit ({rounds} rounds after the first, "
        f"50 committers, journal flush interval {flush_interval_ms} ms; load {load()})"
    )
    print(
        "| groups | mode | writes per commit | reads per commit | p50 ms | p99 ms "
        "| $/month, each committing 1/s | writes vs format 2 |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for groups in (1, 100, 1_000, 5_000):
        baseline = 0.0
        for mode in ("format 2", "journal"):
            proxy = CountingProxy(moto.endpoint_url)
            root = open_root(moto.fresh_root(), proxy.storage_options(), create=True)
            if mode == "journal":
                writer = JournalWriter(root.store, 1, flush_interval_ms=flush_interval_ms)
                root.groups.use_journal(writer, lambda group: True)
            names = [f"g{g}" for g in range(groups)]
            latencies: list[float] = []

            def commit(args: tuple[str, int], store=root.groups, latencies=latencies) -> None:
                started = time.perf_counter()
                store.commit(args[0], {("t", 0): args[1]})
                latencies.append(time.perf_counter() - started)

            with ThreadPoolExecutor(50) as pool:
                list(pool.map(commit, [(g, 0) for g in names]))  # leases, first logs
                latencies.clear()
                before = proxy.snapshot()
                list(pool.map(commit, [(g, r) for r in range(1, rounds + 1) for g in names]))
                after = proxy.snapshot()
            proxy.close()
            after.subtract(before)
            commits = groups * rounds
            writes = sum(after[k] for k in ("PUT", "POST", "DELETE")) / commits
            reads = sum(after[k] for k in ("GET", "HEAD", "LIST")) / commits
            baseline = baseline or writes
            per_second = Counter({k: v / rounds for k, v in after.items()})
            latencies.sort()
            p50 = latencies[len(latencies) // 2] * 1000
            p99 = latencies[int(len(latencies) * 0.99)] * 1000
            print(
                f"| {groups} | {mode} | {writes:.3f} | {reads:.3f} | {p50:.0f} | {p99:.0f} "
                f"| {monthly_bill(per_second):,.0f} | {writes / baseline:.3f} |"
            )


# -- members ---------------------------------------------------------------------------------
def members_section(session_ms: int) -> None:
    print(f"\n## One group's members reaching a stable assignment (session {session_ms} ms)")
    print("| members | seconds | session timeouts |")
    print("|---|---|---|")
    for count in (1, 10, 50):
        with tempfile.TemporaryDirectory() as work:
            root = open_root(f"file://{work}/root", create=True)
            root.create_topic("t", 64)
            root = open_root(root.url, metadata_max_staleness_ms=None)
            coordinator = GroupCoordinator(root, in_memory=True, min_session_timeout_ms=100)
            start = time.monotonic()
            members = [
                Member(
                    coordinator,
                    "g",
                    ["t"],
                    session_timeout_ms=session_ms,
                    rebalance_timeout_ms=session_ms,
                    heartbeat_s=session_ms / 3000,
                ).start()
                for _ in range(count)
            ]
            done = threading.Event()
            while not done.is_set() and time.monotonic() - start < 10 * session_ms / 1000:
                gens = {m.generation for m in members}
                owned = sorted(tp for m in members for tp in m.assignment)
                if len(gens) == 1 and -1 not in gens and owned == [("t", p) for p in range(64)]:
                    done.set()
                    break
                time.sleep(0.05)
            took = time.monotonic() - start
            for m in members:
                m.stop(leave=False)
        shown = f"{took:.2f}" if done.is_set() else f"> {took:.0f} (not stable)"
        print(f"| {count} | {shown} | {took / (session_ms / 1000):.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sections", default="metadata,idle,groups,offsets,members")
    parser.add_argument("--cpu-topics", default="1000,5000")
    parser.add_argument("--cpu-idle-s", type=float, default=30.0)
    parser.add_argument("--cpu-requests", type=int, default=100)
    parser.add_argument("--idle-topics", type=int, default=100)
    parser.add_argument("--window-s", type=float, default=10.0)
    parser.add_argument("--idle-brokers", default="1,3,5")
    parser.add_argument("--idle-data-topics", type=int, default=0)
    parser.add_argument("--idle-parallel", action="store_true")
    parser.add_argument("--cleaner-interval-ms", type=int, default=300_000)
    parser.add_argument("--cleaner-first-pass-spread-ms", type=int, default=None)
    parser.add_argument("--session-ms", type=int, default=10_000)
    parser.add_argument("--offset-rounds", type=int, default=3)
    parser.add_argument("--offsets-flush-interval-ms", type=int, default=50)
    args = parser.parse_args()
    sections = set(args.sections.split(","))
    print(f"# scale_bench (load at start {load()})")
    if "cpu" in sections:
        counts = [int(n) for n in args.cpu_topics.split(",")]
        cpu_section(counts, args.cpu_idle_s, args.cpu_requests)
    if "metadata" in sections:
        metadata_section()
    moto = MotoS3.start() if sections & {"idle", "groups", "offsets"} else None
    try:
        if moto is not None and "idle" in sections:
            idle_section(
                moto,
                args.idle_topics,
                args.window_s,
                tuple(int(b) for b in args.idle_brokers.split(",")),
                args.idle_data_topics,
                args.idle_parallel,
                args.cleaner_interval_ms,
                args.cleaner_first_pass_spread_ms,
            )
        if moto is not None and "groups" in sections:
            groups_section(moto)
        if moto is not None and "offsets" in sections:
            offsets_section(moto, args.offset_rounds, args.offsets_flush_interval_ms)
    finally:
        if moto is not None:
            moto.stop()
    if "members" in sections:
        members_section(args.session_ms)
    print(f"\n(load at end {load()})")


if __name__ == "__main__":
    main()
