"""The layers of the code, checked on the import statements themselves (STYLE: dependencies point
down). From the bottom: core → inventory → allocation → history → frontend, with the pure policy free of
Django and the connectors free of the database; pool/ is the roof that wires them together."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PROJECT = {"core", "pool", "agents", "inventory", "allocation", "history", "frontend", "gpupool_cli"}

# package -> project packages (or package prefixes) it must never import
FORBIDDEN = {
    "core": PROJECT - {"core"},
    "agents": PROJECT - {"agents", "core"},
    "inventory": {"allocation", "history", "frontend", "pool", "gpupool_cli"},
    "allocation": {"history", "frontend", "pool", "gpupool_cli"},
    # The time series store reads inventory and allocation; the dashboard reads it.
    "history": {"frontend", "pool", "gpupool_cli"},
    "frontend": {"pool", "gpupool_cli"},
    "gpupool_cli": PROJECT - {"gpupool_cli"},
    "allocation/policy": (PROJECT - {"allocation"}) | {"django", "rest_framework", "celery",
                                                        "allocation.models", "allocation.services",
                                                        "allocation.engine"},
}


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return names


def _violations(package: str, forbidden: set[str]) -> list[str]:
    found = []
    for path in sorted((REPO / package).rglob("*.py")):
        if "migrations" in path.parts:
            continue
        for name in _imports(path):
            if any(name == bad or name.startswith(bad + ".") for bad in forbidden):
                found.append(f"{path.relative_to(REPO)} imports {name}")
    return found


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_no_import_points_up_or_sideways(package: str) -> None:
    assert _violations(package, FORBIDDEN[package]) == []


def test_the_check_itself_sees_imports() -> None:
    assert "core.errors" in _imports(REPO / "allocation" / "leases.py")
