"""The per-file durations table (``tests/support/file_durations.py``) that CI's log carries:
every file's setup + call + teardown summed, with an xdist run's worker reports gathered on
the controller, biggest first, and as many rows as ``--file-durations`` asks."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.file_durations import OUT_ENV, FileDurations
from tests.support.longest_first import read_table

ROOT = Path(__file__).resolve().parents[2]


def _run(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> list[str]:
    """The table's lines from a pytest run of a small tree in ``tmp_path``."""
    (tmp_path / "test_three.py").write_text(
        "import pytest\n"
        "@pytest.fixture(scope='module')\n"
        "def shared():\n    yield 1\n"
        "def test_a(shared):\n    pass\n"
        "def test_b(shared):\n    pass\n"
        "@pytest.mark.parametrize('n', [1])\n"
        "def test_c(n):\n    pass\n"
    )
    (tmp_path / "test_one.py").write_text("def test_only():\n    pass\n")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.support.file_durations",
         "-p", "no:cacheprovider", "--rootdir", str(tmp_path), *args, str(tmp_path)],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if "per-file durations" in line)
    end = next(i for i, line in enumerate(lines) if "summed over workers" in line)
    return lines[start : end + 1]


def test_every_file_of_an_xdist_run_is_summed_on_the_controller(tmp_path: Path) -> None:
    table = _run(tmp_path, "-n", "2", "--dist", "loadfile")
    assert "setup + call + teardown" in table[0] and "the 30 biggest" in table[0]
    rows = {line.split()[-1]: line.split() for line in table[1:] if line.endswith(".py")}
    assert sorted(rows) == ["test_one.py", "test_three.py"]
    assert rows["test_three.py"][1:3] == ["3", "tests"]
    assert rows["test_one.py"][1:3] == ["1", "test"]
    seconds = [float(line.split()[0].rstrip("s")) for line in table[1:3]]
    assert seconds == sorted(seconds, reverse=True)
    total = table[3].split()
    assert total[1:4] == ["in", "2", "files"]
    assert float(total[0].rstrip("s")) >= sum(seconds) - 0.02  # rounding of each row


def test_every_files_row_is_written_where_ci_asks(tmp_path: Path) -> None:
    """(``.ci/run`` sets the variable: tests/support/file_seconds.txt is refreshed from it.)"""
    out = tmp_path / "file-durations.txt"
    table = _run(tmp_path, "-n", "2", "--dist", "loadfile", "--file-durations=1",
                 env={OUT_ENV: str(out)})  # fmt: skip
    assert [line.split()[-1] for line in table[1:-1]] == [table[1].split()[-1]]  # one shown
    written = read_table(out.read_text())
    assert sorted(written) == ["test_one.py", "test_three.py"]  # every file written
    assert out.read_text().splitlines()[-1] == table[-1]  # the same sum


def _report(nodeid: str, when: str, duration_s: float) -> pytest.TestReport:
    return pytest.TestReport(nodeid, ("f", 0, "t"), {}, "passed", None, when, duration=duration_s)


def test_the_table_shows_as_many_files_as_asked() -> None:
    """(In process, from pytest's own reports.)"""
    table = FileDurations(shown=1)
    for nodeid, duration_s in (("a.py::t", 1.0), ("b.py::t", 2.0), ("b.py::u", 0.5)):
        for when in ("setup", "call", "teardown"):
            table.pytest_runtest_logreport(_report(nodeid, when, duration_s))
    assert table.lines() == [
        "     7.50s     2 tests  b.py",
        "    10.50s  in 2 files (every file, summed over workers)",
    ]
    table.shown = 0
    assert [line.split()[-1] for line in table.lines()[:2]] == ["b.py", "a.py"]
