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


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def build_editable(
    wheel_directory: str,
    config_settings: dict[str, Any] | None = None,
    metadata_directory: str | None = None,
) -> str:
    name = _setuptools.build_editable(wheel_directory, config_settings, metadata_directory)
    path = os.path.join(wheel_directory, name)
    with zipfile.ZipFile(path) as wheel:
        members = [(info, wheel.read(info)) for info in wheel.infolist()]
    pth = f"{ENTRY_FOLDER}\n".encode()
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as wheel:
        for info, data in members:
            if info.filename.endswith(".dist-info/RECORD"):
                lines = data.decode().splitlines()
                data = "\n".join([*lines, _record_line(PTH_NAME, pth)]).encode() + b"\n"
            wheel.writestr(info, data)
        wheel.writestr(PTH_NAME, pth)
    return name
