"""YAML read with the position of every value, and the checker that records errors at them
(`file:line:col: message`), collecting them all instead of stopping at the first."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import yaml

from allocation.config.specs import ConfigError


class Positions:
    """Maps a path of keys/indices inside the document to 'file:line:col'."""

    def __init__(self, filename: str) -> None:
        self.filename = filename
        self.marks: dict[tuple[Any, ...], str] = {}

    def at(self, path: tuple[Any, ...]) -> str:
        while path and path not in self.marks:
            path = path[:-1]
        return self.marks.get(path, self.filename)


def _to_python(node: yaml.Node, path: tuple[Any, ...], pos: Positions) -> Any:
    pos.marks[path] = f"{pos.filename}:{node.start_mark.line + 1}:{node.start_mark.column + 1}"
    if isinstance(node, yaml.MappingNode):
        out: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = yaml.safe_load(yaml.serialize(key_node)) if not isinstance(
                key_node, yaml.ScalarNode) else key_node.value
            out[key] = _to_python(value_node, (*path, key), pos)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_to_python(child, (*path, i), pos) for i, child in enumerate(node.value)]
    # Scalars: let the safe loader resolve ints, floats, booleans and nulls.
    return yaml.safe_load(yaml.serialize(node))


def load_yaml(text: str, filename: str) -> tuple[Any, Positions]:
    pos = Positions(filename)
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{filename}:{mark.line + 1}:{mark.column + 1}" if mark else filename
        raise ConfigError([f"{where}: not valid YAML: {getattr(exc, 'problem', exc)}"]) from None
    if node is None:
        return {}, pos
    return _to_python(node, (), pos), pos


# --- validation ---------------------------------------------------------------------------------


class Checker:
    def __init__(self, pos: Positions) -> None:
        self.pos = pos
        self.errors: list[str] = []

    def error(self, path: tuple[Any, ...], message: str) -> None:
        self.errors.append(f"{self.pos.at(path)}: {message}")

    def entries(self, data: Mapping[str, Any], key: str) -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
        items = data.get(key)
        if items is None:
            return []
        if not isinstance(items, list):
            self.error((key,), f"'{key}' must be a list")
            return []
        good = []
        for i, item in enumerate(items):
            if isinstance(item, dict):
                good.append(((key, i), item))
            else:
                self.error((key, i), f"each entry of '{key}' must be a mapping")
        return good

    def keys(self, path: tuple[Any, ...], item: Mapping[str, Any], allowed: set[str],
             required: set[str]) -> bool:
        ok = True
        for key in item:
            if key not in allowed:
                self.error((*path, key), f"unknown key '{key}' (allowed: {', '.join(sorted(allowed))})")
                ok = False
        for key in sorted(required - set(item)):
            self.error(path, f"missing required key '{key}'")
            ok = False
        return ok

    def name(self, path: tuple[Any, ...], value: Any, what: str) -> str | None:
        if not isinstance(value, str) or not value or len(value) > 64 or not all(
                c.isalnum() or c in "-_" for c in value):
            self.error(path, f"{what} must be a non-empty name of letters, digits, '-' or '_' "
                             f"(at most 64), got {value!r}")
            return None
        return value

    def integer(self, path: tuple[Any, ...], value: Any, what: str, *, minimum: int = 0,
                nullable: bool = False) -> int | None:
        if value is None and nullable:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            self.error(path, f"{what} must be an integer ≥ {minimum}"
                             f"{' or null' if nullable else ''}, got {value!r}")
            return None
        return value

    def number(self, path: tuple[Any, ...], value: Any, what: str, *, positive: bool = True) -> float | None:
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) \
                or (positive and value <= 0):
            self.error(path, f"{what} must be a {'positive ' if positive else ''}number, got {value!r}")
            return None
        return float(value)

    def boolean(self, path: tuple[Any, ...], value: Any, what: str) -> bool | None:
        if not isinstance(value, bool):
            self.error(path, f"{what} must be true or false, got {value!r}")
            return None
        return value

    def unique(self, path: tuple[Any, ...], seen: set[Any], key: Any, what: str) -> None:
        if key in seen:
            self.error(path, f"duplicate {what} {key!r}")
        seen.add(key)
