"""Check a built wheel's contents (run by .ci/ends): the package, its linked folders, no strays.

Usage: python tests/packaging/check_wheel.py dist/sparklog-*.whl
"""

from __future__ import annotations

import sys
import zipfile


def problems(wheel: str) -> list[str]:
    names = zipfile.ZipFile(wheel).namelist()
    found: list[str] = []
    for required in (
        "pyspark_sparklog.py",
        "pyspark_sparklog_postgres.py",
        "sparklog/__init__.py",
        "sparklog/storage/objectstore.py",
        "sparklog/storage/log.py",
        "sparklog/broker_lite/server.py",
        "sparklog/broker_lite/service.py",
        "sparklog/spark/source.py",
        "sparklog/client/producer.py",
        "sparklog_workers_python.pth",
    ):
        if required not in names:
            found.append(f"missing {required}")
    tops = {
        name.split("/", 1)[0]
        for name in names
        if not name.split("/", 1)[0].endswith((".dist-info", ".data"))
    }
    expected = {
        "sparklog",
        "pyspark_sparklog.py",
        "pyspark_sparklog_postgres.py",
        "sparklog_workers_python.pth",
    }
    if tops != expected:
        found.append(f"top-level names {sorted(tops)}; expected only {sorted(expected)}")
    return found


if __name__ == "__main__":
    errors = problems(sys.argv[1])
    for error in errors:
        print(f"{sys.argv[1]}: {error}", file=sys.stderr)
    sys.exit(1 if errors else 0)
