"""One Python floor, stated once and held everywhere (issue 40 item 1).

pyproject's ``requires-python`` is the floor; ruff's ``target-version`` and mypy's
``python_version`` check the code against that same version, the README states it with its
reason, and ``.ci/ends`` runs its legs on that interpreter (read from pyproject, so raising
the floor moves CI with it).  A floor declared in one place and not another is how 3.10 was
"supported" while the code needed 3.11.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _floor() -> str:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    found = re.fullmatch(r">=(3\.\d+)", declared)
    assert found, f"requires-python {declared!r} is not of the form '>=3.N'"
    return found.group(1)


def test_ruff_mypy_and_the_readme_name_the_declared_floor() -> None:
    floor = _floor()
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert config["tool"]["ruff"]["target-version"] == "py" + floor.replace(".", "")
    assert config["tool"]["mypy"]["python_version"] == floor
    readme = (ROOT / "README.md").read_text()
    assert f"Python {floor} is the floor" in readme
    assert f"Python {floor}+" in readme


def test_ci_ends_runs_on_the_floor_it_reads_from_pyproject() -> None:
    ends = (ROOT / ".ci" / "ends").read_text()
    assert "requires-python" in ends and 'command -v "python$floor"' in ends
    assert not re.search(r"^\s*python3 ", ends, re.MULTILINE), (
        "a leg runs on python3, not the floor"
    )


def test_this_interpreter_is_at_or_above_the_floor() -> None:
    assert sys.version_info[:2] >= tuple(int(part) for part in _floor().split("."))
