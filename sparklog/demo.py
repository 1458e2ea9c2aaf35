"""``sparklog demo``: everything sparklog is for, end to end, on a fresh local root.

Steps: a broker in-process on a free loopback port; a keyed clickstream topic
and an output topic; a producer streaming synthetic page views through the
broker; a Structured Streaming query (group ``demo-analytics``) counting views
per page per minute into the output topic exactly-once; the group's lag falling
to zero; the output read back; batch reprocessing from an old offset and from a
timestamp; a summary with the commands to explore further.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.rule import Rule
from rich.table import Table

from sparklog.clock import now_ms
from sparklog.spark.local_session import (
    first_lines,
    is_worker_timeout,
    timed_out,
    worker_timeout_line,
)

T = TypeVar("T")

INPUT_TOPIC = "clickstream"
OUTPUT_TOPIC = "page-views-per-minute"
GROUP = "demo-analytics"
PARTITIONS = 4
PAGES = ["/", "/search", "/product/1", "/product/2", "/product/3", "/cart", "/checkout", "/help"]
EVENT_SPAN_MS = 30 * 60 * 1000  # synthetic events span half an hour


class DemoError(Exception):
    """A demo step failed; the message says which and why."""


@dataclass
class DemoRun:
    """What the demo measured, for the summary."""

    root: str
    broker: str = ""
    produced: int = 0
    produce_s: float = 0.0
    streamed: int = 0
    stream_s: float = 0.0
    output_rows: int = 0
    reprocessed: dict[str, int] = field(default_factory=dict)
    #: when the demo began (``time.perf_counter``), for its total time in the summary
    started_s: float = field(default_factory=time.perf_counter)


def synthetic_views(count: int, start_ms: int, seed: int = 7) -> list[tuple[bytes, bytes, int]]:
    """Page views: (user key, JSON value, timestamp ms) in time order."""
    rng = random.Random(seed)
    users = [f"user-{i:04d}" for i in range(max(count // 20, 10))]
    out = []
    for i in range(count):
        ts = start_ms + i * EVENT_SPAN_MS // max(count, 1)
        user = rng.choice(users)
        page = rng.choices(PAGES, weights=[8, 5, 3, 3, 2, 2, 1, 1])[0]
        value = {"user": user, "page": page, "ms": ts, "ref": rng.choice(["ad", "seo", "direct"])}
        out.append((user.encode(), json.dumps(value).encode(), ts))
    return out


def quiet_spark_session(log_path: str, app_name: str = "sparklog-demo") -> Any:
    """A local[2] session bound to loopback, whose JVM and workers log to ``log_path``.

    Java's start-up notices, log4j's and the workers' warnings would otherwise land
    in the middle of the demo's output (:func:`sparklog.spark.local_session.start_session`).
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    # PySpark 4.3 warns on import that it is not tested with pandas 3; sparklog's Spark
    # paths do not go through pandas, so the warning only clutters what people read.
    warnings.filterwarnings(
        "ignore", message="PySpark does not yet fully support pandas", category=FutureWarning
    )
    try:
        from pyspark.sql import SparkSession
    except ImportError as exc:
        raise DemoError(
            "the demo runs a Spark query and needs pyspark: pip install 'sparklog[spark]'"
        ) from exc

    from sparklog.spark.local_session import start_session

    spark = start_session(_builder(SparkSession, app_name), log_path)
    # Spark's WARN lines stay in the log: a data-source lookup that timed out is only there
    return spark


def _builder(session_class: Any, app_name: str) -> Any:
    return (
        session_class.builder.master("local[2]")
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.python.filterPushdown.enabled", "true")
    )


class Demo:
    """The demo's steps, each printing what it did and failing with a DemoError."""

    def __init__(self, console: Console, root: str, records: int, keep: bool = True) -> None:
        self.console = console
        self.keep = keep
        self.records = records
        self.run = DemoRun(root)
        self.step_no = 0
        self.steps = 8

    def step(self, title: str) -> None:
        self.step_no += 1
        # at most 100 wide: a piped console is made wide for tables, and a rule that wide
        # would bury the title mid-line in a 10,000-character line of a log
        title_line = Rule(f"[bold cyan][{self.step_no}/{self.steps}] {title}")
        self.console.print(title_line, width=min(self.console.width, 100))

    # -- 1 -----------------------------------------------------------------------------
    def start_broker(self) -> tuple[Any, Any]:
        from sparklog.broker_lite.config import load_config
        from sparklog.broker_lite.server import start_broker

        self.step("broker: started in-process on a free loopback port")
        config = load_config(
            None,
            {
                "root": self.run.root,
                "listen": "127.0.0.1:0",
                "kafka_listen": "127.0.0.1:0",
                "linger_ms": 5,
                "metrics_listen": "",
            },
            env={},
        )
        server, broker, _ = start_broker(config)
        self.run.broker = f"sparklog://127.0.0.1:{server.port}"
        self.console.print(f"broker listening at [bold]{self.run.broker}[/], root {self.run.root}")
        return server, broker

    # -- 2 -----------------------------------------------------------------------------
    def create_topics(self) -> None:
        from sparklog import Admin

        self.step("topics: a keyed clickstream and an output topic")
        with Admin(self.run.broker) as admin:
            admin.create_topic(INPUT_TOPIC, PARTITIONS, {"retention.ms": -1})
            admin.create_topic(OUTPUT_TOPIC, 1)
            for name in (INPUT_TOPIC, OUTPUT_TOPIC):
                d = admin.describe_topic(name)
                self.console.print(f"created [bold]{name}[/] with {len(d.partitions)} partition(s)")

    # -- 3 -----------------------------------------------------------------------------
    def produce(self) -> int:
        from sparklog import Producer

        self.step(f"producer: {self.records:,} page views keyed by user, through the broker")
        start_ms = now_ms() - EVENT_SPAN_MS - 60_000
        views = synthetic_views(self.records, start_ms)
        started = time.perf_counter()
        futures = []
        columns = (TextColumn("sending"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        with (
            Producer(self.run.broker, linger_ms=20) as producer,
            Progress(*columns, console=self.console, transient=False) as bar,
        ):
            task = bar.add_task("send", total=len(views))
            for i, (key, value, ts) in enumerate(views):
                futures.append(
                    producer.send(
                        INPUT_TOPIC,
                        value,
                        key=key,
                        timestamp_ms=ts,
                        headers=[("source", b"demo"), ("schema", b"pageview.v1")],
                    )
                )
                if i % 1000 == 999:
                    bar.update(task, completed=i + 1)
            # A heartbeat past the last window moves the query's event-time watermark
            # beyond every window, so append mode emits them all. It has no page; its own
            # window stays open, so it never reaches the output.
            heartbeat_ms = views[-1][2] + 3 * 60_000
            futures.append(
                producer.send(
                    INPUT_TOPIC,
                    json.dumps({"ms": heartbeat_ms}).encode(),
                    key=b"heartbeat",
                    timestamp_ms=heartbeat_ms,
                )
            )
            producer.flush()
            bar.update(task, completed=len(views))
        metadata = [f.get(timeout=60) for f in futures][:-1]
        self.run.produce_s = time.perf_counter() - started
        self.run.produced = len(metadata)
        per_partition: dict[int, int] = {}
        for m in metadata:
            per_partition[m.partition] = per_partition.get(m.partition, 0) + 1
        self.console.print(
            f"acknowledged {len(metadata):,} records in {self.run.produce_s:.1f} s "
            f"({len(metadata) / self.run.produce_s:,.0f} records/s); per partition "
            f"{dict(sorted(per_partition.items()))}"
        )
        return start_ms

    # -- 4 and 5 ---------------------------------------------------------------------
    def stream(self, spark: Any, checkpoint: str) -> None:
        from pyspark.sql import functions as F
        from pyspark.sql.types import LongType, StringType, StructField, StructType

        self.step(f"Structured Streaming: views per page per minute, group {GROUP!r}")
        lag_before = self.total_lag()
        self.console.print(
            f"lag of {GROUP!r} before the query: {lag_before:,} = {self.run.produced:,} page "
            "views + 1 heartbeat record (it moves event time past the last window, so the "
            "query emits every window)"
        )
        self.console.print(
            f"the query reads at most {max(self.records // 3, 1):,} records per micro-batch, "
            "one micro-batch a second; each line below is one micro-batch"
        )
        view = StructType(
            [
                StructField("user", StringType()),
                StructField("page", StringType()),
                StructField("ms", LongType()),
                StructField("ref", StringType()),
            ]
        )
        from sparklog.spark.compat import HAS_ADMISSION_CONTROL

        # a few micro-batches where Spark has admission control (4.2+); one batch on 4.0/4.1
        limits = (
            {"maxOffsetsPerTrigger": str(max(self.records // 3, 1))}
            if HAS_ADMISSION_CONTROL
            else {}
        )
        source = (
            spark.readStream.format("sparklog")
            .option("root", self.run.root)
            .option("subscribe", INPUT_TOPIC)
            .option("startingOffsets", "earliest")
            .option("group", GROUP)
            .options(**limits)
            .load()
        )
        counts = (
            source.withWatermark("timestamp", "1 minute")
            .select(F.from_json(F.col("value").cast("string"), view).alias("v"), "timestamp")
            .groupBy(F.window("timestamp", "1 minute"), F.col("v.page").alias("page"))
            .count()
            .select(
                F.concat_ws("|", F.col("page"), F.col("window.start").cast("string")).alias("key"),
                F.to_json(
                    F.struct(
                        "page",
                        F.col("window.start").alias("window_start"),
                        F.col("count").alias("views"),
                    )
                ).alias("value"),
            )
        )
        started = time.perf_counter()
        progress: list[Any] = []  # every attempt's micro-batches (a retry resumes)
        retry_on_worker_timeout(
            lambda: self._run_query(spark, counts, checkpoint, progress),
            on_retry=lambda: self.console.print(
                "a Spark Python worker did not start within Spark's 10 s (a busy machine); "
                "starting the query again from its checkpoint"
            ),
        )
        self.run.stream_s = time.perf_counter() - started
        self.run.streamed = sum(int(p["numInputRows"]) for p in progress) - 1  # heartbeat
        batches = sum(1 for p in progress if int(p["numInputRows"]))
        self.console.print(
            f"{batches} micro-batches with data, {self.run.streamed:,} input rows in "
            f"{self.run.stream_s:.1f} s; windows written exactly-once to {OUTPUT_TOPIC!r}"
        )
        self.step(f"consumer group {GROUP!r}: lag falls to zero")
        lag_after = self.total_lag()
        self.console.print(
            f"lag of {GROUP!r}: {lag_before:,} before ({self.run.produced:,} views + 1 "
            f"heartbeat), {lag_after:,} after"
        )
        if lag_after != 0 or self.run.streamed != self.run.produced:
            raise DemoError(
                f"expected the query to read all {self.run.produced:,} records and leave lag 0; "
                f"it read {self.run.streamed:,} and the lag is {lag_after:,}"
            )

    def _run_query(self, spark: Any, counts: Any, checkpoint: str, progress: list[Any]) -> None:
        """Run the counting query until every view is in an emitted window.

        Its micro-batches' progress is added to ``progress`` (also when it fails: a
        retry resumes from the checkpoint after the batches it committed).
        """
        query = (
            counts.writeStream.format("sparklog")
            .option("root", self.run.root)
            .option("topic", OUTPUT_TOPIC)
            .option("checkpointLocation", checkpoint)
            .outputMode("append")
            .trigger(processingTime="1 second")
            .start()
        )
        # Append mode emits a window once the watermark passes it, which takes one more
        # (no-data) micro-batch after the heartbeat: wait until every input row is in an
        # emitted window and the group has committed the last batch's offsets (Spark
        # commits a batch's source offsets when it plans the next trigger), then stop.
        limit_s = float(os.environ.get("SPARKLOG_DEMO_STREAM_S", 240))
        deadline = time.monotonic() + limit_s
        shown = 0
        try:
            while (emitted := self.output_views(spark)) < self.run.produced or self.total_lag():
                shown = self._show_batches(query.recentProgress, shown, emitted)
                failure = query.exception()
                if failure is not None:
                    if is_worker_timeout(str(failure)):
                        raise WorkerTimeout(str(failure))
                    raise DemoError(f"streaming query failed: {first_lines(failure)}")
                if time.monotonic() > deadline:
                    raise DemoError(
                        f"the query emitted {self.output_views(spark):,} of "
                        f"{self.run.produced:,} views and left lag {self.total_lag():,} "
                        f"within {limit_s:.0f} s"
                    )
                time.sleep(1)  # the console's refresh rate, not a synchronisation
        finally:
            mine = list(query.recentProgress)
            query.stop()
            progress.extend(mine)
        self._show_batches(mine, shown, self.output_views(spark))

    def _show_batches(self, progress: list[Any], shown: int, emitted: int) -> int:
        """Print the micro-batches finished since the last call; return how many are shown."""
        for batch in progress[shown:]:
            rows = int(batch["numInputRows"])
            duration_ms = int((batch.get("durationMs") or {}).get("triggerExecution", 0))
            self.console.print(
                f"  micro-batch {batch['batchId']}: {rows:,} input rows in {duration_ms:,} ms; "
                f"{emitted:,} of {self.run.produced:,} views in emitted windows",
                highlight=False,
            )
        return len(progress)

    def output_table(self, spark: Any) -> Any:
        from pyspark.sql import functions as F

        raw = (
            spark.read.format("sparklog")
            .option("root", self.run.root)
            .option("subscribe", OUTPUT_TOPIC)
            .load()
        )
        schema = "page string, window_start string, views long"
        return raw, raw.select(
            "key", F.from_json(F.col("value").cast("string"), schema).alias("v")
        ).select("key", "v.*")

    def output_views(self, spark: Any) -> int:
        _, counts = self.output_table(spark)
        return int(counts.agg({"views": "sum"}).collect()[0][0] or 0)

    def total_lag(self) -> int:
        from sparklog import Admin, GroupError

        with Admin(self.run.root) as admin:
            try:
                described = admin.describe_group(GROUP)
            except GroupError:
                return sum(
                    p.high_watermark - p.log_start_offset
                    for p in admin.describe_topic(INPUT_TOPIC, sizes=False).partitions
                )
            committed = {(p.topic, p.partition) for p in described.lag}
            missing = sum(
                p.high_watermark
                for p in admin.describe_topic(INPUT_TOPIC, sizes=False).partitions
                if (INPUT_TOPIC, p.partition) not in committed
            )
            return described.total_lag + missing

    # -- 6 -----------------------------------------------------------------------------
    def read_output(self, spark: Any) -> None:
        from pyspark.sql import functions as F

        self.step(f"read back {OUTPUT_TOPIC!r}: one count per page and minute")
        raw, counts = self.output_table(spark)
        per_page = (
            counts.groupBy("page").agg(F.sum("views").alias("views")).orderBy(F.desc("views"))
        ).collect()
        total = sum(int(r["views"]) for r in per_page)
        self.run.output_rows = raw.count()
        table = Table("page", "views", title="views per page (sum over minutes)")
        for r in per_page:
            table.add_row(r["page"], f"{int(r['views']):,}")
        self.console.print(table)
        windows = raw.select("key").distinct().count()
        if total != self.run.produced or windows != self.run.output_rows:
            raise DemoError(
                f"the output holds {self.run.output_rows:,} records for {windows:,} windows "
                f"counting {total:,} views; expected one record per window and "
                f"{self.run.produced:,} views"
            )
        self.console.print(
            f"{self.run.output_rows:,} records in {OUTPUT_TOPIC!r}, one per page and minute; "
            f"counts add up to the {total:,} produced views"
        )

    # -- 7 -----------------------------------------------------------------------------
    def reprocess(self, spark: Any, start_ms: int) -> None:
        self.step("batch reprocessing from an old offset and from a timestamp")
        base = (
            spark.read.format("sparklog")
            .option("root", self.run.root)
            .option("subscribe", INPUT_TOPIC)
        )
        offsets = {str(p): 100 for p in range(PARTITIONS)}
        from_offset = base.option("startingOffsets", json.dumps({INPUT_TOPIC: offsets})).load()
        half = start_ms + EVENT_SPAN_MS // 2
        from_time = base.option("startingTimestamp", str(half)).load()
        n_offset, n_time = from_offset.count(), from_time.count()
        expected_offset = self.run.produced + 1 - 100 * PARTITIONS  # + the heartbeat
        self.run.reprocessed = {"from offset 100": n_offset, "from the half-hour mark": n_time}
        self.console.print(
            f"from offset 100 of every partition: {n_offset:,} records (expected "
            f"{expected_offset:,}); from the timestamp halfway through: {n_time:,} records"
        )
        if n_offset != expected_offset or not 0 < n_time < self.run.produced:
            raise DemoError("reprocessing read an unexpected number of records")

    # -- 8 -----------------------------------------------------------------------------
    def summary(self) -> None:
        self.step("summary")
        r = self.run
        table = Table(show_header=False)
        table.add_row("root", r.root)
        table.add_row("records produced", f"{r.produced:,} ({r.produced / r.produce_s:,.0f}/s)")
        table.add_row("records streamed", f"{r.streamed:,} in {r.stream_s:.1f} s")
        table.add_row("output records", f"{r.output_rows:,}")
        for name, n in r.reprocessed.items():
            table.add_row(f"reprocessed {name}", f"{n:,}")
        table.add_row(
            "demo time", f"{time.perf_counter() - r.started_s:.0f} s (Spark's start included)"
        )
        self.console.print(table)
        if not self.keep:
            self.console.print(
                "the root is removed now; run [bold]sparklog demo --keep[/] (or --root DIR) "
                "to keep it and explore it with the sparklog commands"
            )
            return
        self.console.print("explore further:")
        for command in (
            f"sparklog --address {r.root} topics describe {INPUT_TOPIC}",
            f"sparklog --address {r.root} consume {OUTPUT_TOPIC} --from-beginning "
            "--max-messages 5 --format json",
            f"sparklog --address {r.root} groups describe {GROUP}",
            f"sparklog --address {r.root} offsets {INPUT_TOPIC} --time earliest",
        ):
            self.console.print(f"  [green]{command}[/]")


class WorkerTimeout(Exception):
    """The streaming query failed because a Spark Python worker did not connect back."""


def retry_on_worker_timeout(run: Callable[[], T], on_retry: Callable[[], None]) -> T:
    """``run()``, once more after Spark's Python-worker timeout; a second one is a DemoError.

    The timeout (docs/spark.md: 10 s, fixed in Spark) comes from a busy machine, not
    from the query, and the query restarts from its checkpoint, exactly-once, so one
    retry costs nothing but time. It surfaces as :class:`WorkerTimeout` from a running
    query or as Spark's own error from ``start()``.
    """
    for attempt in (1, 2):
        try:
            return run()
        except Exception as exc:
            if not (isinstance(exc, WorkerTimeout) or is_worker_timeout(exc)):
                raise
            if attempt == 2:
                raise DemoError(worker_timeout_line()) from exc
            on_retry()
    raise AssertionError("unreachable")


def run_demo(root: str | None, records: int, keep: bool, console: Console | None = None) -> None:
    """Run every step; raise DemoError naming the step that failed."""
    console = console or Console()
    made_root = root is None
    url = root or tempfile.mkdtemp(prefix="sparklog-demo-")
    console.print(f"sparklog demo on root [bold]{url}[/]")
    demo = Demo(console, url, records, keep)
    server = broker = spark = None
    checkpoint = tempfile.mkdtemp(prefix="sparklog-demo-checkpoint-")
    log_fd, spark_log = tempfile.mkstemp(prefix="sparklog-demo-spark-", suffix=".log")
    os.close(log_fd)
    failed = True
    try:
        server, broker = demo.start_broker()
        demo.create_topics()
        start_ms = demo.produce()
        console.print("starting Spark (local[2]) ...")
        spark = quiet_spark_session(spark_log)
        demo.stream(spark, checkpoint)
        demo.read_output(spark)
        demo.reprocess(spark, start_ms)
        demo.summary()
        failed = False
    except DemoError as exc:
        raise DemoError(f"{exc} (Spark's log: {spark_log})") from exc
    except Exception as exc:
        if timed_out(exc, spark_log):
            raise DemoError(
                f"step {demo.step_no} failed: {worker_timeout_line(spark_log)}"
            ) from exc
        raise DemoError(
            f"step {demo.step_no} failed: {first_lines(exc)} (Spark's log: {spark_log})"
        ) from exc
    finally:
        if spark is not None:
            spark.stop()
        if server is not None and broker is not None:
            from sparklog.broker_lite.server import stop_broker

            stop_broker(server, broker)
        shutil.rmtree(checkpoint, ignore_errors=True)
        if not failed:
            os.remove(spark_log)
        if made_root and not keep:
            shutil.rmtree(url, ignore_errors=True)
            console.print(f"removed {url} (use --keep to keep it)")
