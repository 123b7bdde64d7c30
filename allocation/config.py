"""The declarative YAML configuration: parse and validate, with file positions in every error.

Pure: no Django, no database. `allocation.apply` turns a validated Config into rows. Errors are
collected (not raised one by one) so a user sees every problem of a file at once.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from agents.base import AgentError
from agents.registry import connector_class
from allocation.policy.types import PriorityClassView, QuotaView

TOP_KEYS = {"pools", "teams", "quotas", "priority_classes", "scheduler", "sources"}
SOURCE_COMMON = {"name", "kind", "pool", "interval_s"}


class ConfigError(Exception):
    """A configuration file is invalid; `errors` holds one message per problem."""

    def __init__(self, errors: list[str]) -> None:
        super().__init__("\n".join(errors))
        self.errors = errors


@dataclass(frozen=True)
class PoolSpec:
    name: str
    description: str = ""
    # Time-sliced replicas of one physical GPU may carry leases of several teams at once.
    share_across_teams: bool = False


@dataclass(frozen=True)
class TeamSpec:
    name: str
    weight: float = 1.0
    members: tuple[str, ...] = ()


# A quota or priority class in the file is exactly what the policy reads: one type, not two.
QuotaSpec = QuotaView
PriorityClassSpec = PriorityClassView


@dataclass(frozen=True)
class SchedulerSpec:
    fair_share_half_life_hours: float = 168.0
    pass_interval_s: float = 10.0


@dataclass(frozen=True)
class SourceSpec:
    name: str
    kind: str
    pool: str
    interval_s: int = 60
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass
class Config:
    pools: list[PoolSpec] = field(default_factory=list)
    teams: list[TeamSpec] = field(default_factory=list)
    quotas: list[QuotaSpec] = field(default_factory=list)
    priority_classes: list[PriorityClassSpec] = field(default_factory=list)
    scheduler: SchedulerSpec | None = None
    sources: list[SourceSpec] = field(default_factory=list)


# --- YAML with positions ------------------------------------------------------------------------


class _Positions:
    """Maps a path of keys/indices inside the document to 'file:line:col'."""

    def __init__(self, filename: str) -> None:
        self.filename = filename
        self.marks: dict[tuple[Any, ...], str] = {}

    def at(self, path: tuple[Any, ...]) -> str:
        while path and path not in self.marks:
            path = path[:-1]
        return self.marks.get(path, self.filename)


def _to_python(node: yaml.Node, path: tuple[Any, ...], pos: _Positions) -> Any:
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


def _load(text: str, filename: str) -> tuple[Any, _Positions]:
    pos = _Positions(filename)
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


class _Checker:
    def __init__(self, pos: _Positions) -> None:
        self.pos = pos
        self.errors: list[str] = []

    def error(self, path: tuple[Any, ...], message: str) -> None:
        self.errors.append(f"{self.pos.at(path)}: {message}")

    def entries(self, data: Mapping[str, Any], key: str) -> list[tuple[tuple[Any, ...], dict]]:
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


def parse_config(text: str, filename: str = "<config>") -> Config:
    """Parse and validate one configuration document. Raises ConfigError listing every problem.

    References to pools and teams are checked by `allocation.apply` against the database plus
    this file, since a file may refer to names defined by an earlier one.
    """
    data, pos = _load(text, filename)
    chk = _Checker(pos)
    cfg = Config()
    if not isinstance(data, dict):
        raise ConfigError([f"{filename}: the top level must be a mapping of {sorted(TOP_KEYS)}"])
    for key in data:
        if key not in TOP_KEYS:
            chk.error((key,), f"unknown key '{key}' (allowed: {', '.join(sorted(TOP_KEYS))})")

    for section, check in _SECTIONS:
        seen: set[Any] = set()
        for path, item in chk.entries(data, section):
            check(chk, path, item, seen, cfg)
    _check_scheduler(chk, data.get("scheduler"), cfg)

    if chk.errors:
        raise ConfigError(chk.errors)
    return cfg


def _check_pool(chk: _Checker, path: tuple[Any, ...], item: dict[str, Any], seen: set[Any], cfg: Config) -> None:
    if not chk.keys(path, item, {"name", "description", "share_across_teams"}, {"name"}):
        return
    name = chk.name((*path, "name"), item["name"], "pool name")
    desc = item.get("description", "")
    share = chk.boolean((*path, "share_across_teams"), item.get("share_across_teams", False),
                        "share_across_teams")
    if not isinstance(desc, str):
        chk.error((*path, "description"), "description must be a string")
    elif name and share is not None:
        chk.unique(path, seen, name, "pool")
        cfg.pools.append(PoolSpec(name, desc, share))


def _check_team(chk: _Checker, path: tuple[Any, ...], item: dict[str, Any], seen: set[Any], cfg: Config) -> None:
    if not chk.keys(path, item, {"name", "weight", "members"}, {"name"}):
        return
    name = chk.name((*path, "name"), item["name"], "team name")
    weight = chk.number((*path, "weight"), item.get("weight", 1), "weight")
    members = item.get("members", [])
    if not isinstance(members, list) or not all(isinstance(m, str) and m for m in members):
        chk.error((*path, "members"), "members must be a list of user names")
        members = None
    if name and weight is not None and members is not None:
        chk.unique(path, seen, name, "team")
        cfg.teams.append(TeamSpec(name, weight, tuple(members)))


def _check_quota(chk: _Checker, path: tuple[Any, ...], item: dict[str, Any], seen: set[Any], cfg: Config) -> None:
    if not chk.keys(path, item, {"team", "pool", "guaranteed", "limit"}, {"team", "pool"}):
        return
    team = chk.name((*path, "team"), item["team"], "team")
    pool = chk.name((*path, "pool"), item["pool"], "pool")
    guaranteed = chk.integer((*path, "guaranteed"), item.get("guaranteed", 0), "guaranteed")
    limit = chk.integer((*path, "limit"), item.get("limit"), "limit", nullable=True)
    if guaranteed is not None and limit is not None and limit < guaranteed:
        chk.error((*path, "limit"), f"limit {limit} is below guaranteed {guaranteed}")
    elif team and pool and guaranteed is not None and (limit is not None or item.get("limit") is None):
        chk.unique(path, seen, (team, pool), "quota for team/pool")
        cfg.quotas.append(QuotaSpec(team, pool, guaranteed, limit))


def _check_priority_class(chk: _Checker, path: tuple[Any, ...], item: dict[str, Any], seen: set[Any],
                          cfg: Config) -> None:
    if not chk.keys(path, item, {"name", "value", "preemptible", "min_runtime_s", "grace_s"}, {"name"}):
        return
    name = chk.name((*path, "name"), item["name"], "priority class name")
    value = item.get("value", 0)
    if isinstance(value, bool) or not isinstance(value, int):
        chk.error((*path, "value"), f"value must be an integer, got {value!r}")
        value = None
    preemptible = chk.boolean((*path, "preemptible"), item.get("preemptible", False), "preemptible")
    min_rt = chk.integer((*path, "min_runtime_s"), item.get("min_runtime_s", 0), "min_runtime_s")
    grace = chk.integer((*path, "grace_s"), item.get("grace_s", 30), "grace_s")
    if name and value is not None and preemptible is not None and min_rt is not None and grace is not None:
        chk.unique(path, seen, name, "priority class")
        cfg.priority_classes.append(PriorityClassSpec(name, value, preemptible, min_rt, grace))


def _check_scheduler(chk: _Checker, sched: Any, cfg: Config) -> None:
    if sched is None:
        return
    if not isinstance(sched, dict):
        chk.error(("scheduler",), "scheduler must be a mapping")
        return
    if not chk.keys(("scheduler",), sched, {"fair_share_half_life_hours", "pass_interval_s"}, set()):
        return
    hl = chk.number(("scheduler", "fair_share_half_life_hours"),
                    sched.get("fair_share_half_life_hours", 168), "fair_share_half_life_hours")
    pi = chk.number(("scheduler", "pass_interval_s"), sched.get("pass_interval_s", 10), "pass_interval_s")
    if hl is not None and pi is not None:
        cfg.scheduler = SchedulerSpec(hl, pi)


def _check_source(chk: _Checker, path: tuple[Any, ...], item: dict[str, Any], seen: set[Any],
                  cfg: Config) -> None:
    for key in sorted({"name", "kind", "pool"} - set(item)):
        chk.error(path, f"missing required key '{key}'")
    if not {"name", "kind", "pool"} <= set(item):
        return
    name = chk.name((*path, "name"), item["name"], "source name")
    pool = chk.name((*path, "pool"), item["pool"], "pool")
    try:
        cls = connector_class(str(item["kind"]))
    except AgentError as exc:
        chk.error((*path, "kind"), exc.message)
        return
    allowed = SOURCE_COMMON | set(cls.config_keys)
    if not chk.keys(path, item, allowed, {"name", "kind", "pool"}):
        return
    interval = chk.integer((*path, "interval_s"), item.get("interval_s", 60), "interval_s", minimum=1)
    options = {k: v for k, v in item.items() if k not in SOURCE_COMMON}
    problems = cls.validate_config(options)
    for problem in problems:
        chk.error(path, f"source {item['name']!r}: {problem}")
    if name and pool and interval is not None and not problems:
        chk.unique(path, seen, name, "source")
        cfg.sources.append(SourceSpec(name, str(item["kind"]), pool, interval, options))


# Each list section of the file and the check that turns one entry into its spec, in file order.
_SECTIONS: tuple[tuple[str, Callable[[_Checker, tuple[Any, ...], dict[str, Any], set[Any], Config], None]], ...] = (
    ("pools", _check_pool),
    ("teams", _check_team),
    ("quotas", _check_quota),
    ("priority_classes", _check_priority_class),
    ("sources", _check_source),
)


def load_config_file(path: str | Path) -> Config:
    """Read and validate a configuration file (see parse_config)."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise ConfigError([f"{p}: cannot read: {exc.strerror or exc}"]) from None
    return parse_config(text, str(p))
