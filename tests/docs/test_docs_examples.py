"""Every shell and Python example in README.md and docs/*.md runs, in order, on a fresh root.

A fenced block tagged ``sh``/``bash``/``shell`` or ``python``/``py`` is an example;
untagged blocks are listings (layouts, benchmark output).  An example that needs
what a test machine lacks (an S3 bucket, a Spark cluster, minutes of benchmark)
or only illustrates carries ``<!-- not-run: reason -->`` on a line just before
its fence; every other example must run.  The blocks of one file share a shell
environment (an ``export`` holds for the blocks after it) and a working folder;
paths under ``/tmp/`` are redirected into a fresh temporary folder.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
SHELL = {"sh", "bash", "shell", "console"}
PYTHON = {"python", "py", "python3"}
NOT_RUN = re.compile(r"<!--\s*not-run:\s*(?P<reason>.+?)\s*-->")
#: docs/client.md's kafka-python/sparklog twins run in tests/client/test_docs_twins.py.
TWIN = re.compile(r"<!--\s*twin:\s*(?P<which>.+?)\s*-->")
#: docs/spark.md's Kafka/sparklog pipeline pairs run in tests/spark/test_spark_migration.py.
PIPELINE = re.compile(r"<!--\s*pipeline:\s*(?P<which>.+?)\s*-->")
FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>```+|~~~+)\s*(?P<lang>[\w+-]*)")


@dataclass
class Block:
    path: Path
    line: int
    lang: str
    code: str
    skip_reason: str | None


def extract_blocks(path: Path) -> list[Block]:
    """The fenced blocks of a markdown file, with the not-run marker before each (if any)."""
    lines = path.read_text().splitlines()
    blocks: list[Block] = []
    index = 0
    while index < len(lines):
        opened = FENCE.match(lines[index])
        if not opened:
            index += 1
            continue
        fence, lang, start = opened.group("fence"), opened.group("lang").lower(), index
        body: list[str] = []
        index += 1
        while index < len(lines) and not lines[index].strip().startswith(fence):
            body.append(lines[index])
            index += 1
        index += 1
        reason = None
        before = start - 1
        while before >= 0 and not lines[before].strip():
            before -= 1
        if before >= 0 and (marker := NOT_RUN.search(lines[before])):
            reason = marker.group("reason")
        elif before >= 0 and (twin := TWIN.search(lines[before])):
            reason = f"the {twin.group('which')} twin runs in tests/client/test_docs_twins.py"
        elif before >= 0 and (pipeline := PIPELINE.search(lines[before])):
            reason = (
                f"pipeline {pipeline.group('which')} runs in tests/spark/test_spark_migration.py"
            )
        blocks.append(Block(path, start + 1, lang, "\n".join(body) + "\n", reason))
    return blocks


def examples(path: Path) -> list[Block]:
    return [b for b in extract_blocks(path) if b.lang in SHELL | PYTHON]


def test_extraction_sees_markers_and_languages(tmp_path):
    doc = tmp_path / "x.md"
    doc.write_text(
        "text\n<!-- not-run: needs S3 -->\n\n```sh\nls /nope\n```\n\n```python\nx = 1\n```\n"
        "```\nlisting\n```\n"
    )
    found = extract_blocks(doc)
    assert [(b.lang, b.skip_reason, b.code) for b in found] == [
        ("sh", "needs S3", "ls /nope\n"),
        ("python", None, "x = 1\n"),
        ("", None, "listing\n"),
    ]


def _environment(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPARKLOG_")}
    bin_dir = str(Path(sys.executable).parent)
    env.update(
        PATH=bin_dir + os.pathsep + env.get("PATH", ""),
        PYTHONPATH=str(REPO),
        PYSPARK_PYTHON=sys.executable,
        COLUMNS="200",
    )
    return env


def _run_block(block: Block, tmp_path: Path, env: dict[str, str]) -> dict[str, str]:
    """Run one example; return the environment the next block starts from."""
    code = block.code.replace("/tmp/", f"{tmp_path}/")
    where = f"{block.path.relative_to(REPO)}:{block.line}"
    if block.lang in PYTHON:
        proc = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600,
        )  # fmt: skip
        assert proc.returncode == 0, f"{where} failed:\n{code}\n{proc.stdout}\n{proc.stderr}"
        return env
    env_file = tmp_path / ".env-after"
    script = f"set -euo pipefail\n{code}\nenv -0 > {env_file}\n"
    proc = subprocess.run(
        ["bash", "-c", script],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, f"{where} failed:\n{code}\n{proc.stdout}\n{proc.stderr}"
    after = dict(item.split("=", 1) for item in env_file.read_text().split("\0") if "=" in item)
    return after


@pytest.mark.slow
@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_example_runs(doc, tmp_path):
    env = _environment(tmp_path)
    for block in examples(doc):
        if block.skip_reason is None:
            env = _run_block(block, tmp_path, env)


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_not_run_examples_say_why(doc):
    for block in examples(doc):
        assert block.skip_reason is None or len(block.skip_reason) > 5, block


@pytest.mark.parametrize("doc", ["operations.md", "connect.md"])
def test_documented_metric_names_are_the_exposed_ones(doc):
    """The docs name each metric as /metrics exposes it (counters end in _total)."""
    from sparklog.broker_lite.metrics import Metrics
    from sparklog.connect.metrics import ConnectorMetrics

    registry = {"operations.md": Metrics, "connect.md": ConnectorMetrics}[doc]().registry
    exposed: set[str] = set()
    for family in registry.collect():
        exposed.add(family.name + "_total" if family.type == "counter" else family.name)
    text = (REPO / "docs" / doc).read_text()
    documented = set(re.findall(r"`(sparklog_[a-z_]+)`", text))
    assert documented, "the metrics table moved?"
    assert sorted(documented - exposed) == []
    if doc == "connect.md":
        assert sorted(exposed - documented) == []
