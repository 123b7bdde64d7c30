"""The layers of the code are import-linter contracts (pyproject.toml [tool.importlinter]), run by
`lint-imports` in `make test`. What is left here is what import-linter cannot say itself: that its
list of packages is the project's (a new app gets a place in the layers or fails here), and that the
contracts hold when only pytest is run."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
NOT_APPLICATION = {"tests", "bench"}  # packages of the repository that are not the product


def _config() -> Any:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]


def test_every_application_package_is_under_the_contracts() -> None:
    # The client's distribution keeps its package one folder down (cli/gpupool_cli).
    on_disk = {p.parent.name for p in [*REPO.glob("*/__init__.py"), *REPO.glob("cli/*/__init__.py")]}
    on_disk -= NOT_APPLICATION
    assert set(_config()["root_packages"]) == on_disk, (
        "pyproject [tool.importlinter] root_packages must list every application package "
        f"(missing: {sorted(on_disk - set(_config()['root_packages']))})")


def test_every_server_package_has_a_layer() -> None:
    layers = next(c for c in _config()["contracts"] if c["id"] == "layers")["layers"]
    # Not server packages: the command-line client (HTTP only) and the process launcher of the
    # tests and benchmarks; each has its own contract.
    assert set(layers) == set(_config()["root_packages"]) - {"gpupool_cli", "stacktools"}


def test_the_import_contracts_hold(monkeypatch: pytest.MonkeyPatch) -> None:
    from importlinter.cli import lint_imports

    monkeypatch.chdir(REPO)  # the packages are found from the working directory, as in `make test`
    assert lint_imports(config_filenames=(str(REPO / "pyproject.toml"),), no_cache=True, no_logo=True) == 0
