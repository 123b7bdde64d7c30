"""`budgets:` and `prices:` of the configuration into rows, and back (allocation.config.apply calls these
in its one transaction). A budget is named by (team, pool, period); its standing columns are the
refresh's (allocation.services.budgets), never the file's."""

from __future__ import annotations

from typing import Any

from allocation.config import Config
from allocation.models import Budget, Price, Team
from inventory.models import Pool


def _key(team: str, pool: str | None, period: str) -> tuple[str, str | None, str]:
    return team, pool, period


def apply_budgets(cfg: Config, teams: dict[str, Team], pools: dict[str, Pool], changes: list[str]) -> bool:
    """Create or update the file's budgets; True when any changed (their standing is then out
    of date: the caller refreshes it). A new limit re-arms the warnings of the period."""
    rows = {_key(b.team.name, b.pool.name if b.pool else None, b.period): b
            for b in Budget.objects.select_related("team", "pool")}
    changed = False
    for spec in cfg.budgets:
        budget = rows.get(_key(spec.team, spec.pool, spec.period))
        if budget is None:
            Budget.objects.create(team=teams[spec.team], pool=pools[spec.pool] if spec.pool else None,
                                  period=spec.period, gpu_hours=spec.gpu_hours, action=spec.action)
            changes.append(f"+ {spec.label}: {spec.gpu_hours:g} GPU-hours, {spec.action}")
            changed = True
            continue
        diffs = [f"{k} {getattr(budget, k)!r} → {v!r}" for k, v in
                 (("gpu_hours", spec.gpu_hours), ("action", spec.action)) if getattr(budget, k) != v]
        if diffs:
            if budget.gpu_hours != spec.gpu_hours:
                budget.warned_pct = 0
            budget.gpu_hours, budget.action = spec.gpu_hours, spec.action
            budget.save()
            changes.append(f"~ {spec.label}: " + ", ".join(diffs))
            changed = True
    return changed


def apply_prices(cfg: Config, changes: list[str]) -> None:
    prices = {p.model.lower(): p for p in Price.objects.all()}
    for spec in cfg.prices:
        price = prices.get(spec.model.lower())
        if price is None:
            Price.objects.create(model=spec.model, per_gpu_hour=spec.per_gpu_hour)
            changes.append(f"+ price {spec.model}: {spec.per_gpu_hour:g} per GPU-hour")
        elif (price.model, price.per_gpu_hour) != (spec.model, spec.per_gpu_hour):
            changes.append(f"~ price {spec.model}: {price.per_gpu_hour:g} → {spec.per_gpu_hour:g} per GPU-hour")
            price.model, price.per_gpu_hour = spec.model, spec.per_gpu_hour
            price.save()


def prune_budgets_and_prices(cfg: Config) -> list[str]:
    """Delete the budgets and prices the file does not name."""
    changes = []
    keep = {_key(b.team, b.pool, b.period) for b in cfg.budgets}
    for budget in Budget.objects.select_related("team", "pool"):
        key = _key(budget.team.name, budget.pool.name if budget.pool else None, budget.period)
        if key not in keep:
            budget.delete()
            changes.append(f"- budget {key[0]}@{key[1] or '*'}/{key[2]}")
    names = {p.model.lower() for p in cfg.prices}
    for price in Price.objects.all():
        if price.model.lower() not in names:
            price.delete()
            changes.append(f"- price {price.model}")
    return changes


def _number(value: float) -> float | int:
    return int(value) if float(value).is_integer() else value


def export_budgets() -> list[dict[str, Any]]:
    out = []
    for b in Budget.objects.select_related("team", "pool"):
        item: dict[str, Any] = {"team": b.team.name}
        if b.pool is not None:
            item["pool"] = b.pool.name
        item.update({"gpu_hours": _number(b.gpu_hours), "period": b.period, "action": b.action})
        out.append(item)
    return out


def export_prices() -> list[dict[str, Any]]:
    return [{"model": p.model, "per_gpu_hour": _number(p.per_gpu_hour)} for p in Price.objects.all()]
