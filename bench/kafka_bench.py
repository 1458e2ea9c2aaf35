"""Kafka listener throughput and latency against sparklog's own client on the same broker.

One broker process on a local root.  confluent-kafka (librdkafka) produces
100-byte records through the Kafka listener and consumes them back; sparklog's
Producer (``send`` per record) and Consumer (``poll``) do the same through
Flight on the same broker, as the baseline of the ratios.  Then latency:
confluent-kafka produces at a fixed rate (default 2,000 records/s) while a
confluent-kafka consumer reads; each record carries its send time, and the
p50/p99 of receive minus send is printed.  Targets (issue 12): >= 300,000
records/s produced, >= 500,000 consumed, p99 < 50 ms.  Transactions (issue 25):
a transactional confluent-kafka producer (``--txn-size`` records per
transaction, default 1,000) against an idempotent one in the same run, target
ratio >= 0.7.

Last, security (issue 23): a second broker, on a root of its own, serves the
Kafka listener with ``SASL_SSL`` (SCRAM-SHA-512, a certificate made with
``openssl``), and the same confluent-kafka produce and consume run through it;
their ratio to the PLAINTEXT figures of the same run is printed (target >= 0.8).

Each path first moves ``--warm-up`` records (default 20,000) through its own
topic, untimed: a broker that has served for a while has its connections,
lazy imports and first flushes behind it.

Client settings, as a Kafka user would set them: the throughput producer sets
``acks=all`` (librdkafka's default too), ``linger.ms=20`` (the usual throughput
setting; the default is 5) and ``queue.buffering.max.messages=1000000`` (so a
200,000-record burst fits the client's queue; the default 100,000 would make
``produce`` raise BufferError); ``batch.size`` is librdkafka's default of 1 MB.
The throughput consumer sets ``queued.min.messages=1000000``: with librdkafka's
default of 100,000, a partition holding more than that many fetched records is not
fetched again for ``fetch.queue.backoff.ms`` (1 s), and the sticky partitioner puts
over 100,000 of the 200,000 records in one partition, so the default stalls the
loop for about a second in most runs (measured: 150,000 records/s with the stall,
350,000-520,000 without), as it would against Kafka.  ``fetch.max.bytes`` is the
default 50 MiB.  The latency run uses the defaults on both sides
(``linger.ms`` 5, ``fetch.wait.max.ms`` 500: the broker's long-poll answers as
soon as a commit lands) and reads with ``poll()``, one message at a time, as a
Kafka consumer loop does.

    .venv/bin/python bench/kafka_bench.py --records 200000 --partitions 4
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from sparklog import Admin  # noqa: E402
from sparklog import Consumer as SlConsumer  # noqa: E402
from sparklog import Producer as SlProducer  # noqa: E402

VALUE = b"v" * 100


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_broker(
    root: str, log_path: Path, settings: dict[str, str] | None = None, broker_id: int = 1
) -> tuple[subprocess.Popen, str, str]:
    """A broker process; (process, Flight address, Kafka bootstrap) once it is up."""
    port = _free_port()
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "SPARKLOG_METRICS_LISTEN": "",
        "SPARKLOG_LOG_LEVEL": "INFO",
        "SPARKLOG_LOG_FORMAT": "json",
        **(settings or {}),
    }
    log = open(log_path, "wb")  # noqa: SIM115
    proc = subprocess.Popen(
        [sys.executable, "-m", "sparklog.cli", "broker", "start", "--root", root,
         "--listen", f"127.0.0.1:{port}", "--broker-id", str(broker_id),
         "--kafka-listen", "127.0.0.1:0"],
        env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for line in log_path.read_text(errors="replace").splitlines():
            if '"broker started"' in line:
                kafka = json.loads(line)["kafka_address"]
                return proc, f"sparklog://127.0.0.1:{port}", kafka
        if proc.poll() is not None:
            raise SystemExit(f"broker exited; see {log_path}")
        time.sleep(0.1)
    raise SystemExit("broker did not start within 60 s")


def kafka_produce(
    bootstrap: str, topic: str, records: int, options: dict[str, str] | None = None
) -> float:
    producer = Producer(
        {
            **(options or {}),
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "linger.ms": 20,
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    started = time.perf_counter()
    for _ in range(records):
        while True:
            try:
                producer.produce(topic, VALUE)
                break
            except BufferError:
                producer.poll(0.01)
    if producer.flush(300):
        raise SystemExit("confluent-kafka producer did not flush")
    return records / (time.perf_counter() - started)


def _exactly_once_producer(bootstrap: str, transactional_id: str | None) -> Producer:
    config = {
        "bootstrap.servers": bootstrap,
        "enable.idempotence": True,
        "linger.ms": 20,
        "queue.buffering.max.messages": 1_000_000,
    }
    if transactional_id is not None:
        config["transactional.id"] = transactional_id
    return Producer(config)


def kafka_produce_idempotent(bootstrap: str, topic: str, records: int) -> float:
    """An idempotent producer: the baseline of transactional produce."""
    producer = _exactly_once_producer(bootstrap, None)
    started = time.perf_counter()
    for _ in range(records):
        while True:
            try:
                producer.produce(topic, VALUE)
                break
            except BufferError:
                producer.poll(0.01)
    if producer.flush(300):
        raise SystemExit("idempotent producer did not flush")
    return records / (time.perf_counter() - started)


def kafka_produce_transactional(bootstrap: str, topic: str, records: int, txn_size: int) -> float:
    """Transactions of ``txn_size`` records, each committed before the next begins."""
    producer = _exactly_once_producer(bootstrap, f"bench-{topic}")
    producer.init_transactions(60)
    started = time.perf_counter()
    sent = 0
    while sent < records:
        producer.begin_transaction()
        for _ in range(min(txn_size, records - sent)):
            while True:
                try:
                    producer.produce(topic, VALUE)
                    break
                except BufferError:
                    producer.poll(0.01)
            sent += 1
        producer.commit_transaction(300)
    return records / (time.perf_counter() - started)


def kafka_consume(
    bootstrap: str,
    topic: str,
    partitions: int,
    records: int,
    options: dict[str, str] | None = None,
) -> float:
    consumer = Consumer(
        {
            **(options or {}),
            "bootstrap.servers": bootstrap,
            "group.id": "bench",
            "queued.min.messages": 1_000_000,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got = 0
    started = time.perf_counter()
    while got < records:
        got += sum(1 for m in consumer.consume(10_000, 1.0) if m.error() is None)
    rate = records / (time.perf_counter() - started)
    consumer.close()
    return rate


def sparklog_produce(address: str, topic: str, records: int) -> float:
    producer = SlProducer(address)
    started = time.perf_counter()
    for _ in range(records):
        producer.send(topic, VALUE)
    producer.flush()
    rate = records / (time.perf_counter() - started)
    producer.close()
    return rate


def sparklog_consume(address: str, topic: str, partitions: int, records: int) -> float:
    consumer = SlConsumer(address)
    consumer.assign([(topic, p) for p in range(partitions)])
    consumer.seek_to_beginning()
    got = 0
    started = time.perf_counter()
    while got < records:
        got += len(consumer.poll_records(timeout_ms=1000, max_records=100_000))
    rate = records / (time.perf_counter() - started)
    consumer.close(autocommit=False)
    return rate


def latency(bootstrap: str, topic: str, rate: int, seconds: float) -> tuple[float, float]:
    """p50, p99 (ms) of produce-to-consume latency at ``rate`` records/s."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "latency"})
    consumer.assign([TopicPartition(topic, 0, 0)])
    samples: list[float] = []
    total = int(rate * seconds)
    done = threading.Event()

    def read() -> None:
        while len(samples) < total and not done.is_set():
            m = consumer.poll(0.1)
            if m is not None and m.error() is None:
                (sent,) = struct.unpack(">d", m.value()[:8])
                samples.append((time.time() - sent) * 1000)

    reader = threading.Thread(target=read)
    reader.start()
    producer = Producer({"bootstrap.servers": bootstrap})
    interval = 1 / rate
    started = time.perf_counter()
    for i in range(total):
        target = started + i * interval
        while (now := time.perf_counter()) < target:
            producer.poll(min(target - now, 0.001))
        producer.produce(topic, struct.pack(">d", time.time()) + VALUE[8:], partition=0)
    producer.flush(60)
    reader.join(timeout=60)
    done.set()
    consumer.close()
    samples.sort()
    return statistics.median(samples), samples[int(len(samples) * 0.99) - 1]


def sasl_ssl_run(work: Path, partitions: int, records: int, warm_up: int) -> dict[str, float]:
    """Produce and consume records/s through a SASL_SSL listener (its own broker and root)."""
    certs = work / "certs"
    certs.mkdir()

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=certs, check=True, capture_output=True)

    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key",
            "-out", "ca.pem", "-days", "1", "-subj", "/CN=bench-ca")  # fmt: skip
    (certs / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "broker.key",
            "-out", "broker.csr", "-subj", "/CN=localhost")  # fmt: skip
    openssl("x509", "-req", "-in", "broker.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", "broker.pem", "-days", "1",
            "-extfile", "san.ext")  # fmt: skip
    root = f"file://{work}/secure-root"
    from sparklog.security import users
    from sparklog.storage.catalog import open_root

    users.create(open_root(root, create=True).metadata, "bench", "SCRAM-SHA-512", "bench-pw")
    settings = {
        "SPARKLOG_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
        "SPARKLOG_SSL_CERTFILE": str(certs / "broker.pem"),
        "SPARKLOG_SSL_KEYFILE": str(certs / "broker.key"),
    }
    proc, address, bootstrap = start_broker(root, work / "secure-broker.log", settings)
    options = {
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": str(certs / "ca.pem"),
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "bench",
        "sasl.password": "bench-pw",
    }
    try:
        with Admin(address) as admin:
            for name in ("secure", "secure-warm-up"):
                admin.create_topic(f"bench-{name}", partitions)
        kafka_produce(bootstrap, "bench-secure-warm-up", warm_up, options)
        kafka_consume(bootstrap, "bench-secure-warm-up", partitions, warm_up, options)
        return {
            "produce": kafka_produce(bootstrap, "bench-secure", records, options),
            "consume": kafka_consume(bootstrap, "bench-secure", partitions, records, options),
        }
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument(
        "--warm-up", type=int, default=20_000, help="records moved untimed first, each path"
    )
    parser.add_argument("--rate", type=int, default=2_000, help="latency run: records/s")
    parser.add_argument("--seconds", type=float, default=10, help="latency run: duration")
    parser.add_argument(
        "--txn-size", type=int, default=1_000, help="records per transaction (issue 25)"
    )
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="sparklog-kafka-bench-"))
    proc, address, bootstrap = start_broker(f"file://{work}/root", work / "broker.log")
    try:
        with Admin(address) as admin:
            for name in (
                "kafka",
                "flight",
                "kafka-warm-up",
                "flight-warm-up",
                "idempotent",
                "transactional",
            ):
                admin.create_topic(f"bench-{name}", args.partitions)
            admin.create_topic("bench-latency", 1)
        # untimed: connections, metadata, the broker's lazy imports and first flushes,
        # which a broker that has been running for a while has behind it
        kafka_produce(bootstrap, "bench-kafka-warm-up", args.warm_up)
        kafka_consume(bootstrap, "bench-kafka-warm-up", args.partitions, args.warm_up)
        sparklog_produce(address, "bench-flight-warm-up", args.warm_up)
        sparklog_consume(address, "bench-flight-warm-up", args.partitions, args.warm_up)
        result = {
            "kafka_produce": kafka_produce(bootstrap, "bench-kafka", args.records),
            "kafka_consume": kafka_consume(bootstrap, "bench-kafka", args.partitions, args.records),
            "flight_produce": sparklog_produce(address, "bench-flight", args.records),
            "flight_consume": sparklog_consume(
                address, "bench-flight", args.partitions, args.records
            ),
        }
        result["idempotent_produce"] = kafka_produce_idempotent(
            bootstrap, "bench-idempotent", args.records
        )
        result["transactional_produce"] = kafka_produce_transactional(
            bootstrap, "bench-transactional", args.records, args.txn_size
        )
        p50, p99 = latency(bootstrap, "bench-latency", args.rate, args.seconds)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    print(f"records: {args.records} x 100 B, partitions: {args.partitions}")
    print(f"{'path':<28}{'records/s':>12}{'vs Flight':>12}")
    for what in ("produce", "consume"):
        kafka, flight = result[f"kafka_{what}"], result[f"flight_{what}"]
        print(f"{'Kafka listener ' + what:<28}{kafka:>12,.0f}{kafka / flight:>11.2f}x")
        print(f"{'sparklog Flight ' + what:<28}{flight:>12,.0f}{1:>11.2f}x")
    idem, txn = result["idempotent_produce"], result["transactional_produce"]
    print(f"{'idempotent produce':<28}{idem:>12,.0f}")
    print(
        f"{'transactional produce':<28}{txn:>12,.0f}"
        f"  ({args.txn_size} records per transaction: {txn / idem:.2f}x idempotent)"
    )
    print(f"latency at {args.rate} records/s: p50 {p50:.1f} ms, p99 {p99:.1f} ms")
    secure = sasl_ssl_run(work, args.partitions, args.records, args.warm_up)
    print(f"{'SASL_SSL (SCRAM-SHA-512)':<28}{'records/s':>12}{'vs PLAINTEXT':>14}")
    for what in ("produce", "consume"):
        plain = result[f"kafka_{what}"]
        print(f"{'Kafka listener ' + what:<28}{secure[what]:>12,.0f}{secure[what] / plain:>13.2f}x")


if __name__ == "__main__":
    main()
