"""A pytest plugin: the time each test FILE took, printed at the end of the run.

``--durations`` names the slowest tests; the suite's budget (25 minutes of CI on two
cores, issue 40) is spent per file, since ``--dist loadfile`` hands a whole file to one
worker and module-scoped fixtures (a broker, a cluster) are paid once per file.  So CI's log
also carries each file's total: setup + call + teardown of every test in it, summed from
the test reports.  Under pytest-xdist the controller receives every worker's reports
through ``pytest_runtest_logreport``, so the table covers the whole run; a worker prints
none.  ``--file-durations=N`` shows the N biggest (default 30; 0: every file); with
``SPARKLOG_FILE_DURATIONS_OUT=PATH`` every file's row is also written to PATH.
"""

from __future__ import annotations

import os
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import pytest

#: how many files the table shows by default
DEFAULT_SHOWN = 30

#: a path to write every file's row to (``.ci/run`` sets it: build/file-durations.txt, from
#: which tests/support/file_seconds.txt is refreshed)
OUT_ENV = "SPARKLOG_FILE_DURATIONS_OUT"


@dataclass
class FileTotal:
    """One test file's summed phases and the tests it ran."""

    seconds: float = 0.0
    tests: set[str] = field(default_factory=set)


class FileDurations:
    """Sums each report's duration under its file; prints the table in the summary."""

    def __init__(self, shown: int) -> None:
        self.shown = shown
        self.totals: defaultdict[str, FileTotal] = defaultdict(FileTotal)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        path = report.nodeid.split("::", 1)[0]
        total = self.totals[path]
        total.seconds += report.duration
        total.tests.add(report.nodeid)

    def lines(self, every: bool = False) -> list[str]:
        """The table: the biggest files first (all with ``every``), then the run's sum."""
        ranked = sorted(self.totals.items(), key=lambda item: (-item[1].seconds, item[0]))
        shown = ranked if self.shown == 0 or every else ranked[: self.shown]
        out = [
            f"{total.seconds:9.2f}s  {len(total.tests):4d} {_tests(len(total.tests))}  {path}"
            for path, total in shown
        ]
        whole = sum(total.seconds for total in self.totals.values())
        files = f"{len(self.totals)} file{'' if len(self.totals) == 1 else 's'}"
        out.append(f"{whole:9.2f}s  in {files} (every file, summed over workers)")
        return out

    @pytest.hookimpl(trylast=True)
    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if not self.totals:
            return
        out = os.environ.get(OUT_ENV)
        if out:  # every file, in the form tests/support/file_seconds.txt reads
            Path(out).write_text("\n".join(self.lines(every=True)) + "\n")
        biggest = "every file" if self.shown == 0 else f"the {self.shown} biggest"
        terminalreporter.write_sep("=", f"per-file durations (setup + call + teardown), {biggest}")
        for line in self.lines():
            terminalreporter.write_line(line)


def _tests(count: int) -> str:
    return "test " if count == 1 else "tests"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--file-durations",
        type=int,
        default=DEFAULT_SHOWN,
        metavar="N",
        help="show the N test files that took longest, setup to teardown "
        f"(default {DEFAULT_SHOWN}; 0: every file)",
    )


def pytest_configure(config: pytest.Config) -> None:
    """Registered on the controller (or a run without xdist), never on an xdist worker."""
    if hasattr(config, "workerinput"):
        return
    config.pluginmanager.register(
        FileDurations(config.getoption("file_durations")), "file-durations-table"
    )
