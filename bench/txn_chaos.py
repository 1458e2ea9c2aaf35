"""The long form of the consume-transform-produce test: many SIGKILLs of the worker.

``tests/kafka/test_transactions.py::test_consume_transform_produce_survives_sigkills_exactly_once``
runs a confluent-kafka worker copying topic ``in`` to ``out`` in transactions
(offsets sent with ``send_offsets_to_transaction``), SIGKILLs it at random
points and restarts it with the same transactional id, then checks that a
read_committed reader sees every input record exactly once and that the group's
committed offsets are at the end.  CI runs it with 5 kills; this runs it with
``--kills`` (default 25, as issue 25 asks for at least 20).

    .venv/bin/python bench/txn_chaos.py --kills 25
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TEST = (
    "tests/kafka/test_transactions.py::"
    "test_consume_transform_produce_survives_sigkills_exactly_once"
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kills", type=int, default=25)
    args = parser.parse_args()
    env = {**os.environ, "SPARKLOG_TXN_KILLS": str(args.kills)}
    code = subprocess.call(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-o",
            "timeout=7200",
            TEST,
        ],
        cwd=REPO,
        env=env,
    )
    raise SystemExit(code)


if __name__ == "__main__":
    main()
