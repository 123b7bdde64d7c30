"""GPU-hour budgets: how much of a budget is used now, which thresholds are due a warning, and
what a spent budget does to a new lease. Pure: no Django, no I/O.

A budget's standing is a figure the database keeps (allocation.services.budgets refreshes it
every minute): GPU-hours used in the period as of a moment, and the GPU-equivalents the team held
then. Between refreshes the held GPUs keep adding hours at that rate, so the estimate now is
exact while nothing is granted or ended, and the next refresh corrects it. A period that has
rolled over since the figure starts again from the held GPUs alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from allocation.policy.metering import period_end, period_start

THRESHOLDS = (80, 100)  # percent of the budget at which the team is warned, once per period each
WARN, BLOCK_NEW, LOWER_PRIORITY = "warn", "block_new", "lower_priority"
ACTIONS = (WARN, BLOCK_NEW, LOWER_PRIORITY)


@dataclass(frozen=True)
class BudgetView:
    """A budget and its stored standing (`as_of` None: never measured, read as nothing used)."""

    team: str
    pool: str | None  # None: all pools
    gpu_hours: float
    period: str
    action: str = WARN
    period_start: datetime | None = None
    used_gpu_hours: float = 0.0
    held_gpu_equiv: float = 0.0
    as_of: datetime | None = None
    warned_pct: int = 0
    key: int = 0  # the row's id, to name it back


@dataclass(frozen=True)
class BudgetStatus:
    budget: BudgetView
    used_gpu_hours: float
    period_start: datetime
    resets_at: datetime

    @property
    def pct(self) -> float:
        return 100.0 * self.used_gpu_hours / self.budget.gpu_hours

    @property
    def exhausted(self) -> bool:
        return self.used_gpu_hours >= self.budget.gpu_hours

    def describe(self) -> str:
        where = f"pool {self.budget.pool}" if self.budget.pool else "all pools"
        return (f"team {self.budget.team} used {self.used_gpu_hours:.1f} of {self.budget.gpu_hours:g} "
                f"GPU-hours of its {self.budget.period}ly budget in {where} ({self.pct:.0f}%); "
                f"it resets at {self.resets_at:%Y-%m-%d %H:%M} UTC")


def budget_status(budget: BudgetView, now: datetime) -> BudgetStatus:
    """The budget's use in the period holding `now`, estimated from its stored standing."""
    start = period_start(budget.period, now)
    as_of = budget.as_of
    if as_of is None:
        used = 0.0
    elif budget.period_start == start:
        used = budget.used_gpu_hours + budget.held_gpu_equiv * max(0.0, (now - as_of).total_seconds()) / 3600
    else:  # the period rolled over since: only what was held since it began
        used = budget.held_gpu_equiv * max(0.0, (now - max(start, as_of)).total_seconds()) / 3600
    return BudgetStatus(budget, used, start, period_end(budget.period, now))


def threshold_due(status: BudgetStatus, warned_pct: int) -> int | None:
    """The highest threshold the budget has reached and not yet been warned of in this period
    (`warned_pct`: the highest already warned of in it); None when none is due. Reaching 100%
    at once warns of 100% only: one warning, the one that matters."""
    due = [t for t in THRESHOLDS if status.pct >= t and t > warned_pct]
    return max(due) if due else None


@dataclass(frozen=True)
class Admission:
    """What the budgets say of a new lease: refused (`blocked_by`), demoted to the lowest
    priority class (`demoted_by`), or neither."""

    blocked_by: BudgetStatus | None = None
    demoted_by: BudgetStatus | None = None


def admission(budgets: Sequence[BudgetView], pool: str, now: datetime) -> Admission:
    """Judge a new lease of the budgets' team in `pool`: budgets of that pool and of all pools
    apply. A spent `block_new` budget refuses it (the one that resets last is named: it is the
    one to wait for); otherwise a spent `lower_priority` budget demotes it."""
    spent = [s for s in (budget_status(b, now) for b in budgets if b.pool in (None, pool)) if s.exhausted]
    blocking = [s for s in spent if s.budget.action == BLOCK_NEW]
    if blocking:
        return Admission(blocked_by=max(blocking, key=lambda s: (s.resets_at, s.pct)))
    lowering = [s for s in spent if s.budget.action == LOWER_PRIORITY]
    if lowering:
        return Admission(demoted_by=max(lowering, key=lambda s: (s.resets_at, s.pct)))
    return Admission()
