"""The chargeback report as callers ask for it: names and times checked, the caller's scope
applied (members see their teams, pool admins all), and the result as JSON, CSV or a text table.
The API, `manage.py usage` and the dashboard's usage page all call `chargeback`."""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.utils import timezone

from allocation.economy.usage import GROUP_BY, MAX_DAYS, UsageReport, usage_by_team_and_day, usage_report
from allocation.economy.usage_tree import by_department, team_subtree_ids
from allocation.models import Team
from allocation.policy.metering import period_start
from core.errors import DomainError, Forbidden
from core.roles import is_pool_admin
from inventory.models import Pool


@dataclass(frozen=True)
class UsageQuery:
    """What a caller asks: a team and pool (None: all it may see), a window (None: from the start
    of this month until now) and a grouping."""

    team: str | None = None
    pool: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    group_by: str = "team"


def _bad(field: str, message: str, code: str = "invalid") -> DomainError:
    return DomainError(f"{field}: {message}", code=code, details={field: [message]})


def _window(query: UsageQuery, now: datetime, *, by_day: bool) -> tuple[datetime, datetime]:
    until = query.until or now
    since = query.since or period_start("month", min(until, now))
    if since >= until:
        raise _bad("since", f"must be before until ({until.isoformat()})", "invalid_window")
    if by_day and until - since > timedelta(days=MAX_DAYS):
        raise _bad("until", f"a report by day covers at most {MAX_DAYS} days", "window_too_long")
    return since, until


def _scope(user: Any, team: str | None, pool: str | None) -> tuple[list[int] | None, int | None]:
    """(team ids the report covers: None for all, pool id or None)."""
    admin = is_pool_admin(user)
    team_ids: list[int] | None = None
    if team:
        row = Team.objects.filter(name=team).values_list("pk", flat=True).first()
        if row is None:
            raise _bad("team", f"team {team!r} does not exist", "unknown_team")
        if not admin and not Team.members.through.objects.filter(team_id=row, user_id=user.pk).exists():
            raise Forbidden(f"you are not a member of team {team!r}", code="not_a_member")
        team_ids = team_subtree_ids(row)  # a department: with every team below it
    elif not admin:
        team_ids = list(Team.objects.filter(members=user.pk).values_list("pk", flat=True))
    pool_id = None
    if pool:
        pool_id = Pool.objects.filter(name=pool).values_list("pk", flat=True).first()
        if pool_id is None:
            raise _bad("pool", f"pool {pool!r} does not exist", "unknown_pool")
    return team_ids, pool_id


def chargeback(*, user: Any, query: UsageQuery, now: datetime | None = None) -> UsageReport:
    """The report `query` asks for, within what `user` may see. DomainError (400) for an unknown
    team or pool, a bad grouping or window; Forbidden (403) for a team the user is not in."""
    if query.group_by not in GROUP_BY:
        raise _bad("group_by", f"must be one of {', '.join(GROUP_BY)}, got {query.group_by!r}")
    now = now or timezone.now()
    since, until = _window(query, now, by_day=query.group_by == "day")
    team_ids, pool_id = _scope(user, query.team, query.pool)
    if query.group_by == "department":  # the teams' rows, regrouped up the tree
        return by_department(usage_report(since=since, until=until, group_by="team", team_ids=team_ids,
                                          pool_id=pool_id, now=now))
    return usage_report(since=since, until=until, group_by=query.group_by, team_ids=team_ids,
                        pool_id=pool_id, now=now)


def chargeback_by_day(*, user: Any, query: UsageQuery, now: datetime | None = None,
                      ) -> tuple[list[str], dict[str, list[float]]]:
    """The days of the query's window and each visible team's GPU-hours per day (the dashboard's
    chart); the same checks and scope as `chargeback`, the window at most MAX_DAYS days."""
    now = now or timezone.now()
    since, until = _window(query, now, by_day=True)
    team_ids, pool_id = _scope(user, query.team, query.pool)
    return usage_by_team_and_day(since=since, until=until, team_ids=team_ids, pool_id=pool_id, now=now)


def report_json(report: UsageReport) -> dict[str, Any]:
    rows = []
    for row in report.rows:
        item: dict[str, Any] = {report.group_by: row.key, "gpu_hours": row.gpu_hours,
                                "idle_gpu_hours": row.idle_gpu_hours}
        if report.priced:
            item["cost"] = row.cost
            item["unpriced_gpu_hours"] = row.unpriced_gpu_hours
        rows.append(item)
    total: dict[str, Any] = {"gpu_hours": round(report.total_gpu_hours, 6),
                             "idle_gpu_hours": round(report.total_idle_gpu_hours, 6)}
    if report.priced:
        total["cost"] = round(report.total_cost or 0.0, 6)
    return {"since": report.since.isoformat(), "until": report.until.isoformat(), "group_by": report.group_by,
            "rows": rows, "total": total}


def report_table(report: UsageReport) -> tuple[list[str], list[list[str]]]:
    """Headers and rows as text (GPU-hours to 2 decimals, cost to 2)."""
    headers = [report.group_by, "gpu_hours", "idle_gpu_hours"]
    headers += ["cost", "unpriced_gpu_hours"] if report.priced else []
    rows = []
    for row in report.rows:
        cells = [row.key, f"{row.gpu_hours:.2f}", f"{row.idle_gpu_hours:.2f}"]
        if report.priced:
            cells += [f"{row.cost or 0.0:.2f}", f"{row.unpriced_gpu_hours or 0.0:.2f}"]
        rows.append(cells)
    return headers, rows


def report_csv(report: UsageReport) -> str:
    """One line per group, full precision: for spreadsheets."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([report.group_by, "gpu_hours", "idle_gpu_hours"]
                    + (["cost", "unpriced_gpu_hours"] if report.priced else []))
    for row in report.rows:
        writer.writerow([row.key, row.gpu_hours, row.idle_gpu_hours]
                        + ([row.cost, row.unpriced_gpu_hours] if report.priced else []))
    return out.getvalue()


def report_text(report: UsageReport) -> str:
    headers, rows = report_table(report)
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))]
    lines += ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))
              for r in rows]
    total = f"total {report.total_gpu_hours:.2f} GPU-hours ({report.total_idle_gpu_hours:.2f} idle)"
    if report.priced:
        total += f", cost {report.total_cost or 0.0:.2f}"
    since, until = report.since.astimezone(UTC), report.until.astimezone(UTC)
    return "\n".join([*lines, total, f"from {since:%Y-%m-%d %H:%M} to {until:%Y-%m-%d %H:%M} UTC"])
