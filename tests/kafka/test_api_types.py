"""The Kafka handlers' request and response types match what the listener serves.

``broker_lite/kafka/api_types.py`` names, per API, the union of kio's classes of the
versions the API table serves through kio; every handler of the table is annotated with
its API's types and the typed context, never ``Any`` (issue 40, item 3).
"""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

from kio.index import load_request_schema, load_response_schema

from sparklog.broker_lite.kafka.versions import API_TABLE

API_TYPES = Path(__file__).resolve().parents[2] / "broker_lite" / "kafka" / "api_types.py"


def _aliases() -> dict[str, list[type]]:
    """Alias name -> the kio classes its union names (imports resolved, nothing guessed)."""
    tree = ast.parse(API_TYPES.read_text())
    modules: dict[str, str] = {}
    aliases: dict[str, list[type]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("kio."):
            for name in node.names:
                modules[name.asname or name.name] = f"{node.module}.{name.name}"
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            assert node.value is not None
            classes = []
            for part in ast.walk(node.value):
                if isinstance(part, ast.Attribute) and isinstance(part.value, ast.Name):
                    module = importlib.import_module(modules[part.value.id])
                    classes.append(getattr(module, part.attr))
            aliases[node.target.id] = classes
    return aliases


def _kio_versions(key: int, low: int, high: int) -> list[int]:
    found = []
    for version in range(low, high + 1):
        try:
            load_request_schema(key, version)
        except Exception:  # below kio's oldest: served through legacy.py
            continue
        found.append(version)
    return found


def test_each_api_names_the_kio_classes_of_exactly_the_versions_it_serves() -> None:
    aliases = _aliases()
    for key, api in API_TABLE.items():
        versions = _kio_versions(key, api.min_version, api.max_version)
        assert versions, api.name
        assert set(aliases[f"{api.name}Request"]) == {load_request_schema(key, v) for v in versions}
        assert set(aliases[f"{api.name}Response"]) == {
            load_response_schema(key, v) for v in versions
        }


def test_a_version_range_alias_is_within_its_api() -> None:
    aliases = _aliases()
    for name, classes in aliases.items():
        whole = next(
            (
                f"{api.name}{kind}"
                for api in API_TABLE.values()
                for kind in ("Request", "Response")
                if name.startswith(f"{api.name}{kind}")
            ),
            None,
        )
        assert whole is not None, name
        assert set(classes) <= set(aliases[whole]), name


def test_every_handler_is_typed_with_its_api_and_the_handler_context() -> None:
    for api in API_TABLE.values():
        annotations = inspect.get_annotations(api.handler)
        assert annotations["ctx"] == "HandlerContext", api.name
        assert annotations["request"] == f"{api.name}Request", api.name
        assert annotations["return"].startswith(f"{api.name}Response"), api.name
        assert "Any" not in str(annotations), api.name
