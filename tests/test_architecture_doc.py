"""docs/architecture.md names real things: every repository path and every dotted project name in
backticks exists, so a move or rename that forgets the document fails here instead of leaving it
silently wrong. README.md links it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "architecture.md"
PACKAGES = {"agents", "allocation", "core", "frontend", "gpupool_cli", "history", "inventory", "pool", "tests"}

_TICKED = re.compile(r"`([^`\n]+)`")
_DOTTED = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)+$")


def _ticked(text: str) -> list[str]:
    """Backticked spans outside fenced blocks (the diagrams hold no names to check)."""
    prose = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return _TICKED.findall(prose)


def repo_paths(text: str) -> list[str]:
    """Spans that are repository paths: a slash, no space, not a URL path (those start with '/')."""
    return [t for t in _ticked(text) if "/" in t and not t.startswith("/") and not re.search(r"[\s{}?=]", t)]


def dotted_names(text: str) -> list[str]:
    """Spans like `allocation.engine.run_pass`: dotted, starting with a project package."""
    return [t for t in _ticked(text) if _DOTTED.match(t) and t.split(".")[0] in PACKAGES]


def path_missing(path: str) -> bool:
    return not any(REPO.glob(path.rstrip("/"))) if "*" in path else not (REPO / path).exists()


def _module_file(parts: list[str]) -> Path | None:
    base = REPO.joinpath(*parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _defined(body: list[ast.stmt]) -> dict[str, ast.stmt]:
    names: dict[str, ast.stmt] = {}
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names[node.name] = node
        elif isinstance(node, ast.Assign):
            names |= {t.id: node for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names[node.target.id] = node
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0]: node for a in node.names}
    return names


def name_missing(dotted: str) -> bool:
    """True unless the longest module prefix exists and the rest is defined in it (a top-level
    name, then optionally a name in that class's body)."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        module = _module_file(parts[:cut])
        if module is None:
            continue
        rest = parts[cut:]
        if not rest:
            return False
        scope = _defined(ast.parse(module.read_text(), str(module)).body)
        node = scope.get(rest[0])
        if node is None or len(rest) > 2:
            return True
        if len(rest) == 2:
            if not isinstance(node, ast.ClassDef):
                return not isinstance(node, (ast.Import, ast.ImportFrom))  # an import: not followed
            return rest[1] not in _defined(node.body)
        return False
    return True


def test_every_repository_path_in_the_document_exists() -> None:
    text = DOC.read_text()
    assert [p for p in repo_paths(text) if path_missing(p)] == []


def test_every_dotted_project_name_in_the_document_exists() -> None:
    text = DOC.read_text()
    assert [n for n in dotted_names(text) if name_missing(n)] == []


def test_the_readme_links_the_document() -> None:
    assert "(docs/architecture.md)" in (REPO / "README.md").read_text()


def test_the_check_itself_sees_paths_and_names_and_misses() -> None:
    text = DOC.read_text()
    assert len(repo_paths(text)) > 40 and len(dotted_names(text)) > 30
    sample = "`allocation/lease_states.py` `allocation/nowhere.py` `/api/v1/leases/` `allocation/policy/preemption*.py`"
    assert repo_paths(sample) == ["allocation/lease_states.py", "allocation/nowhere.py",
                                  "allocation/policy/preemption*.py"]
    assert [p for p in repo_paths(sample) if path_missing(p)] == ["allocation/nowhere.py"]
    assert not name_missing("allocation.engine.run_pass")
    assert not name_missing("agents.base.Connector.workloads")
    assert not name_missing("allocation.engine.snapshot")
    assert name_missing("allocation.engine.no_such_function")
    assert name_missing("agents.base.Connector.no_such_attribute")
    assert name_missing("allocation.no_such_module")
