"""Field and label selectors as the Kubernetes API server applies them to a list, for the test
API server (tests.support.kube_server): equality (`=`, `==`), inequality (`!=`), and for labels
existence (`key`) and absence (`!key`); terms joined by commas all hold."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def field_value(obj: dict[str, Any], path: str) -> str:
    """The value at a dotted field path (`spec.nodeName`), "" where absent (as the API server)."""
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return "" if value is None else str(value)


def label_value(obj: dict[str, Any], key: str) -> str | None:
    return (obj.get("metadata", {}).get("labels") or {}).get(key)


def selected(obj: dict[str, Any], selector: str, getter: Callable[[dict[str, Any], str], str | None]) -> bool:
    """Whether `obj` matches every term of `selector`, each value read by `getter`."""
    for term in filter(None, (t.strip() for t in selector.split(","))):
        if "!=" in term:
            key, value = term.split("!=", 1)
            if getter(obj, key) == value:
                return False
        elif "=" in term:
            key, value = term.split("=", 1)
            if getter(obj, key.rstrip("=")) != value:
                return False
        elif term.startswith("!"):
            if getter(obj, term[1:]) is not None:
                return False
        elif getter(obj, term) is None:
            return False
    return True
