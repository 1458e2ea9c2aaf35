"""Imports point one way (DESIGN.md §1; docs/architecture.md, "Layers"), found by reading every
module's import statements (an AST import graph: no import runs).

* every subpackage imports only what §1 draws for it (:data:`DRAWN`, an import-linter style
  contract): a new arrow fails :func:`test_every_arrow_is_one_the_layers_draw` until the
  design draws it;
* no two modules import each other, directly or round a loop, even where the loop is held
  apart by an import inside a function or closed only by a ``TYPE_CHECKING`` import (an
  annotation naming the other module's class: a shared module or a Protocol breaks it);
* nothing under ``sparklog/`` imports the top-level names ``storage`` or
  ``broker_lite`` (only ``sparklog.storage`` / ``sparklog.broker_lite``), so a
  user's own ``storage.py`` can never be picked up instead;
* only ``storage`` imports fsspec/s3fs, only ``sparklog/spark`` imports pyspark (the client,
  broker and CLI run without it), only the Kafka listener (``broker_lite/kafka``) imports
  aiokafka, its wire codec (record batches, message sets, the old API versions' schemas).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: sparklog's ground modules: every layer may import them; they import only each other
GROUND = "ground"
GROUND_MODULES = frozenset(
    f"sparklog.{name}"
    for name in (
        "clock",
        "errors",
        "lazy_exports",
        "metrics_http",
        "retry",
        "settings",
        "storage_options",
        "topic_partition",
    )
)
#: The arrows of DESIGN.md §1: unit -> the units it may import directly.  A unit may also
#: import what those may (layers, as import-linter's layers contract: the Spark data source
#: and the mirror copier read storage below the client), never a unit above it.
DRAWN: dict[str, frozenset[str]] = {
    GROUND: frozenset(),
    # the log engine: sparklog's ground modules only
    "sparklog.storage": frozenset({GROUND}),
    # the Flight wire format, shared by the client and the broker: imports neither
    "sparklog.protocol": frozenset({GROUND}),
    "sparklog.groups": frozenset({"sparklog.storage"}),
    "sparklog.security": frozenset({"sparklog.storage"}),
    "sparklog.broker_lite": frozenset(
        {"sparklog.protocol", "sparklog.groups", "sparklog.security", "sparklog.storage"}
    ),
    # protocol to reach brokers, storage for embedded roots, whose groups and credentials
    # the client runs in-process (groups/ is "shared by the broker and by embedded clients")
    "sparklog.client": frozenset(
        {"sparklog.protocol", "sparklog.storage", "sparklog.groups", "sparklog.security"}
    ),
    # applications on top of the client API
    "sparklog.mirror": frozenset({"sparklog.client"}),
    "sparklog.connect": frozenset({"sparklog.client"}),
    # the connectors' Spark sides (delta-sink, the PostgreSQL stream) live with pyspark
    "sparklog.spark": frozenset({"sparklog.client", "sparklog.connect"}),
    "sparklog.demo": frozenset({"sparklog", "sparklog.spark", "sparklog.broker_lite"}),
    # the `sparklog` command: runs the applications, and a broker (`broker start`, which
    # hands the broker the mirror hook: a process's entry point, not the broker's core)
    "sparklog.cli": frozenset(
        {
            "sparklog.client",
            "sparklog.mirror",
            "sparklog.connect",
            "sparklog.spark",
            "sparklog.demo",
            "sparklog.broker_lite",
        }
    ),
    # `python -m sparklog.broker_lite`: the other entry point that starts a broker and hands
    # it the mirror hook; nothing imports it
    "sparklog.broker_lite.__main__": frozenset({"sparklog.broker_lite", "sparklog.mirror"}),
    # the package's lazy exports (Producer, Consumer, Admin, the errors)
    "sparklog": frozenset({"sparklog.client"}),
    "sparklog.__main__": frozenset({"sparklog.cli"}),
    # pyspark_sparklog*.py: what Spark's lookup of data sources lists
    "spark_entry": frozenset({"sparklog.spark"}),
}
SUBPACKAGES = (
    "sparklog.storage",
    "sparklog.broker_lite",
    "sparklog.protocol",
    "sparklog.groups",
    "sparklog.security",
    "sparklog.client",
    "sparklog.mirror",
    "sparklog.connect",
    "sparklog.spark",
    "sparklog.cli",
)


def _modules(root: Path = ROOT) -> dict[str, Path]:
    """Dotted name of every module of the installed package -> its file.

    ``storage/`` and ``broker_lite/`` are installed as ``sparklog.storage`` and
    ``sparklog.broker_lite`` (pyproject's package-dir mapping).
    """
    found: dict[str, Path] = {}
    for path in sorted((root / "sparklog").rglob("*.py")):
        found[_dotted(("sparklog", *path.relative_to(root / "sparklog").with_suffix("").parts))] = (
            path
        )
    for folder in ("storage", "broker_lite"):
        for path in sorted((root / folder).rglob("*.py")):
            found[_dotted(("sparklog", *path.relative_to(root).with_suffix("").parts))] = path
    for entry in (root / "spark_entry").glob("pyspark_sparklog*.py"):
        found[entry.stem] = entry
    return found


def _dotted(parts: tuple[str, ...]) -> str:
    """A module's dotted name (a package's ``__init__`` is the package)."""
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(module: str, path: Path) -> list[str]:
    """Absolute names imported by ``path`` (relative imports resolved against ``module``)."""
    return [found.name for found in _import_statements(module, path)]


@dataclass(frozen=True)
class Imported:
    """One name an import statement names, where, and when it runs."""

    name: str
    line: int
    #: "module" (on import), "deferred" (inside a function), "typing" (TYPE_CHECKING only)
    when: str
    #: for ``from package import name``: the package (``name`` is package.name)
    base: str = ""


def _import_statements(module: str, path: Path) -> list[Imported]:
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[Imported] = []

    def visit(node: ast.AST, when: str) -> None:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.dump(node.test):
            for child in node.body:
                visit(child, "typing")
            for child in node.orelse:
                visit(child, when)
            return
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            when = "typing" if when == "typing" else "deferred"
        if isinstance(node, ast.Import):
            found.extend(Imported(alias.name, node.lineno, when) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1])
                base = f"{base}.{node.module}" if node.module else base
            else:
                base = node.module or ""
            found.append(Imported(base, node.lineno, when))
            found.extend(
                Imported(f"{base}.{alias.name}", node.lineno, when, base) for alias in node.names
            )
        for child in ast.iter_child_nodes(node):
            visit(child, when)

    visit(tree, "module")
    return found


@cache
def _lazy_exports(path: Path) -> dict[str, str]:
    """A package's ``_EXPORTS`` (public name -> defining module; sparklog.lazy_exports)."""
    for node in ast.parse(path.read_text()).body:
        if (
            isinstance(node, ast.AnnAssign | ast.Assign)
            and "_EXPORTS" in ast.dump(node.target if isinstance(node, ast.AnnAssign) else node)
            and isinstance(node.value, ast.Dict)
        ):
            return {
                str(ast.literal_eval(k)): str(ast.literal_eval(v))
                for k, v in zip(node.value.keys, node.value.values, strict=True)
                if k is not None
            }
    return {}


def _edges(modules: dict[str, Path]) -> Iterator[tuple[str, str, Imported]]:
    """(importer, imported module of sparklog's, the statement) for every import.

    ``from package import Name`` is an arrow to the module that defines ``Name`` when the
    package exports it lazily, to ``package.Name`` when that is a module, else to
    ``package``; ``from package import module`` does not count as importing the package.
    """
    for module, path in modules.items():
        statements = _import_statements(module, path)
        named_bases = {s.base for s in statements if s.base}
        for statement in statements:
            target = _resolve(statement, modules)
            if target is None or target == module:
                continue
            if statement.base == "" and statement.name in named_bases:
                continue  # the ``from package import ...`` line: its names are the arrows
            yield module, target, statement


def _resolve(statement: Imported, modules: dict[str, Path]) -> str | None:
    if statement.name in modules:
        return statement.name
    if statement.base in modules:
        name = statement.name.rpartition(".")[2]
        return _lazy_exports(modules[statement.base]).get(name, statement.base)
    if statement.base:
        return None  # the package itself is not sparklog's (e.g. ``from pyarrow import ...``)
    parts = statement.name.split(".")
    while parts and ".".join(parts) not in modules:
        parts.pop()
    return ".".join(parts) if parts else None


def _unit(module: str) -> str:
    """The layer a module belongs to (a key of :data:`DRAWN`)."""
    if module in GROUND_MODULES:
        return GROUND
    if module in DRAWN:
        return module
    if module.startswith("pyspark_sparklog"):
        return "spark_entry"
    for package in SUBPACKAGES:
        if _within(module, package):
            return package
    raise AssertionError(f"{module}: no layer of DESIGN.md §1 holds it; draw it in DRAWN")


def _may_import(unit: str) -> frozenset[str]:
    """Every unit ``unit`` may import: its arrows, theirs, and so on; always the ground."""
    seen: set[str] = {GROUND}
    todo = [unit]
    while todo:
        for lower in DRAWN[todo.pop()]:
            if lower not in seen:
                seen.add(lower)
                todo.append(lower)
    return frozenset(seen)


def _arrows_not_drawn(modules: dict[str, Path]) -> list[str]:
    return sorted(
        f"{module}:{statement.line} imports {target} ({_unit(module)} -> {_unit(target)})"
        for module, target, statement in _edges(modules)
        if _unit(module) != _unit(target) and _unit(target) not in _may_import(_unit(module))
    )


def _cycles(modules: dict[str, Path]) -> list[list[str]]:
    """Groups of modules that import each other round a loop (Tarjan's strongly connected
    components), counting every import: at module level, inside a function, and under
    ``TYPE_CHECKING``."""
    graph: dict[str, set[str]] = {module: set() for module in modules}
    for module, target, _statement in _edges(modules):
        graph[module].add(target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                connect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return sorted(found)


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def test_there_are_modules_to_check() -> None:
    modules = _modules()
    assert "sparklog.storage.objectstore" in modules
    assert "sparklog.broker_lite.server" in modules
    assert "sparklog.spark.source" in modules


def test_no_module_imports_the_top_level_storage_or_broker_lite() -> None:
    offenders = [
        f"{module} imports {name}"
        for module, path in _modules().items()
        for name in _imports(module, path)
        if _within(name, "storage") or _within(name, "broker_lite")
    ]
    assert offenders == []


def test_only_sparklog_spark_imports_pyspark() -> None:
    offenders = [
        f"{module} imports {name}"
        for module, path in _modules().items()
        for name in _imports(module, path)
        if _within(name, "pyspark")
        and not _within(module, "sparklog.spark")
        and module not in ("pyspark_sparklog", "pyspark_sparklog_postgres", "sparklog.demo")
    ]
    assert offenders == []


def test_the_demo_imports_pyspark_only_inside_functions() -> None:
    tree = ast.parse((ROOT / "sparklog" / "demo.py").read_text())
    top_level = [node for node in tree.body if isinstance(node, ast.Import | ast.ImportFrom)]
    names = [
        alias.name if isinstance(node, ast.Import) else (node.module or "")
        for node in top_level
        for alias in node.names
    ]
    assert not [name for name in names if _within(name, "pyspark")]


def test_every_module_is_in_a_layer_and_every_subpackage_is_drawn() -> None:
    modules = _modules()
    units = {_unit(module) for module in modules}
    assert set(SUBPACKAGES) <= units
    packages = {module for module, path in modules.items() if path.name == "__init__.py"} - {
        "sparklog"
    }
    top = {".".join(p.split(".")[:2]) for p in packages}
    assert top <= set(SUBPACKAGES), "a new subpackage needs its arrows in DRAWN"


def test_every_arrow_is_one_the_layers_draw() -> None:
    """Storage imports only the ground; the broker never imports the client, the CLI,
    Spark or an application (mirror links reach it as a hook its entry point hands it);
    the client never imports the broker or an application; the protocol imports neither."""
    assert _arrows_not_drawn(_modules()) == []


def test_no_modules_import_each_other() -> None:
    assert _cycles(_modules()) == []


def test_only_storage_imports_fsspec_or_s3fs() -> None:
    offenders = [
        f"{module} imports {name}"
        for module, path in _modules().items()
        for name in _imports(module, path)
        if (_within(name, "fsspec") or _within(name, "s3fs"))
        and not _within(module, "sparklog.storage")
    ]
    assert offenders == []


def test_only_the_kafka_listener_imports_aiokafka() -> None:
    """aiokafka is a runtime dependency as the Kafka listener's wire codec (record batches,
    old message sets, the old API versions' schemas: ``broker_lite/kafka/legacy.py``);
    nothing else speaks Kafka's wire format (clients reach brokers over Flight, the mirror
    through confluent-kafka), so a second user would be a new seam the design does not draw."""
    offenders = [
        f"{module} imports {name}"
        for module, path in _modules().items()
        for name in _imports(module, path)
        if _within(name, "aiokafka") and not _within(module, "sparklog.broker_lite.kafka")
    ]
    assert offenders == []


def _tree(root: Path, files: dict[str, str]) -> dict[str, Path]:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return _modules(root)


def test_the_contract_fails_on_an_arrow_not_drawn_and_on_any_cycle(tmp_path: Path) -> None:
    """The checks above on a small tree: the broker importing an application, the client
    importing the broker, modules held apart only by an import in a function, and two
    closed only by a ``TYPE_CHECKING`` import (an annotation)."""
    modules = _tree(
        tmp_path,
        {
            "sparklog/__init__.py": "",
            "sparklog/errors.py": "",
            "sparklog/mirror/__init__.py": "",
            "sparklog/mirror/admin.py": "from sparklog.storage import LogRoot\n",
            "sparklog/client/__init__.py": "",
            "sparklog/client/admin.py": "from sparklog.broker_lite import server\n",
            "storage/__init__.py": '_EXPORTS = {"LogRoot": "sparklog.storage.catalog"}\n',
            "storage/catalog.py": (
                "from sparklog import errors\ndef topic():\n    from . import topics\n"
            ),
            "storage/topics.py": (
                "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n    from sparklog.storage.catalog import LogRoot\n"
            ),
            "broker_lite/__init__.py": "",
            "broker_lite/server.py": "from sparklog.mirror import admin\n",
            "broker_lite/service.py": "def f():\n    from . import server\n",
            "broker_lite/cleaner.py": (
                "import sparklog.broker_lite.service\n"
                "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n    from sparklog.client import admin\n"
            ),
        },
    )
    (tmp_path / "broker_lite" / "server.py").write_text(
        "from sparklog.mirror import admin\nfrom sparklog.broker_lite.cleaner import x\n"
    )
    assert _arrows_not_drawn(modules) == [
        "sparklog.broker_lite.cleaner:4 imports sparklog.client.admin "
        "(sparklog.broker_lite -> sparklog.client)",
        "sparklog.broker_lite.server:1 imports sparklog.mirror.admin "
        "(sparklog.broker_lite -> sparklog.mirror)",
        "sparklog.client.admin:1 imports sparklog.broker_lite.server "
        "(sparklog.client -> sparklog.broker_lite)",
    ]
    assert _cycles(modules) == [
        [
            "sparklog.broker_lite.cleaner",
            "sparklog.broker_lite.server",
            "sparklog.broker_lite.service",
            "sparklog.client.admin",  # closed by cleaner's TYPE_CHECKING import
        ],
        ["sparklog.storage.catalog", "sparklog.storage.topics"],
    ]


def test_production_code_has_no_fault_injection_hooks() -> None:
    """The exactly-once tests inject faults from tests/support/spark_faults.py only."""
    offenders = [
        module
        for module, path in _modules().items()
        if "SPARKLOG_SPARK_FAULT" in path.read_text() or "maybe_fault" in path.read_text()
    ]
    assert offenders == []


def _string_constants(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    return [
        n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
    ]


def test_production_code_reads_no_test_hooks_from_the_environment() -> None:
    """Tests inject what they vary (a clock, a fault) as arguments, never through variables
    such as ``SPARKLOG_TEST_CLOCK_OFFSET_MS`` that production code would read."""
    offenders = [
        f"{module}: {text}"
        for module, path in _modules().items()
        for text in _string_constants(path)
        if "SPARKLOG_TEST" in text or text.startswith("PYTEST_") or "_TEST_" in text
    ]
    assert offenders == []


def test_inside_the_package_each_error_class_has_one_name() -> None:
    """Aliases (``ConfigError`` for ``InvalidConfigurationError``...) are for users only:
    ``sparklog/errors.py`` defines them and ``sparklog/__init__.py`` exports them."""
    import sparklog.errors as errors

    aliases = {
        name
        for name, value in vars(errors).items()
        if isinstance(value, type)
        and issubclass(value, errors.SparklogError)
        and value.__name__ != name
    }
    assert "ConfigError" in aliases
    offenders = [
        f"{module}: {ast.dump(node)}"
        for module, path in _modules().items()
        if module not in ("sparklog.errors", "sparklog")
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if (isinstance(node, ast.Name) and node.id in aliases)
        or (isinstance(node, ast.Attribute) and node.attr in aliases)
        or (isinstance(node, ast.alias) and node.name in aliases)
    ]
    assert offenders == []
