"""GPU-hour budgets: their standing refreshed from the meter (beat, every minute, and when the
configuration changes them), the 80%/100% warnings, and the judgement of a new lease.

The refresh is safe on any number of workers: the figures it writes are the same whoever writes
them, and each warning is claimed by a conditional UPDATE (its row count says who warns), so a
threshold is warned of once per period however many refreshes run.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from django.db import transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from allocation.audit import audit
from allocation.economy.usage import usage_by_team_and_pool
from allocation.economy.usage_tree import ancestor_ids, team_subtrees
from allocation.models import Budget, PriorityClass, Team
from allocation.notify.record import budget_warning_fact, facts_record
from allocation.policy.budgets import Admission, BudgetStatus, BudgetView, admission, budget_status, threshold_due
from allocation.policy.metering import period_start
from core.db.statements import compiled_values
from core.errors import Forbidden
from inventory.models import Pool

ACTOR = "system:budgets"
_VIEW_FIELDS = ("pk", "team__name", "pool__name", "gpu_hours", "period", "action", "period_start",
                "used_gpu_hours", "held_gpu_equiv", "used_as_of", "warned_pct", "warned_for")


def _view(row: Sequence[Any]) -> BudgetView:
    pk, team, pool, hours, period, action, start, used, held, as_of, warned, warned_for = row
    return BudgetView(team, pool, hours, period, action, start, used, held, as_of,
                      warned if warned_for is not None and warned_for == start else 0, pk)


def budget_views(*, team_ids: Iterable[int] | None = None) -> list[BudgetView]:
    """Every budget (or those of `team_ids`) with its stored standing, in one query."""
    rows = Budget.objects.all() if team_ids is None else Budget.objects.filter(team_id__in=list(team_ids))
    return [_view(r) for r in rows.values_list(*_VIEW_FIELDS)]


def budget_statuses(*, team_ids: Iterable[int] | None = None, now: datetime | None = None) -> list[BudgetStatus]:
    """The budgets' use now (estimated from their standing; see allocation.policy.budgets)."""
    now = now or timezone.now()
    return [budget_status(view, now) for view in budget_views(team_ids=team_ids)]


def budgets_refresh(*, now: datetime | None = None) -> dict[str, int]:
    """Measure every budget's use in its current period from the meter (one query per distinct
    period start: at most three), store it, and warn the teams whose budgets reached 80% or 100%
    for the first time in the period. Returns {"budgets": measured, "warned": warnings given}."""
    now = now or timezone.now()
    budgets = list(Budget.objects.select_related("team", "pool"))
    by_start: dict[datetime, list[Budget]] = defaultdict(list)
    for budget in budgets:
        by_start[period_start(budget.period, now)].append(budget)
    subtrees = team_subtrees()  # a department's budget counts its teams' use
    for start, group in by_start.items():
        usage = usage_by_team_and_pool(start, sorted({t for b in group for t in subtrees[b.team_id]}),
                                       now=now)
        for budget in group:
            below = subtrees[budget.team_id]
            parts = [v for (team, pool), v in usage.items()
                     if team in below and budget.pool_id in (None, pool)]
            budget.period_start, budget.used_as_of = start, now
            budget.used_gpu_hours = sum(hours for hours, _ in parts)
            budget.held_gpu_equiv = sum(held for _, held in parts)
    Budget.objects.bulk_update(budgets, ["period_start", "used_gpu_hours", "held_gpu_equiv", "used_as_of"])
    warned = sum(_warn(b, now) for b in budgets)
    return {"budgets": len(budgets), "warned": warned}


def _warn(budget: Budget, now: datetime) -> bool:
    """Warn of the highest threshold the budget reached and was not warned of in this period;
    True if this call gave the warning."""
    start = budget.period_start
    assert start is not None  # set by the refresh just before
    view = BudgetView(budget.team.name, budget.pool.name if budget.pool else None, budget.gpu_hours,
                      budget.period, budget.action, start, budget.used_gpu_hours, budget.held_gpu_equiv, now)
    status = budget_status(view, now)
    warned = budget.warned_pct if budget.warned_for == start else 0
    due = threshold_due(status, warned)
    if due is None:
        return False
    spent = {"warn": "", "block_new": "; new leases are refused until it resets",
             "lower_priority": "; new leases get the lowest priority class until it resets"}
    tail = spent.get(budget.action, "") if due >= 100 else ""
    message = f"{due}% of budget: {status.describe()}{tail}"
    data = {"team": view.team, "pool": view.pool, "period": view.period, "threshold_pct": due,
            "used_gpu_hours": round(status.used_gpu_hours, 4), "gpu_hours": view.gpu_hours,
            "action": view.action, "resets_at": status.resets_at.isoformat()}
    # The claim, its audit event and its notification commit together: a warning is told once.
    with transaction.atomic():
        claimed = Budget.objects.filter(pk=budget.pk).filter(
            Q(warned_for__isnull=True) | ~Q(warned_for=start) | Q(warned_pct__lt=due)).update(
            warned_pct=due, warned_for=start)
        if not claimed:
            return False  # another refresh warned of it first
        audit(actor=ACTOR, action="budget.warning", obj=budget, message=message, data=data).save()
        facts_record([budget_warning_fact(budget_id=budget.pk, team_id=budget.team_id, pool_id=budget.pool_id,
                                          period_start=start, threshold_pct=due, message=message, data=data,
                                          now=now)])
    return True


def _admission_query(team_id: int, pool_id: int) -> QuerySet[Any]:
    budgets = Budget.objects.filter(team_id=team_id).filter(Q(pool__isnull=True) | Q(pool_id=pool_id))
    return cast("QuerySet[Any]", budgets.order_by().values(*_VIEW_FIELDS))


def budget_admission(*, team_id: int, pool_id: int, pool_name: str, now: datetime | None = None) -> Admission:
    """What the team's budgets say of a new lease in the pool (allocation.policy.budgets.admission),
    from their stored standing: one indexed query, compiled once per process (it is on the
    lease-create path)."""
    rows = compiled_values("budget_admission", _admission_query, team_id=team_id, pool_id=pool_id)
    views = [_view([row[name] for name in _VIEW_FIELDS]) for row in rows]
    return admission(views, pool_name, now or timezone.now())


@dataclass(frozen=True)
class Demotion:
    """A new lease's priority class lowered by a spent `lower_priority` budget, and why."""

    priority_class: PriorityClass
    reason: str


def budget_judge(team: Team, pool: Pool, *, now: datetime | None = None) -> Demotion | None:
    """Judge a new lease of `team` in `pool` by the team's budgets: Forbidden
    (`budget_exhausted`, naming the budget, its use and when it resets) when a spent `block_new`
    budget refuses it; the lowest priority class when a spent `lower_priority` budget demotes it;
    None when they let it be. One query (two when demoting; one more for a team under a
    department: the departments' budgets above it judge too)."""
    above = ancestor_ids(team.pk) if team.parent_id is not None else []
    if above:
        rows = (Budget.objects.filter(team_id__in=[team.pk, *above])
                .filter(Q(pool__isnull=True) | Q(pool_id=pool.pk)).order_by().values_list(*_VIEW_FIELDS))
        verdict = admission([_view(row) for row in rows], pool.name, now or timezone.now())
    else:
        verdict = budget_admission(team_id=team.pk, pool_id=pool.pk, pool_name=pool.name, now=now)
    if verdict.blocked_by is not None:
        status = verdict.blocked_by
        budget = status.budget
        raise Forbidden(f"budget exhausted: {status.describe()}", code="budget_exhausted", details={
            "budget": {"team": budget.team, "pool": budget.pool, "period": budget.period,
                       "gpu_hours": budget.gpu_hours, "action": budget.action},
            "used_gpu_hours": round(status.used_gpu_hours, 4), "gpu_hours": budget.gpu_hours,
            "period_start": status.period_start.isoformat(), "resets_at": status.resets_at.isoformat()})
    if verdict.demoted_by is None:
        return None
    lowest = PriorityClass.objects.order_by("value", "name").only("pk", "name").first()
    if lowest is None:
        return None
    return Demotion(lowest, f"priority lowered to {lowest.name}: {verdict.demoted_by.describe()}")
