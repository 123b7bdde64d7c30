"""The connector registry: a source kind is one module under the package, found without a list."""

from __future__ import annotations

import importlib
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest

from agents.base import Connector
from agents.kubernetes import KubernetesConnector
from agents.registry import (
    UnknownSourceKind,
    connector_class,
    connectors,
    find_connectors,
    get_connector,
    known_kinds,
)
from agents.simulated import SimulatedConnector
from agents.ssh import SshConnector

SLURM = '''
from agents.base import Connector, Discovery


class SlurmConnector(Connector):
    kind = "slurm"
    config_keys = frozenset({"controller"})
    secret_fields = ("token",)

    def discover(self) -> Discovery:
        return Discovery()
'''


@pytest.fixture
def plugin_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., ModuleType]]:
    """`make(name, {module: source})`: a throw-away package of connector modules, imported."""
    made: list[str] = []

    def make(name: str, modules: dict[str, str]) -> ModuleType:
        root = tmp_path / name
        root.mkdir()
        (root / "__init__.py").write_text("")
        for module, source in modules.items():
            (root / module).parent.mkdir(parents=True, exist_ok=True)
            (root / module).write_text(textwrap.dedent(source))
        made.append(name)
        return importlib.import_module(name)

    monkeypatch.syspath_prepend(str(tmp_path))
    yield make
    for name in made:
        for module in [m for m in sys.modules if m == name or m.startswith(f"{name}.")]:
            del sys.modules[module]


def test_the_built_in_kinds_are_found_by_walking_the_package() -> None:
    assert known_kinds() == ("kubernetes", "simulated", "ssh")
    assert dict(connectors()) == {
        "kubernetes": KubernetesConnector,
        "simulated": SimulatedConnector,
        "ssh": SshConnector,
    }


def test_a_new_kind_is_one_module(plugin_package: Callable[..., ModuleType]) -> None:
    package = plugin_package("plugins_one", {"slurm.py": SLURM})
    found = find_connectors(package)
    assert list(found) == ["slurm"]
    assert found["slurm"].secret_fields == ("token",)


def test_a_connector_in_a_subpackage_is_found_too(plugin_package: Callable[..., ModuleType]) -> None:
    package = plugin_package("plugins_sub", {"cloud/__init__.py": "", "cloud/slurm.py": SLURM})
    assert list(find_connectors(package)) == ["slurm"]


def test_shared_bases_inherited_kinds_and_abstract_classes_are_not_connectors(
    plugin_package: Callable[..., ModuleType],
) -> None:
    package = plugin_package("plugins_bases", {"mixed.py": SLURM + '''
from agents.ssh import SshConnector


class SharedBase(Connector):  # no kind of its own: a base for several connectors
    def discover(self) -> Discovery:
        return Discovery()


class FasterSlurm(SlurmConnector):  # inherits "slurm": not a second connector
    pass


class Unfinished(Connector):  # declares a kind but not the verbs
    kind = "unfinished"
'''})
    assert list(find_connectors(package)) == ["slurm"]  # the imported SshConnector is not counted either


def test_two_connectors_claiming_one_kind_are_refused(plugin_package: Callable[..., ModuleType]) -> None:
    package = plugin_package("plugins_twice", {"a.py": SLURM, "b.py": SLURM})
    with pytest.raises(TypeError, match=r"source kind 'slurm' is declared by both plugins_twice\.a\.SlurmConnector "
                                        r"and plugins_twice\.b\.SlurmConnector"):
        find_connectors(package)


@pytest.mark.parametrize("kind", ["Slurm", "a-kind-name-longer-than-16", "", "has space"])
def test_a_kind_must_be_a_short_lowercase_slug(plugin_package: Callable[..., ModuleType], kind: str) -> None:
    package = plugin_package(f"plugins_bad_{abs(hash(kind))}", {"slurm.py": SLURM.replace('"slurm"', repr(kind))})
    with pytest.raises(TypeError, match="must be a lowercase slug of at most 16 characters"):
        find_connectors(package)


def test_an_unknown_kind_is_a_permanent_error_naming_the_known_kinds() -> None:
    with pytest.raises(UnknownSourceKind) as err:
        connector_class("slurm")
    assert err.value.permanent is True
    assert err.value.message == "unknown source kind 'slurm'; known kinds: kubernetes, simulated, ssh"
    with pytest.raises(UnknownSourceKind, match=r"unknown source kind \['ssh'\]"):
        connector_class(["ssh"])  # type: ignore[arg-type]  # what a hand-written YAML list gives


def test_get_connector_builds_the_kinds_connector() -> None:
    connector = get_connector("simulated", "demo", {"hosts": 1})
    assert isinstance(connector, SimulatedConnector) and connector.name == "demo"


def test_secrets_are_declared_on_the_connector_and_are_config_keys() -> None:
    assert SshConnector.secret_fields == ("private_key",)
    assert KubernetesConnector.secret_fields == ("telemetry.token", "telemetry.password")
    assert SimulatedConnector.secret_fields == ()
    for cls in connectors().values():  # a field may be a path into a nested entry: its first key
        assert {field.split(".")[0] for field in cls.secret_fields} <= cls.config_keys, cls.kind


def test_every_connector_shares_the_base_timeouts_and_retry_budget() -> None:
    for cls in connectors().values():
        assert cls.retrying is Connector.retrying, cls.kind
        assert cls.retry_budget_s == Connector.retry_budget_s and cls.retry_delays == Connector.retry_delays
