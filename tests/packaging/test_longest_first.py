"""The longest test files start first under ``--dist loadfile``
(``tests/support/longest_first.py``): by the seconds of the committed per-file table, a file
it does not name by its test count, and xdist keeps that order instead of its own (biggest
test count first)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.file_durations import FileDurations
from tests.support.longest_first import (
    DEFAULT_TABLE,
    UNKNOWN_SECONDS_PER_TEST,
    longest_first,
    read_table,
)

ROOT = Path(__file__).resolve().parents[2]


def _order(tmp_path: Path, *args: str) -> list[str]:
    """The files of a small tree in the order one xdist worker ran them."""
    ran = tmp_path / "ran.txt"
    record = (
        "import os\n"
        "def _ran(name):\n"
        "    with open(os.environ['RAN'], 'a') as f:\n"
        "        f.write(name + '\\n')\n"
    )
    (tmp_path / "conftest.py").write_text(record)
    tests = {"test_many.py": 5, "test_mid.py": 2, "test_long.py": 1}
    for name, count in tests.items():
        body = "from conftest import _ran\n" + "".join(
            f"def test_{i}():\n    _ran({name!r})\n" for i in range(count)
        )
        (tmp_path / name).write_text(body)
    (tmp_path / "seconds.txt").write_text(
        "# a comment, and a total the reader skips\n"
        "   100.00s     1 test   test_long.py\n"
        "    50.00s     2 tests  test_mid.py\n"
        "   150.00s  in 2 files (every file, summed over workers)\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.support.longest_first",
         "-p", "no:cacheprovider", "--rootdir", str(tmp_path), "-n", "1", "--dist", "loadfile",
         *args, str(tmp_path)],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT), "RAN": str(ran)},
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    lines = ran.read_text().splitlines()
    assert sorted(lines) == sorted(name for name, count in tests.items() for _ in range(count))
    return list(dict.fromkeys(lines))


def test_an_xdist_worker_takes_the_longest_files_first(tmp_path: Path) -> None:
    seconds = str(tmp_path / "seconds.txt")
    assert _order(tmp_path, f"--file-seconds={seconds}") == [
        "test_long.py",  # 100 s in the table
        "test_mid.py",  # 50 s
        "test_many.py",  # not in the table: 5 tests, estimated at under 4 s
    ]
    # without a table, xdist's own order: the biggest test count first
    (tmp_path / "ran.txt").unlink()
    assert _order(tmp_path, "--file-seconds=") == ["test_many.py", "test_mid.py", "test_long.py"]


def test_the_order_is_by_table_else_by_test_count() -> None:
    paths = ["a.py", "b.py", "b.py", "c.py", "c.py", "c.py", "d.py"]
    table = {"d.py": 10.0, "b.py": 2 * UNKNOWN_SECONDS_PER_TEST}
    # d: 10 s; c: 3 tests unknown; a: 1 test unknown; b: as long as two unknown tests, so
    # after c and before a (ties keep the collection order)
    assert longest_first(paths, table) == ["d.py", "c.py", "b.py", "a.py"]


def test_the_table_reads_the_rows_the_per_file_durations_table_prints() -> None:
    printed = FileDurations(shown=0)
    for nodeid, duration_s in (("t/a.py::x", 1.25), ("t/b.py::y", 3.0), ("t/b.py::z", 0.5)):
        printed.pytest_runtest_logreport(
            pytest.TestReport(
                nodeid, ("f", 0, "t"), {}, "passed", None, "call", duration=duration_s
            )
        )
    assert read_table("\n".join(printed.lines())) == {"t/b.py": 3.5, "t/a.py": 1.25}


def test_the_committed_table_names_test_files_that_exist() -> None:
    table = read_table(DEFAULT_TABLE.read_text())
    assert len(table) >= 30
    missing = sorted(path for path in table if not (ROOT / path).is_file())
    assert not missing, f"rows of {DEFAULT_TABLE.name} name no test file (renamed?): {missing}"
