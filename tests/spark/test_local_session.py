"""The local Spark session of ``connect delta-sink`` and ``demo``, tested in a fresh Python.

Its checks (tests/spark/local_session_cases.py) need the session to start its
process's JVM: a JVM an earlier test module of the same pytest worker started
keeps its own stderr and its Python workers, so the log file stays empty and
no worker times out. They run here in a pytest of their own.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
CASES = Path(__file__).with_name("local_session_cases.py")


def test_the_local_session_cases_pass_in_a_process_of_their_own(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--basetemp",
            str(tmp_path / "cases"),
            str(CASES),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    assert " passed" in result.stdout and "failed" not in result.stdout
