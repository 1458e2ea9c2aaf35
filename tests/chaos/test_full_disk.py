"""A full disk under a broker (issue 26 items 4 and 7), on a small tmpfs the test mounts.

A broker process on a local root that fills up: records produced while the disk
is full are not acknowledged (the producer hears why), the broker stays up, and
once space comes back producing resumes by itself; every acknowledged record is
read back exactly once, and no temporary file of a failed write is left behind.
Mounting needs root: elsewhere the test is skipped, saying so.
"""

from __future__ import annotations

import errno
import os
import pathlib
import subprocess
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.brokers import Cluster
from tests.support.waiting import wait_for

DISK_BYTES = 16 << 20


@pytest.fixture
def small_disk(tmp_path: pathlib.Path) -> Iterator[pathlib.Path]:
    """A fresh 16 MiB tmpfs mounted under ``tmp_path``."""
    mount = tmp_path / "disk"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small filesystem needs root; a full disk is not tested here")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={DISK_BYTES}", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip()}); a full disk is not tested")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _fill(path: pathlib.Path) -> None:
    """Write ``path`` until the filesystem has no byte left."""
    chunk = b"\0" * (64 << 10)
    with open(path, "wb", buffering=0) as f:
        while True:
            try:
                f.write(chunk)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
                break
    with open(path, "ab", buffering=0) as f:  # the last partial chunk's bytes too
        while True:
            try:
                f.write(b"\0" * 512)
            except OSError:
                break


def _produce(bootstrap: str, values: list[bytes], timeout_ms: int) -> tuple[list[bytes], list]:
    """Produce ``values``; (the acknowledged ones, the errors of the others)."""
    acked: list[bytes] = []
    errors: list[KafkaError] = []

    def report(err: KafkaError | None, msg: object) -> None:
        if err is None:
            acked.append(msg.value())  # type: ignore[attr-defined]
        else:
            errors.append(err)

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "message.timeout.ms": timeout_ms,
            "linger.ms": 5,
        }
    )
    for value in values:
        producer.produce("t", value, on_delivery=report)
        producer.poll(0)
    producer.flush(timeout_ms / 1000 + 30)
    return acked, errors


def _read_all(bootstrap: str) -> list[bytes]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "reader", "enable.partition.eof": True}
    )
    consumer.assign([TopicPartition("t", 0, 0)])
    got: list[bytes] = []
    ended = [False]

    def read() -> bool:
        for msg in consumer.consume(1000, 0.5):
            if msg.error() is None:
                got.append(msg.value())
            elif msg.error().code() == KafkaError._PARTITION_EOF:
                ended[0] = True
        return ended[0]

    try:
        wait_for(read, timeout_s=60, what="the partition read to its end")
    finally:
        consumer.close()
    return got


def test_a_full_disk_refuses_records_then_heals_without_loss_or_litter(
    tmp_path: pathlib.Path, small_disk: pathlib.Path
) -> None:
    cluster = Cluster(tmp_path, f"file://{small_disk}/root")
    try:
        cluster.start(0)
        bootstrap = cluster.kafka_bootstrap
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("t", 1, 1)])["t"].result(timeout=30)
        before, errors = _produce(bootstrap, [b"before-%d" % i for i in range(200)], 30_000)
        assert len(before) == 200 and not errors

        filler = small_disk / "filler"
        _fill(filler)
        during, errors = _produce(bootstrap, [b"during-%d" % i for i in range(200)], 5_000)
        assert errors, "records were all acknowledged on a full disk"
        assert admin.list_topics(timeout=30).topics["t"].error is None  # the broker still answers

        filler.unlink()
        after: list[bytes] = []

        def resumed() -> bool:
            got, _ = _produce(bootstrap, [b"after-%d" % len(after)], 10_000)
            after.extend(got)
            return bool(got)

        wait_for(resumed, timeout_s=120, what="producing resumed once space came back")
        stored = _read_all(bootstrap)
    finally:
        cluster.stop_all()
    for value in before + during + after:  # every acknowledged record, exactly once
        assert stored.count(value) == 1, value
    litter = [p for p in small_disk.rglob("*") if ".tmp-" in p.name]
    assert litter == [], f"temporary files left behind: {litter[:5]}"
