"""Source kind → connector class, found by walking the `agents` package. Nothing is listed by hand.

A connector is a concrete `Connector` subclass that declares its own `kind` (a class attribute)
in any module under `agents/`. Adding a source kind (Slurm, a cloud API) is adding that one
module: configuration, `Source.kind` validation, the API's `kind` filter and discovery all ask
this registry. Connector modules import their SDKs inside methods (STYLE.md #10), so walking the
package stays cheap; it happens once per process, on first use.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from collections.abc import Mapping
from functools import cache
from types import MappingProxyType, ModuleType
from typing import Any

from agents.base import AgentError, Connector

# The kind is stored in `Source.kind` (16 characters) and written in YAML: keep it a short slug.
_KIND = re.compile(r"^[a-z][a-z0-9_-]{0,15}$")


class UnknownSourceKind(AgentError):
    """No connector declares this kind. The message names the kinds there are."""

    def __init__(self, kind: object) -> None:
        super().__init__(unknown_kind_message(kind), permanent=True)
        self.kind = kind


def find_connectors(package: ModuleType) -> dict[str, type[Connector]]:
    """Import every module under `package` and map each connector's `kind` to its class.

    Only classes defined in the module walked and declaring `kind` themselves count, so a base
    class shared by connectors, or a subclass that inherits a kind, is not a second connector.
    Raises TypeError for a kind that is not a short slug or that two connectors both claim.
    """
    found: dict[str, type[Connector]] = {}
    for info in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):
        module = importlib.import_module(info.name)
        for cls in _declared_connectors(module):
            kind = cls.__dict__["kind"]
            if not isinstance(kind, str) or not _KIND.match(kind):
                raise TypeError(f"{_name(cls)}.kind must be a lowercase slug of at most 16 characters, got {kind!r}")
            if kind in found:
                raise TypeError(f"source kind {kind!r} is declared by both {_name(found[kind])} and {_name(cls)}")
            found[kind] = cls
    return found


@cache
def connectors() -> Mapping[str, type[Connector]]:
    """Every source kind of this installation, read-only; computed once per process."""
    import agents

    return MappingProxyType(find_connectors(agents))


def known_kinds() -> tuple[str, ...]:
    """The registered source kinds, sorted."""
    return tuple(sorted(connectors()))


def connector_class(kind: str) -> type[Connector]:
    """The connector class of `kind`; raises UnknownSourceKind (a permanent AgentError)."""
    try:
        return connectors()[kind]
    except (KeyError, TypeError):  # TypeError: an unhashable kind from a hand-written YAML file
        raise UnknownSourceKind(kind) from None


def get_connector(kind: str, name: str, config: Mapping[str, Any]) -> Connector:
    """A connector of `kind` for the source `name` (config with its secrets already decrypted)."""
    return connector_class(kind)(name, config)


def unknown_kind_message(kind: object) -> str:
    return f"unknown source kind {kind!r}; known kinds: {', '.join(known_kinds())}"


def _declared_connectors(module: ModuleType) -> list[type[Connector]]:
    return [
        obj
        for obj in vars(module).values()
        if isinstance(obj, type)
        and issubclass(obj, Connector)
        and obj.__module__ == module.__name__
        and "kind" in obj.__dict__
        and not inspect.isabstract(obj)
    ]


def _name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def placement_traits(kind: str) -> tuple[frozenset[str], bool]:
    """(the workload kinds a source of `kind` starts, whether a multi-host lease may span
    several sources of it); an unknown kind starts nothing and spans."""
    cls = connectors().get(kind)
    return (cls.workloads, cls.spans_sources) if cls is not None else (frozenset(), True)


def placement_domain(kind: str, source: str) -> str:
    """The domain a multi-host lease on this source's hosts may not leave: the source itself
    where it is a world of its own (a Kubernetes cluster), else every source of its kind."""
    return kind if placement_traits(kind)[1] else f"{kind}:{source}"
