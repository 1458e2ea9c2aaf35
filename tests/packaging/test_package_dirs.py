"""One real package directory: no links, every package folder installed, one copy of the engine.

``storage/`` and ``broker_lite/`` are installed as ``sparklog.storage`` and
``sparklog.broker_lite`` through pyproject's ``package-dir`` mapping, so a
checkout without link support (Git for Windows' default) builds and imports,
and the checkout root is never importable as a second copy of the engine.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from tests.packaging.check_wheel import problems

ROOT = Path(__file__).resolve().parents[2]


def _setuptools() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def test_every_package_folder_is_listed_and_nothing_is_a_link() -> None:
    mapping = {"sparklog.storage": "storage", "sparklog.broker_lite": "broker_lite"}
    assert _setuptools()["package-dir"] == {"": "spark_entry", "sparklog": "sparklog", **mapping}
    assert sorted(p.name for p in (ROOT / "spark_entry").iterdir() if p.suffix == ".py") == [
        "pyspark_sparklog.py",
        "pyspark_sparklog_postgres.py",
    ]
    found = set()
    for top, installed in (("sparklog", "sparklog"), *((v, k) for k, v in mapping.items())):
        for init in (ROOT / top).rglob("__init__.py"):
            relative = init.parent.relative_to(ROOT / top).parts
            found.add(".".join((installed, *relative)))
    assert set(_setuptools()["packages"]) == found
    links = [p for p in (ROOT / "sparklog").rglob("*") if p.is_symlink()]
    assert links == []


def test_the_installed_engine_is_the_checkout_folder_and_only_once(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    script = (
        "import importlib.util, sparklog.storage, sparklog.broker_lite.service as s\n"
        "print(sparklog.storage.__file__)\nprint(s.__file__)\n"
        "print(importlib.util.find_spec('storage'), importlib.util.find_spec('broker_lite'))\n"
        "import pkgutil\nprint(any(m.name == 'pyspark_sparklog' for m in pkgutil.iter_modules()))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    storage_file, service_file, tops, listed = out.stdout.splitlines()
    assert Path(storage_file).resolve() == ROOT / "storage" / "__init__.py"
    assert Path(service_file).resolve() == ROOT / "broker_lite" / "service.py"
    assert tops == "None None"  # the checkout root is not a second import location
    assert listed == "True"  # Spark's lookup of data sources lists top-level modules


@pytest.mark.slow
def test_a_clone_without_links_builds_a_wheel_that_imports(tmp_path: Path) -> None:
    if not (ROOT / ".git").exists() or shutil.which("git") is None:
        pytest.skip("not a git checkout: nothing to clone")
    clone = tmp_path / "clone"
    subprocess.run(
        [
            "git",
            "-c",
            "core.symlinks=false",
            "clone",
            "-q",
            "--no-hardlinks",
            str(ROOT),
            str(clone),
        ],
        check=True,
    )
    assert not any(p.is_symlink() for p in clone.rglob("*") if ".git" not in p.parts)
    dist = tmp_path / "dist"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "-w",
            str(dist),
            str(clone),
        ],
        check=True,
    )
    (wheel,) = dist.glob("sparklog-*.whl")
    assert problems(str(wheel)) == []
    target = tmp_path / "site"
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(target)
    env = {**os.environ, "PYTHONPATH": str(target)}
    script = (
        "import sparklog.storage, sparklog.broker_lite.kafka.server\n"
        "from sparklog.storage import open_root\n"
        "import sys\nroot = open_root(sys.argv[1], create=True)\n"
        "root.create_topic('t', partitions=2)\nprint(sparklog.storage.__file__, root.list_topics())"
    )
    out = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "root")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(str(target)) and "['t']" in out.stdout
