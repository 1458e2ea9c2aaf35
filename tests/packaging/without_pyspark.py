"""Produce, consume and run the CLI in a venv without pyspark (run by .ci/ends from a tmp dir).

Usage: python without_pyspark.py ROOT_DIR   (with the venv's ``sparklog`` on PATH)
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys

import sparklog


def main(root: str) -> None:
    assert importlib.util.find_spec("pyspark") is None, "this venv must not hold pyspark"
    sparklog.Admin(root).create_topic("events", partitions=2)
    with sparklog.Producer(root) as producer:
        producer.send("events", b"from-python", key=b"k").get(timeout=10)
    consumer = sparklog.Consumer(root, group_id="g", auto_offset_reset="earliest")
    consumer.subscribe(["events"])
    values: list[bytes | None] = []
    for _ in range(20):
        values += [record.value for record in consumer.poll_records(timeout_ms=500)]
        if values:
            break
    consumer.close()
    assert values == [b"from-python"], values
    cli = shutil.which("sparklog")
    assert cli, "the sparklog command is not installed"
    subprocess.run(
        [cli, "produce", "events"],
        input=b"from-cli\n",
        check=True,
        env={**os.environ, "SPARKLOG_ADDRESS": root},
    )
    out = subprocess.run(
        [cli, "consume", "events", "--from-beginning", "--max-messages", "2"],
        check=True,
        capture_output=True,
        env={**os.environ, "SPARKLOG_ADDRESS": root},
    ).stdout
    assert b"from-cli" in out and b"from-python" in out, out
    assert "pyspark" not in sys.modules
    print("without pyspark: produce, consume and the CLI work")


if __name__ == "__main__":
    main(sys.argv[1])
