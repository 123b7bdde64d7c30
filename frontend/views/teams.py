"""The role homes: the teams list, a team's page (its member's first page) and the pools list.

A team's page puts in one place what a team lead used to gather from five: the team's quota and
use per pool, its leases and queue (with the reasons and estimated starts), members, budgets and
reservations, its history charts, and the renew/release/cancel buttons, which post to the lease
and reservation views (the services decide who may). Its live part polls every 5 s like the
other pages."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.utils import timezone

from allocation.models import Team
from allocation.selectors import team_list
from frontend.access import htmx_target, login_required
from frontend.forms import RenewForm
from frontend.selectors import pool_overview
from frontend.team_home import department, pool_teams, team_home, team_summaries
from frontend.views.history import RANGE_LABELS, history_range
from history.choices import RANGES
from history.selectors import team_history, window_for


@login_required
def teams(request: HttpRequest) -> HttpResponse:
    """The teams the user may see, with quota and use per pool, members and queue."""
    context = {"teams": team_summaries(user=request.user, teams=team_list(user=request.user))}
    if htmx_target(request) == "teams-live":
        return render(request, "frontend/partials/teams_live.html", context)
    return render(request, "frontend/teams.html", context)


def team_page_response(request: HttpRequest, team: Team) -> HttpResponse:
    """A team's page (or its live part, for the poll); also the overview of a member."""
    now = timezone.now()
    context: dict[str, Any] = {"home": team_home(user=request.user, team=team, now=now), "team": team,
                               "department": department(user=request.user, team=team),
                               "now": now, "renew_form": RenewForm(),
                               "live_url": reverse("frontend:team", kwargs={"name": team.name})}
    if htmx_target(request) == "team-live":
        return render(request, "frontend/partials/team_live.html", context)
    other = team_list(user=request.user).exclude(pk=team.pk).order_by("name").values_list("name", flat=True)
    context.update(
        history=team_history(team, window_for(history_range(request))), range=history_range(request),
        ranges=[(name, RANGE_LABELS[name]) for name in RANGES], other_teams=list(other[:20]),
        api_url=reverse("history-team", kwargs={"name": team.name}))
    return render(request, "frontend/team.html", context)


@login_required
def team_page(request: HttpRequest, name: str) -> HttpResponse:
    """One team: a member sees their teams, an admin every team; another team is a 404, as in the API."""
    return team_page_response(request, get_object_or_404(team_list(user=request.user), name=name))


@login_required
def pools(request: HttpRequest) -> HttpResponse:
    """Every pool: GPUs by state, the queue, and the teams using it."""
    now = timezone.now()
    by_pool = pool_teams()
    context = {"rows": [(s, by_pool.get(s.pool.pk, [])) for s in pool_overview(now=now)], "now": now}
    if htmx_target(request) == "pools-live":
        return render(request, "frontend/partials/pools_live.html", context)
    return render(request, "frontend/pools.html", context)
