"""The usage page: each team's GPU-hours per day as a chart, the chargeback table (with cost when
prices are set), the teams' budgets, and the same table as a CSV download. Both views ask
allocation.economy.chargeback, as the API and `manage.py usage` do."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone

from allocation.economy.chargeback import UsageQuery, chargeback, chargeback_by_day, report_csv, report_table
from allocation.selectors import team_list
from allocation.services.budgets import budget_statuses
from core.errors import DomainError
from frontend.access import login_required
from frontend.forms import UsageForm
from inventory.models import Pool

# The table's column titles in words (the CSV keeps the API's keys, for spreadsheets and scripts).
COLUMN_TITLES = {"team": "Team", "pool": "Pool", "model": "Model", "user": "User", "day": "Day (UTC)",
                 "gpu_hours": "GPU-hours", "idle_gpu_hours": "Idle GPU-hours", "cost": "Cost",
                 "unpriced_gpu_hours": "Unpriced GPU-hours"}


def _table(headers: list[str], rows: list[list[str]]) -> tuple[list[str], list[list[tuple[str, str]]]]:
    """The report's table as the page shows it: titles in words, numbers with thousands separators."""
    titles = [COLUMN_TITLES.get(h, h.replace("_", " ").capitalize()) for h in headers]
    shown = []
    for row in rows:
        cells = [row[0], *(f"{float(cell):,.2f}" for cell in row[1:])]
        shown.append(list(zip(titles, cells, strict=True)))
    return titles, shown


def _midnight(day: date) -> datetime:
    return datetime.combine(day, time(), tzinfo=UTC)


def _query(request: HttpRequest) -> tuple[UsageForm, UsageQuery | None]:
    """The page's form and, when it is valid, the query it asks (dates as whole UTC days)."""
    teams = list(team_list(user=request.user).values_list("name", flat=True))
    form = UsageForm(request.GET or None, teams=teams, pools=list(Pool.objects.values_list("name", flat=True)))
    if request.GET and not form.is_valid():
        return form, None
    data: dict[str, Any] = form.cleaned_data if request.GET else {}
    today = timezone.now().astimezone(UTC).date()
    since, until = data.get("since") or today.replace(day=1), data.get("until") or today
    return form, UsageQuery(team=data.get("team") or None, pool=data.get("pool") or None,
                            since=_midnight(since), until=_midnight(until) + timedelta(days=1),
                            group_by=data.get("group_by") or "team")


@login_required
def usage(request: HttpRequest) -> HttpResponse:
    form, query = _query(request)
    context: dict[str, Any] = {"form": form}
    status = 200 if query is not None else 400
    if query is not None:
        try:
            days, series = chargeback_by_day(user=request.user, query=query)
            report = chargeback(user=request.user, query=query)
        except DomainError as exc:
            context["error"], status = exc.message, 400
        else:
            headers, rows = _table(*report_table(report))
            teams = team_list(user=request.user) if query.team is None else team_list(user=request.user).filter(
                name=query.team)
            context.update(
                chart={"days": days, "series": series}, report=report, headers=headers, rows=rows,
                budgets=budget_statuses(team_ids=list(teams.values_list("pk", flat=True))),
                csv_url=f"{reverse('frontend:usage-csv')}?{request.GET.urlencode()}")
    return render(request, "frontend/usage.html", context, status=status)


@login_required
def usage_csv(request: HttpRequest) -> HttpResponse:
    """The page's table as CSV (an attachment named after its window)."""
    form, query = _query(request)
    if query is None:
        return HttpResponse("; ".join(f"{k}: {' '.join(str(e) for e in v)}" for k, v in form.errors.items()),
                            status=400, content_type="text/plain")
    try:
        report = chargeback(user=request.user, query=query)
    except DomainError as exc:
        return HttpResponse(exc.message, status=400 if exc.status < 500 else exc.status, content_type="text/plain")
    response = HttpResponse(report_csv(report), content_type="text/csv; charset=utf-8")
    name = f"gpupool-usage-{report.since:%Y%m%d}-{report.until:%Y%m%d}-by-{report.group_by}.csv"
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    return response
