"""The declarative YAML configuration: parse and validate, with file positions in every error.

Pure: no Django, no database. `allocation.config.apply` turns a validated Config into rows. Errors are
collected (not raised one by one) so a user sees every problem of a file at once.

`specs` holds what a file says as plain data, `positions` the YAML reader and the error
checker, `sections` one check per section; this module runs them in file order.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from allocation.config.positions import Checker, load_yaml
from allocation.config.sections import SECTIONS, check_scheduler
from allocation.config.specs import (
    POOL_SCHEDULER_KEYS,
    Config,
    ConfigError,
    PoolSchedulerSpec,
    PoolSpec,
    PriorityClassSpec,
    QuotaSpec,
    SchedulerSpec,
    SourceSpec,
    SsoSpec,
    TeamSpec,
)
from allocation.config.sso import check_sso
from allocation.config.topology import check_topology
from allocation.policy.tree_rules import tree_errors

__all__ = ["POOL_SCHEDULER_KEYS", "TOP_KEYS", "Config", "ConfigError", "PoolSchedulerSpec", "PoolSpec",
           "PriorityClassSpec", "QuotaSpec", "SchedulerSpec", "SourceSpec", "SsoSpec", "TeamSpec", "load_config_file",
           "parse_config"]

TOP_KEYS = {section for section, _ in SECTIONS} | {"scheduler", "sso", "topology"}


def parse_config(text: str, filename: str = "<config>") -> Config:
    """Parse and validate one configuration document. Raises ConfigError listing every problem.

    References to pools and teams are checked by `allocation.config.apply` against the database plus
    this file, since a file may refer to names defined by an earlier one.
    """
    data, pos = load_yaml(text, filename)
    chk = Checker(pos)
    cfg = Config()
    if not isinstance(data, dict):
        raise ConfigError([f"{filename}: the top level must be a mapping of {sorted(TOP_KEYS)}"])
    for key in data:
        if key not in TOP_KEYS:
            chk.error((key,), f"unknown key '{key}' (allowed: {', '.join(sorted(TOP_KEYS))})")

    for section, check in SECTIONS:
        seen: set[Any] = set()
        for path, item in chk.entries(data, section):
            check(chk, path, item, seen, cfg)
    check_scheduler(chk, data.get("scheduler"), cfg)
    check_sso(chk, data.get("sso"), cfg)
    check_topology(chk, data.get("topology"), cfg)
    if not chk.errors:
        check_tree(chk, data, cfg)

    if chk.errors:
        raise ConfigError(chk.errors)
    return cfg


def check_tree(chk: Checker, data: dict[str, Any], cfg: Config) -> None:
    """The team tree's rules on the file alone, with positions: a parent the file does not
    define may be in the database (`config_apply` checks it there)."""
    where = {("team", item.get("name")): path for path, item in chk.entries(data, "teams")}
    where.update({("quota", (item.get("team"), item.get("pool"))): path
                  for path, item in chk.entries(data, "quotas")})
    parents = {t.name: t.parent for t in cfg.teams}
    outside = {t.parent for t in cfg.teams if t.parent is not None} - set(parents)
    problems = tree_errors({**dict.fromkeys(outside), **parents}, {t.name for t in cfg.teams if t.members},
                           {(q.team, q.pool): q.guaranteed for q in cfg.quotas})
    for problem in problems:
        kind = "quota" if problem.key == "guaranteed" else "team"
        path = where.get((kind, problem.subject))
        chk.error((*path, problem.key) if path is not None else ("teams",), problem.message)


def load_config_file(path: str | Path) -> Config:
    """Read and validate a configuration file (see parse_config)."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise ConfigError([f"{p}: cannot read: {exc.strerror or exc}"]) from None
    return parse_config(text, str(p))
