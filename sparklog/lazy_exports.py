"""A package's public names imported on first use (PEP 562), for cheap package imports.

``sparklog`` and ``sparklog.storage`` both use it: ``import sparklog`` must not load
the clients, and the storage catalog must not load pyarrow, numpy or fsspec (every
CLI command and every Spark Python runner is a fresh process that pays each import).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(
    package: str, exports: Mapping[str, str], namespace: dict[str, Any]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module ``__getattr__`` and ``__dir__`` of ``package``.

    ``exports`` maps each public name to the module defining it; a name is imported
    from there when first asked for and then kept in ``namespace`` (the package's
    globals), so later lookups are plain attribute reads.
    """

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted([*namespace, *exports])

    return __getattr__, __dir__
