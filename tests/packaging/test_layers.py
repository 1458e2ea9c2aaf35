"""Imports point one way (docs/architecture.md, "Layers"), found by reading every module's
import statements.

* nothing under ``sparklog/`` imports the top-level names ``storage`` or
  ``broker_lite`` (only ``sparklog.storage`` / ``sparklog.broker_lite``), so a
  user's own ``storage.py`` can never be picked up instead;
* only ``sparklog/spark`` imports pyspark (the client, broker and CLI run without it);
* ``storage`` never imports the client, Spark, CLI or broker; ``broker_lite``
  never imports the client, Spark or CLI.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _modules() -> dict[str, Path]:
    """Dotted name of every module of the installed package -> its file (links not followed)."""
    found: dict[str, Path] = {}
    for path in sorted((ROOT / "sparklog").rglob("*.py")):
        if "storage" in path.relative_to(ROOT / "sparklog").parts[:1] or (
            "broker_lite" in path.relative_to(ROOT / "sparklog").parts[:1]
        ):
            continue  # the links; their files are read below under their real folders
        found[".".join(path.relative_to(ROOT).with_suffix("").parts)] = path
    for folder in ("storage", "broker_lite"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            found["sparklog." + ".".join(path.relative_to(ROOT).with_suffix("").parts)] = path
    for entry in (ROOT / "spark_entry").glob("pyspark_sparklog*.py"):
        found[entry.stem] = entry
    return found


def _imports(module: str, path: Path) -> list[str]:
    """Absolute names imported by ``path`` (relative imports resolved against ``module``)."""
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")[: -node.level]
                names.append(".".join([*base, node.module] if node.module else base))
            elif node.module:
                names.append(node.module)
    return names


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


def test_imports_point_one_way() -> None:
    forbidden = {
        "sparklog.storage": (
            "sparklog.client",
            "sparklog.spark",
            "sparklog.cli",
            "sparklog.broker_lite",
            "sparklog.groups",
            "sparklog.demo",
        ),
        "sparklog.broker_lite": (
            "sparklog.client",
            "sparklog.spark",
            "sparklog.cli",
            "sparklog.demo",
        ),
    }
    offenders = [
        f"{module} imports {name}"
        for module, path in _modules().items()
        for layer, above in forbidden.items()
        if _within(module, layer)
        for name in _imports(module, path)
        if any(_within(name, upper) for upper in above)
    ]
    assert offenders == []


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
        if module not in ("sparklog.errors", "sparklog.__init__")
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if (isinstance(node, ast.Name) and node.id in aliases)
        or (isinstance(node, ast.Attribute) and node.attr in aliases)
        or (isinstance(node, ast.alias) and node.name in aliases)
    ]
    assert offenders == []
