"""`budgets:` and `prices:` sections: GPU-hour budgets per team (and pool) and calendar period,
and what a GPU-hour of a model costs."""

from __future__ import annotations

from typing import Any

from allocation.config.positions import Checker
from allocation.config.specs import BudgetSpec, Config, PriceSpec
from allocation.policy.budgets import ACTIONS, WARN
from allocation.policy.metering import PERIODS

BUDGET_KEYS = {"team", "pool", "gpu_hours", "period", "action"}


def _choice(chk: Checker, path: tuple[Any, ...], value: Any, what: str, allowed: tuple[str, ...]) -> str | None:
    if value not in allowed:
        chk.error(path, f"{what} must be one of {', '.join(allowed)}, got {value!r}")
        return None
    return str(value)


def check_budget(chk: Checker, path: tuple[Any, ...], item: dict[str, Any], seen: set[Any], cfg: Config) -> None:
    if not chk.keys(path, item, BUDGET_KEYS, {"team", "gpu_hours", "period"}):
        return
    errors = len(chk.errors)
    team = chk.name((*path, "team"), item["team"], "team")
    pool = None if item.get("pool") is None else chk.name((*path, "pool"), item["pool"], "pool")
    hours = chk.number((*path, "gpu_hours"), item["gpu_hours"], "gpu_hours")
    period = _choice(chk, (*path, "period"), item["period"], "period", PERIODS)
    action = _choice(chk, (*path, "action"), item.get("action", WARN), "action", ACTIONS)
    if len(chk.errors) == errors and team and hours is not None and period and action:
        spec = BudgetSpec(team, pool, hours, period, action)
        chk.unique(path, seen, (team, pool, period), "budget for team/pool/period")
        cfg.budgets.append(spec)


def check_price(chk: Checker, path: tuple[Any, ...], item: dict[str, Any], seen: set[Any], cfg: Config) -> None:
    if not chk.keys(path, item, {"model", "per_gpu_hour"}, {"model", "per_gpu_hour"}):
        return
    model, price = item["model"], item["per_gpu_hour"]
    ok = True
    if not isinstance(model, str) or not model.strip() or len(model) > 128:
        chk.error((*path, "model"), f"model must be a non-empty string (at most 128), got {model!r}")
        ok = False
    value = chk.number((*path, "per_gpu_hour"), price, "per_gpu_hour", positive=False)
    if value is not None and value < 0:
        chk.error((*path, "per_gpu_hour"), f"per_gpu_hour must be ≥ 0, got {value:g}")
        value = None
    if ok and value is not None:
        chk.unique(path, seen, model.strip().lower(), "price for model")
        cfg.prices.append(PriceSpec(model.strip(), value))
