"""Throughput of format("sparklog") on Spark local[2], against baselines measured in the same run.

    PYTHONPATH=$PWD PYSPARK_PYTHON=$(which python) python bench/spark_bench.py --records 5000000

Records have 16-byte keys and 100-byte values, in a topic of ``--partitions``
partitions on a local root.  Every read is forced with Spark's ``noop`` sink
(no collect to the driver).  Measured:

* batch read: sparklog vs (a) Spark's built-in Parquet source over the same
  records and columns and (b) a Python data source yielding the very Arrow
  batches Spark wants from memory-mapped Arrow files - the ceiling of any
  Python data source (Python worker start, Arrow transfer to the JVM);
* streaming read (Trigger.AvailableNow): one batch, and ten batches with
  maxOffsetsPerTrigger = records / 10;
* write: sparklog sink vs Spark's Parquet writer, both from the same Parquet input;
* latency (``--sections latency``): produce-to-output p50/p99 of a topic-to-topic
  query with the default trigger at ``--rate`` records/s, embedded and through a
  broker, with the median per-batch durations Spark reports (bench/spark_latency.py);
* typed (``--sections typed``): a typed topic read as columns vs the same
  records as JSON bytes parsed with ``from_json``, end to end.

    python bench/spark_bench.py --records 2000000 --sections typed,latency --rate 200

Ratios are printed against the baselines; no result is asserted.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from sparklog.spark.schema import arrow_schema, source_schema, to_spark_batch  # noqa: E402
from sparklog.storage import open_root  # noqa: E402
from sparklog.storage.records import RECORD_SCHEMA  # noqa: E402

sys.path.insert(0, str(REPO / "bench"))
from spark_latency import (  # noqa: E402
    TYPED_DDL,
    generate_typed,
    measure_latency,
    per_batch_work_ms,
)

KEY_BYTES, VALUE_BYTES = 16, 100
CHUNK = 100_000


def random_binary(rng: np.random.Generator, n: int, width: int) -> pa.Array:
    raw = rng.integers(0, 256, size=n * width, dtype=np.uint8).tobytes()
    return pa.FixedSizeBinaryArray.from_buffers(
        pa.binary(width), n, [None, pa.py_buffer(raw)]
    ).cast(pa.binary())


def generate(
    root_dir: Path, records: int, partitions: int, append_records: int = CHUNK
) -> tuple[str, Path, Path]:
    """The topic on a local root, the same rows as Parquet, and as Spark-ready Arrow files.

    Each ``topic.append`` of ``append_records`` records is one segment (a producer's
    flush); the Parquet and Arrow baselines are written in files of ``CHUNK`` records
    whatever the segment size.
    """
    url = f"file://{root_dir}/root"
    root = open_root(url)
    root.create_topic("bench", partitions, config={"retention.ms": -1})
    topic = root.topic("bench")
    rng = np.random.default_rng(1)
    parquet_dir = root_dir / "parquet"
    arrow_dir = root_dir / "arrow"
    parquet_dir.mkdir()
    arrow_dir.mkdir()
    target = arrow_schema(source_schema(None, include_headers=False))
    offsets = [0] * partitions
    base_ms = 1_700_000_000_000
    written = 0
    chunk_no = 0
    while written < records:
        n = min(CHUNK, records - written)
        p = chunk_no % partitions
        stamps = pa.array(np.arange(written, written + n, dtype=np.int64) + base_ms).cast(
            pa.timestamp("ms", tz="UTC")
        )
        batch = pa.RecordBatch.from_arrays(
            [
                random_binary(rng, n, KEY_BYTES),
                random_binary(rng, n, VALUE_BYTES),
                stamps,
                pa.nulls(n, RECORD_SCHEMA.field("headers").type),
            ],
            schema=RECORD_SCHEMA,
        )
        for start in range(0, n, append_records):
            piece = batch.slice(start, append_records)
            # headers of the piece's own length: a slice of one long null list keeps the
            # whole list's child buffers, which the IPC writer would store in every segment
            topic.append(
                p,
                pa.RecordBatch.from_arrays(
                    [
                        *piece.columns[:3],
                        pa.nulls(piece.num_rows, RECORD_SCHEMA.field("headers").type),
                    ],
                    schema=RECORD_SCHEMA,
                ),
            )
        with_offsets = pa.RecordBatch.from_arrays(
            [pa.array(np.arange(offsets[p], offsets[p] + n, dtype=np.int64)), *batch.columns],
            names=["offset", *RECORD_SCHEMA.names],
        )
        spark_batch = to_spark_batch(with_offsets, "bench", p, 0, target)
        pq.write_table(
            pa.Table.from_batches([spark_batch]), parquet_dir / f"part-{chunk_no:05d}.parquet"
        )
        with pa.ipc.new_file(str(arrow_dir / f"chunk-{chunk_no:05d}.arrow"), target) as out:
            out.write_batch(spark_batch)
        offsets[p] += n
        written += n
        chunk_no += 1
    return url, parquet_dir, arrow_dir


def memory_source_class() -> Any:
    """A Python data source yielding prepared Arrow batches from memory-mapped files.

    Its writer receives the Arrow batches and discards them: the ceiling of any
    Python sink.
    """
    from pyspark.sql.datasource import (
        DataSource,
        DataSourceArrowWriter,
        DataSourceReader,
        DataSourceStreamReader,
        InputPartition,
        WriterCommitMessage,
    )
    from pyspark.sql.streaming.datasource import ReadAllAvailable, SupportsTriggerAvailableNow

    def two_tasks(files: list[str]) -> list[InputPartition]:
        """Files split into two tasks (one per core), as sparklog plans a backlog."""
        return [InputPartition(files[i::2]) for i in range(2) if files[i::2]]

    def read_files(partition: InputPartition) -> Iterator[pa.RecordBatch]:
        for path in partition.value:
            with pa.memory_map(path) as source:
                reader = pa.ipc.open_file(source)
                for i in range(reader.num_record_batches):
                    yield reader.get_batch(i)

    class MemoryReader(DataSourceReader):
        def __init__(self, directory: str) -> None:
            self.files = sorted(os.path.join(directory, f) for f in os.listdir(directory))

        def partitions(self) -> list[InputPartition]:
            return two_tasks(self.files)

        def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
            return read_files(partition)

    class MemoryStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
        """Offsets are file counts; ``filesPerTrigger`` files per micro-batch."""

        def __init__(self, directory: str, per_trigger: int) -> None:
            self.files = sorted(os.path.join(directory, f) for f in os.listdir(directory))
            self.per_trigger = per_trigger

        def initialOffset(self) -> dict:
            return {"files": 0}

        def prepareForTriggerAvailableNow(self) -> None:
            pass

        def getDefaultReadLimit(self) -> Any:
            return ReadAllAvailable()

        def latestOffset(self, start: dict, limit: Any) -> dict:
            step = self.per_trigger or len(self.files)
            return {"files": min(len(self.files), start["files"] + step)}

        def partitions(self, start: dict, end: dict) -> list[InputPartition]:
            return two_tasks(self.files[start["files"] : end["files"]])

        def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
            return read_files(partition)

    class DiscardWriter(DataSourceArrowWriter):
        def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
            for _ in iterator:  # consume every batch, keep nothing
                pass
            return WriterCommitMessage()

    class MemorySource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "arrowmemory"

        def schema(self) -> Any:
            return source_schema(None, include_headers=False)

        def reader(self, schema: Any) -> DataSourceReader:
            return MemoryReader(self.options["path"])

        def streamReader(self, schema: Any) -> DataSourceStreamReader:
            per_trigger = int(self.options.get("filesPerTrigger", "0"))
            return MemoryStreamReader(self.options["path"], per_trigger)

        def writer(self, schema: Any, overwrite: bool) -> DataSourceArrowWriter:
            return DiscardWriter()

    return MemorySource


REPEAT = 3
STAT = "best"


def timed(label: str, action: Callable[[], Any], records: int, results: dict) -> float:
    """The best (default: on a shared machine the least disturbed) or the median of REPEAT
    runs, as ``--stat`` says; every run is printed."""
    runs = []
    for _ in range(REPEAT):
        start = time.perf_counter()
        action()
        runs.append(time.perf_counter() - start)
    seconds = min(runs) if STAT == "best" else sorted(runs)[len(runs) // 2]
    results[label] = seconds
    spread = f"(runs {', '.join(f'{r:.2f}' for r in runs)})"
    print(
        f"{label:<44} {seconds:8.2f} s {records / seconds / 1e6:8.2f} M records/s  {spread}",
        flush=True,
    )
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=5_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--dir", type=Path, default=None, help="work directory (default: tmp)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per measurement")
    parser.add_argument(
        "--stat", choices=("best", "median"), default="best", help="which run is kept"
    )
    parser.add_argument(
        "--append-records",
        type=int,
        default=CHUNK,
        help="records per segment of the topic (one producer flush each)",
    )
    parser.add_argument(
        "--sections",
        default="batch,stream,write,latency,typed",
        help="comma-separated: batch, stream, write (these three run together), latency, typed",
    )
    parser.add_argument("--rate", type=int, default=200, help="latency: records per second")
    parser.add_argument("--seconds", type=float, default=20, help="latency: seconds of producing")
    args = parser.parse_args()
    sections = set(args.sections.split(","))
    global REPEAT, STAT
    REPEAT, STAT = args.repeat, args.stat
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(REPO), *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]]
    )
    work = args.dir or Path(tempfile.mkdtemp(prefix="sparklog-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    n = args.records
    try:
        t0 = time.perf_counter()
        url, parquet_dir, arrow_dir = generate(
            work,
            n if sections & {"batch", "stream", "write"} else CHUNK,
            args.partitions,
            args.append_records,
        )
        print(f"generated {n} records in {time.perf_counter() - t0:.1f} s under {work}")
        from pyspark.sql import SparkSession
        from pyspark.sql import functions as F

        spark = (
            SparkSession.builder.master("local[2]")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.driver.memory", "2g")
            .config("spark.sql.session.timeZone", "UTC")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        spark.dataSource.register(memory_source_class())
        results: dict[str, float] = {}

        def sparklog() -> Any:
            return spark.read.format("sparklog").option("root", url).option("subscribe", "bench")

        def noop(df: Any) -> None:
            df.write.format("noop").mode("overwrite").save()

        def stream(max_offsets: int | None, name: str) -> None:
            reader = (
                spark.readStream.format("sparklog")
                .option("root", url)
                .option("subscribe", "bench")
                .option("startingOffsets", "earliest")
            )
            if max_offsets:
                reader = reader.option("maxOffsetsPerTrigger", str(max_offsets))
            query = (
                reader.load()
                .writeStream.format("noop")
                .option("checkpointLocation", str(work / f"ck-{name}-{uuid.uuid4().hex}"))
                .trigger(availableNow=True)
                .start()
            )
            query.awaitTermination()
            rows = sum(p["numInputRows"] for p in query.recentProgress)
            assert rows == n, f"streamed {rows} of {n} records"

        def parquet_stream(max_files: int | None, name: str) -> None:
            reader = spark.readStream.schema(spark.read.parquet(str(parquet_dir)).schema)
            if max_files:
                reader = reader.option("maxFilesPerTrigger", str(max_files))
            query = (
                reader.parquet(str(parquet_dir))
                .writeStream.format("noop")
                .option("checkpointLocation", str(work / f"ck-parquet-{name}-{uuid.uuid4().hex}"))
                .trigger(availableNow=True)
                .start()
            )
            query.awaitTermination()

        source = spark.read.parquet(str(parquet_dir)).select("key", "value")

        def memory_stream(files_per_trigger: int | None, name: str) -> None:
            reader = spark.readStream.format("arrowmemory").option("path", str(arrow_dir))
            if files_per_trigger:
                reader = reader.option("filesPerTrigger", str(files_per_trigger))
            query = (
                reader.load()
                .writeStream.format("noop")
                .option("checkpointLocation", str(work / f"ck-mem-{name}-{uuid.uuid4().hex}"))
                .trigger(availableNow=True)
                .start()
            )
            query.awaitTermination()

        if sections & {"batch", "stream", "write"}:
            # Warm-up: JVM, Python workers and the page cache, outside the timings.
            noop(sparklog().load())
            noop(spark.read.parquet(str(parquet_dir)))
            noop(spark.read.format("arrowmemory").option("path", str(arrow_dir)).load())
            stream(None, "warm-up")
            parquet_stream(None, "warm-up")
            memory_stream(None, "warm-up")

            timed("batch read: sparklog", lambda: noop(sparklog().load()), n, results)
            timed(
                "batch read: parquet (a)",
                lambda: noop(spark.read.parquet(str(parquet_dir))),
                n,
                results,
            )
            timed(
                "batch read: python source from memory (b)",
                lambda: noop(
                    spark.read.format("arrowmemory").option("path", str(arrow_dir)).load()
                ),
                n,
                results,
            )
            timed("stream read: sparklog, one batch", lambda: stream(None, "one"), n, results)
            timed("stream read: sparklog, ten batches", lambda: stream(n // 10, "ten"), n, results)

            files = len(list(parquet_dir.iterdir()))
            timed(
                "stream read: python from memory (b), one batch",
                lambda: memory_stream(None, "one"),
                n,
                results,
            )
            timed(
                "stream read: python from memory (b), ten batches",
                lambda: memory_stream(max(1, files // 10), "ten"),
                n,
                results,
            )
            timed(
                "stream read: parquet (a), one batch",
                lambda: parquet_stream(None, "one"),
                n,
                results,
            )
            timed(
                "stream read: parquet (a), ten batches",
                lambda: parquet_stream(max(1, files // 10), "ten"),
                n,
                results,
            )
            open_root(url).create_topic("sink", args.partitions)
            # Warm-up of the write paths (Python workers importing the sinks), outside the timings.
            sample = source.limit(1000)
            sample.write.format("sparklog").option("root", url).option("topic", "sink").mode(
                "append"
            ).save()
            sample.write.format("arrowmemory").mode("append").save()
            sample.write.mode("overwrite").parquet(str(work / "parquet-warm-up"))
            timed(
                "write: sparklog sink",
                lambda: (
                    source.write.format("sparklog")
                    .option("root", url)
                    .option("topic", "sink")
                    .mode("append")
                    .save()
                ),
                n,
                results,
            )
            timed(
                "write: python sink discarding batches (b)",
                lambda: source.write.format("arrowmemory").mode("append").save(),
                n,
                results,
            )
            timed(
                "write: parquet (a)",
                lambda: source.write.mode("overwrite").parquet(str(work / "parquet-out")),
                n,
                results,
            )
        if "typed" in sections:
            typed_url = f"file://{work}/typed"
            generate_typed(typed_url, n, args.partitions)

            def typed_read() -> None:
                df = (
                    spark.read.format("sparklog")
                    .option("root", typed_url)
                    .option("subscribe", "typed")
                    .load()
                )
                noop(df.select("value.*"))

            def json_read() -> None:
                df = (
                    spark.read.format("sparklog")
                    .option("root", typed_url)
                    .option("subscribe", "json")
                    .load()
                )
                parsed = F.from_json(F.col("value").cast("string"), TYPED_DDL).alias("v")
                noop(df.select(parsed).select("v.*"))

            typed_read()  # warm-up
            json_read()
            timed("typed topic read as columns", typed_read, n, results)
            timed("same records as JSON + from_json", json_read, n, results)
        if "latency" in sections:
            work_ms = per_batch_work_ms(work)
            print(
                "sparklog's own calls per micro-batch of 40 records (median ms, in-process): "
                + ", ".join(f"{k} {v:.1f}" for k, v in work_ms.items()),
                flush=True,
            )
            for via_broker in (False, True):
                label = "through a broker" if via_broker else "embedded"
                figures = measure_latency(
                    spark, work, via_broker=via_broker, rate=args.rate, seconds=args.seconds
                )
                print(
                    f"latency {label:<17} {args.rate} records/s: p50 {figures['p50_ms']:.0f} ms, "
                    f"p99 {figures['p99_ms']:.0f} ms ({figures['delivered']}/{figures['records']} "
                    f"records, {figures['batches']} batches; median per-batch ms "
                    f"{figures['median_durations_ms']})",
                    flush=True,
                )
        spark.stop()
        print("\nratios: sparklog throughput / baseline throughput (same run; > 1 is faster)")
        pairs = [
            (
                "batch read vs python source from memory (b)",
                "batch read: python source from memory (b)",
                "batch read: sparklog",
            ),
            ("batch read vs parquet (a)", "batch read: parquet (a)", "batch read: sparklog"),
            (
                "stream, one batch vs python from memory (b)",
                "stream read: python from memory (b), one batch",
                "stream read: sparklog, one batch",
            ),
            (
                "stream, ten batches vs python from memory (b)",
                "stream read: python from memory (b), ten batches",
                "stream read: sparklog, ten batches",
            ),
            (
                "stream, one batch vs parquet stream (a)",
                "stream read: parquet (a), one batch",
                "stream read: sparklog, one batch",
            ),
            (
                "stream, ten batches vs parquet stream (a)",
                "stream read: parquet (a), ten batches",
                "stream read: sparklog, ten batches",
            ),
            (
                "stream, one batch vs batch read",
                "batch read: sparklog",
                "stream read: sparklog, one batch",
            ),
            (
                "write vs python sink discarding (b)",
                "write: python sink discarding batches (b)",
                "write: sparklog sink",
            ),
            ("write vs parquet writer (a)", "write: parquet (a)", "write: sparklog sink"),
        ]
        pairs.append(
            (
                "typed columns vs JSON + from_json",
                "same records as JSON + from_json",
                "typed topic read as columns",
            )
        )
        for label, baseline, measured in pairs:
            if baseline in results and measured in results:
                print(f"  {label:<46} {results[baseline] / results[measured]:5.2f}")
    finally:
        if args.dir is None:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
