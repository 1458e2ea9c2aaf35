"""sparklog's build backend: setuptools', plus one path entry in editable installs.

Spark finds ``format("sparklog")`` by listing the top-level modules on
``sys.path`` whose names start with ``pyspark_`` (``pkgutil.iter_modules``).
A wheel installs ``pyspark_sparklog`` into site-packages, where that listing
sees it.  setuptools' editable install serves the package-dir mapping
(``storage/`` as ``sparklog.storage``) through an import hook, which the
listing cannot see, and its other mode puts the checkout root on ``sys.path``,
a second copy of the engine (``import storage``).  So an editable install gets
one more ``.pth`` line naming ``spark_entry/``, the folder that holds only
``pyspark_sparklog.py``: Spark's listing finds it, and nothing else of the
checkout becomes importable by a top-level name.

Every wheel (editable or not) also gets ``sparklog_workers_python.pth``: one
line, run at interpreter start-up, that sets ``PYSPARK_PYTHON`` to the running
interpreter when it is unset.  Spark starts its Python workers (the data-source
lookup, planning, reading) with ``PYSPARK_PYTHON``, else ``python3`` from the
PATH; a script run as ``.venv/bin/python job.py`` without the venv on the PATH
would otherwise get workers that lack sparklog (``DATA_SOURCE_NOT_FOUND``).  A
value the user or the cluster set is never changed.
"""

from __future__ import annotations

import base64
import hashlib
import os
import zipfile
from pathlib import Path
from typing import Any

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F403  (every other hook is setuptools')

ENTRY_FOLDER = Path(__file__).resolve().parents[1] / "spark_entry"
PTH_NAME = "sparklog_spark_entry.pth"
WORKERS_PTH_NAME = "sparklog_workers_python.pth"
#: one line of Python (site.py runs .pth lines that start with ``import``)
WORKERS_PTH = (
    b"import os, sys; os.environ.get('PYSPARK_PYTHON') or not sys.executable "
    b"or os.environ.__setitem__('PYSPARK_PYTHON', sys.executable)\n"
)


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def _add_files(path: str, files: dict[str, bytes]) -> None:
    """Add ``files`` at the root of the wheel at ``path``, listed in its RECORD."""
    with zipfile.ZipFile(path) as wheel:
        members = [(info, wheel.read(info)) for info in wheel.infolist()]
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as wheel:
        for info, data in members:
            if info.filename.endswith(".dist-info/RECORD"):
                lines = data.decode().splitlines()
                added = [_record_line(name, content) for name, content in files.items()]
                data = "\n".join([*lines, *added]).encode() + b"\n"
            wheel.writestr(info, data)
        for name, content in files.items():
            wheel.writestr(name, content)


def build_wheel(
    wheel_directory: str,
    config_settings: dict[str, Any] | None = None,
    metadata_directory: str | None = None,
) -> str:
    name = _setuptools.build_wheel(wheel_directory, config_settings, metadata_directory)
    _add_files(os.path.join(wheel_directory, name), {WORKERS_PTH_NAME: WORKERS_PTH})
    return name


def build_editable(
    wheel_directory: str,
    config_settings: dict[str, Any] | None = None,
    metadata_directory: str | None = None,
) -> str:
    name = _setuptools.build_editable(wheel_directory, config_settings, metadata_directory)
    files = {PTH_NAME: f"{ENTRY_FOLDER}\n".encode(), WORKERS_PTH_NAME: WORKERS_PTH}
    _add_files(os.path.join(wheel_directory, name), files)
    return name
