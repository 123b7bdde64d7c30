"""One check per list section of the file (and the `scheduler:` mapping): each turns an entry into
its spec in the `Config`, or records what is wrong with it. A new section is a new check here (or a
module of its own) and a line in `allocation.config.SECTIONS`."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from agents.base import AgentError
from agents.registry import connector_class
from allocation.config.budgets import check_budget, check_price
from allocation.config.idle import check_idle_reclaim
from allocation.config.notifications import check_notification
from allocation.config.positions import Checker
from allocation.config.queue_caps import check_queue_caps
from allocation.config.specs import (
    POOL_SCHEDULER_KEYS,
    Config,
    PoolSchedulerSpec,
    PoolSpec,
    PriorityClassSpec,
    QuotaSpec,
    SchedulerSpec,
    SourceSpec,
    TeamSpec,
)

SOURCE_COMMON = {"name", "kind", "pool", "interval_s"}


def _check_pool(chk: Checker, path: tuple[Any, ...], item: dict[str, Any], seen: set[Any], cfg: Config) -> None:
    if not chk.keys(path, item, {"name", "description", "scheduler", "share_across_teams", "idle_reclaim",
                                 "queue_caps"}, {"name"}):
        return
    errors = len(chk.errors)
    name = chk.name((*path, "name"), item["name"], "pool name")
    desc = item.get("description", "")
    sched = _pool_scheduler(chk, (*path, "scheduler"), item.get("scheduler"))
    share = chk.boolean((*path, "share_across_teams"), item.get("share_across_teams", False),
                        "share_across_teams")
    _, idle = check_idle_reclaim(chk, (*path, "idle_reclaim"), item.get("idle_reclaim"))
    _, caps = check_queue_caps(chk, (*path, "queue_caps"), item.get("queue_caps"))
    if not isinstance(desc, str):
        chk.error((*path, "description"), "description must be a string")
    elif name and share is not None and len(chk.errors) == errors:
        chk.unique(path, seen, name, "pool")
        cfg.pools.append(PoolSpec(name, desc, sched, share, idle, caps))


def _pool_scheduler(chk: Checker, path: tuple[Any, ...], value: Any) -> PoolSchedulerSpec | None:
    """`pools[].scheduler`, or None when absent (errors are recorded in `chk`)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        chk.error(path, "scheduler must be a mapping of " + ", ".join(POOL_SCHEDULER_KEYS))
        return None
    if not chk.keys(path, value, set(POOL_SCHEDULER_KEYS), set()):
        return None
    return PoolSchedulerSpec(*_fair_share_preemption(chk, path, value))


def _fair_share_preemption(chk: Checker, path: tuple[Any, ...],
                           values: Mapping[str, Any]) -> tuple[bool | None, float | None]:
    """The fair-share preemption keys of a scheduler mapping (None: absent or invalid)."""
    on = interval = None
    if "fair_share_preemption" in values:
        on = chk.boolean((*path, "fair_share_preemption"), values["fair_share_preemption"],
                         "fair_share_preemption")
    if "fair_share_preemption_interval_s" in values:
        interval = chk.number((*path, "fair_share_preemption_interval_s"),
                              values["fair_share_preemption_interval_s"],
                              "fair_share_preemption_interval_s", positive=False)
        if interval is not None and interval < 0:
            chk.error((*path, "fair_share_preemption_interval_s"),
                      f"fair_share_preemption_interval_s must be ≥ 0, got {interval:g}")
            interval = None
    return on, interval


def _check_team(chk: Checker, path: tuple[Any, ...], item: dict[str, Any], seen: set[Any], cfg: Config) -> None:
    if not chk.keys(path, item, {"name", "weight", "members", "parent"}, {"name"}):
        return
    name = chk.name((*path, "name"), item["name"], "team name")
    parent = item.get("parent")
    if parent is not None and chk.name((*path, "parent"), parent, "parent") is None:
        return
    weight = chk.number((*path, "weight"), item.get("weight", 1), "weight")
    members = item.get("members", [])
    if not isinstance(members, list) or not all(isinstance(m, str) and m for m in members):
        chk.error((*path, "members"), "members must be a list of user names")
        members = None
    if name and weight is not None and members is not None:
        chk.unique(path, seen, name, "team")
        cfg.teams.append(TeamSpec(name, weight, tuple(members), parent))


def _check_quota(chk: Checker, path: tuple[Any, ...], item: dict[str, Any], seen: set[Any], cfg: Config) -> None:
    if not chk.keys(path, item, {"team", "pool", "guaranteed", "limit", "lending_limit"}, {"team", "pool"}):
        return
    team = chk.name((*path, "team"), item["team"], "team")
    pool = chk.name((*path, "pool"), item["pool"], "pool")
    guaranteed = chk.integer((*path, "guaranteed"), item.get("guaranteed", 0), "guaranteed")
    limit = chk.integer((*path, "limit"), item.get("limit"), "limit", nullable=True)
    lending = chk.integer((*path, "lending_limit"), item.get("lending_limit"), "lending_limit",
                          nullable=True)
    bad = (limit is None and item.get("limit") is not None) or (
        lending is None and item.get("lending_limit") is not None)
    if guaranteed is not None and limit is not None and limit < guaranteed:
        chk.error((*path, "limit"), f"limit {limit} is below guaranteed {guaranteed}")
    elif guaranteed is not None and lending is not None and lending > guaranteed:
        chk.error((*path, "lending_limit"), f"lending_limit {lending} is above guaranteed "
                                            f"{guaranteed}: a team lends at most its guarantee")
    elif team and pool and guaranteed is not None and not bad:
        chk.unique(path, seen, (team, pool), "quota for team/pool")
        cfg.quotas.append(QuotaSpec(team, pool, guaranteed, limit, lending))


def _check_priority_class(chk: Checker, path: tuple[Any, ...], item: dict[str, Any], seen: set[Any],
                          cfg: Config) -> None:
    if not chk.keys(path, item, {"name", "value", "preemptible", "min_runtime_s", "grace_s", "idle_reclaim"},
                    {"name"}):
        return
    name = chk.name((*path, "name"), item["name"], "priority class name")
    value = item.get("value", 0)
    if isinstance(value, bool) or not isinstance(value, int):
        chk.error((*path, "value"), f"value must be an integer, got {value!r}")
        value = None
    preemptible = chk.boolean((*path, "preemptible"), item.get("preemptible", False), "preemptible")
    min_rt = chk.integer((*path, "min_runtime_s"), item.get("min_runtime_s", 0), "min_runtime_s")
    grace = chk.integer((*path, "grace_s"), item.get("grace_s", 30), "grace_s")
    idle_ok, idle = check_idle_reclaim(chk, (*path, "idle_reclaim"), item.get("idle_reclaim"))
    if name and value is not None and preemptible is not None and min_rt is not None and grace is not None \
            and idle_ok:
        chk.unique(path, seen, name, "priority class")
        cfg.priority_classes.append(PriorityClassSpec(name, value, preemptible, min_rt, grace, idle))


def check_scheduler(chk: Checker, sched: Any, cfg: Config) -> None:
    if sched is None:
        return
    if not isinstance(sched, dict):
        chk.error(("scheduler",), "scheduler must be a mapping")
        return
    allowed = {"fair_share_half_life_hours", "pass_interval_s", *POOL_SCHEDULER_KEYS}
    if not chk.keys(("scheduler",), sched, allowed, set()):
        return
    errors = len(chk.errors)
    hl = chk.number(("scheduler", "fair_share_half_life_hours"),
                    sched.get("fair_share_half_life_hours", 168), "fair_share_half_life_hours")
    pi = chk.number(("scheduler", "pass_interval_s"), sched.get("pass_interval_s", 10), "pass_interval_s")
    on, interval = _fair_share_preemption(chk, ("scheduler",), sched)
    if hl is not None and pi is not None and len(chk.errors) == errors:
        default = SchedulerSpec()
        cfg.scheduler = SchedulerSpec(hl, pi, default.fair_share_preemption if on is None else on,
                                      default.fair_share_preemption_interval_s if interval is None else interval)


def _check_source(chk: Checker, path: tuple[Any, ...], item: dict[str, Any], seen: set[Any],
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
Check = Callable[[Checker, tuple[Any, ...], dict[str, Any], set[Any], Config], None]
SECTIONS: tuple[tuple[str, Check], ...] = (
    ("pools", _check_pool),
    ("teams", _check_team),
    ("quotas", _check_quota),
    ("priority_classes", _check_priority_class),
    ("sources", _check_source),
    ("budgets", check_budget),
    ("prices", check_price),
    ("notifications", check_notification),
)
