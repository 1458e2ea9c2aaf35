"""Type-check sparklog as it is installed: ``python tests/packaging/typecheck.py [mypy args]``.

The checkout keeps ``storage/`` and ``broker_lite/`` as top-level folders and
the build backend installs them as ``sparklog.storage`` and
``sparklog.broker_lite`` (pyproject's ``package-dir``).  mypy cannot follow an
editable install's import hook, so this script lays the package out as the
wheel does (copies under ``build/typecheck``, mtimes kept so mypy's cache
holds), runs mypy there with the project's configuration, and prints its
findings with the checkout's own paths.  Exit status is mypy's.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TREE = ROOT / "build" / "typecheck"
#: installed location -> folder in the checkout (pyproject's package-dir, plus the rest)
LAYOUT = {
    "sparklog": "sparklog",
    "sparklog/storage": "storage",
    "sparklog/broker_lite": "broker_lite",
}


def lay_out() -> None:
    shutil.rmtree(TREE, ignore_errors=True)
    TREE.mkdir(parents=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for installed, source in LAYOUT.items():
        shutil.copytree(ROOT / source, TREE / installed, ignore=ignore, copy_function=shutil.copy2)
    for entry in (ROOT / "spark_entry").glob("pyspark_sparklog*.py"):
        shutil.copy2(entry, TREE / entry.name)


def checkout_path(line: str) -> str:
    """A finding's path as it is in the checkout (longest installed prefix first)."""
    for installed, source in sorted(LAYOUT.items(), key=lambda kv: -len(kv[0])):
        if line.startswith(installed + "/"):
            return source + line[len(installed) :]
    return line


def main(argv: list[str]) -> int:
    from mypy import api

    lay_out()
    args = [
        "--config-file",
        str(ROOT / "pyproject.toml"),
        "--cache-dir",
        str(ROOT / ".mypy_cache"),
        *argv,
    ]
    old = Path.cwd()
    try:
        os.chdir(TREE)
        out, err, status = api.run(args)
    finally:
        os.chdir(old)
    for line in out.splitlines():
        print(checkout_path(line))
    if err:
        print(err, file=sys.stderr, end="")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
