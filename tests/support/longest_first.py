"""A pytest plugin: the longest test files start first under ``-n 2 --dist loadfile``.

``--dist loadfile`` hands a whole file to one worker, and pytest-xdist hands the files out
biggest test COUNT first: the one-test files (a Spark kill test of a minute) came last, so a
worker could start one when the other had almost nothing left, and the run ended a minute
after the midpoint.  Here the files are collected longest first, by the seconds CI's log last
measured (``tests/support/file_seconds.txt``, rows of the per-file table that
``tests/support/file_durations.py`` prints), and xdist is told to keep that order: each
worker picks the next file when it runs low, so the two workers finish together within the
time of the small files left at the end.  The tests of a file keep their order (and their
module-scoped fixtures); only the order of the files changes.

A file the table does not name is estimated from its test count
(``UNKNOWN_SECONDS_PER_TEST`` each: the mean of the files outside CI's top 30).
Refresh the table from a CI run's ``build/file-durations.txt`` (every file's row, which
``.ci/run`` has the durations plugin write) or its log's table; ``--file-seconds=PATH`` reads
another one, ``--file-seconds=`` none (xdist's own order).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

#: the committed table: seconds per test file, as CI's log last measured them
DEFAULT_TABLE = Path(__file__).with_name("file_seconds.txt")

#: the estimate for each test of a file the table does not name (a new file): the mean of
#: the files outside the top 30 of CI's run of 2026-11-28, 906 s over 1,254 tests
UNKNOWN_SECONDS_PER_TEST = 0.75

#: a row of the per-file table: "   104.95s    11 tests  tests/cli/test_cli.py"
ROW = re.compile(r"^\s*(?P<seconds>\d+(?:\.\d+)?)s\s+\d+\s+tests?\s+(?P<path>\S+)\s*$")


def read_table(text: str) -> dict[str, float]:
    """``{file path: seconds}`` from the table's rows; other lines (comments, totals) ignored."""
    table: dict[str, float] = {}
    for line in text.splitlines():
        match = ROW.match(line)
        if match:
            table[match["path"]] = float(match["seconds"])
    return table


def longest_first(paths: list[str], table: Mapping[str, float]) -> list[str]:
    """The distinct ``paths`` (one per test, in collection order), longest file first.

    A file's length is its table entry, else its test count times
    ``UNKNOWN_SECONDS_PER_TEST``; ties keep the collection order."""
    counts: dict[str, int] = {}
    for path in paths:
        counts[path] = counts.get(path, 0) + 1
    order = list(counts)
    return sorted(
        order,
        key=lambda path: -table.get(path, counts[path] * UNKNOWN_SECONDS_PER_TEST),
    )


def _file_of(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--file-seconds",
        default=str(DEFAULT_TABLE),
        metavar="PATH",
        help="run the test files longest first, by the seconds this per-file table gives "
        "(default: tests/support/file_seconds.txt; empty: collection order)",
    )


#: the key of ``workerinput`` by which the controller tells its workers to order the files
WORKER_FLAG = "sparklog_longest_first"


def _by_file(config: pytest.Config) -> bool:
    """On the controller: whether xdist hands out whole files (or modules) and a table is
    given.  On a worker (whose own ``dist`` is "no"): what the controller said."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        return bool(workerinput.get(WORKER_FLAG))
    return bool(config.getoption("file_seconds")) and getattr(config.option, "dist", "no") in (
        "loadfile",
        "loadscope",
    )


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Files longest first; within a file, the tests' own order (on each xdist worker)."""
    if not _by_file(config):
        return
    table = read_table(Path(config.getoption("file_seconds")).read_text())
    rank = {file: i for i, file in enumerate(longest_first([_file_of(i) for i in items], table))}
    items.sort(key=lambda item: rank[_file_of(item)])  # stable: a file's tests keep their order


def pytest_configure(config: pytest.Config) -> None:
    """Under ``--dist loadfile``, xdist takes the files in the order its workers collected.

    (Its default re-sorts them by test count, ``--loadscope-reorder``; the controller reads
    the option when it schedules, after this.)"""
    if not hasattr(config, "workerinput") and _by_file(config):
        config.option.loadscopereorder = False
        config.pluginmanager.register(_TellWorkers(), "longest-first-workers")


class _TellWorkers:
    """On the controller: each worker is told to collect the files longest first."""

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput[WORKER_FLAG] = True
