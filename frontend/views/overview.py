"""The overview, which adapts to the role: a pool admin (or a user in no team) gets the fleet
summary — per pool capacity, allocation, queue, GPU states and utilisation; a member lands on
their team's page (views/teams.py), where their leases and queue are."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone

from allocation.selectors import lease_list
from core.roles import is_pool_admin
from frontend.access import htmx_target, login_required
from frontend.selectors import pool_overview
from frontend.team_home import member_home_team
from frontend.views.teams import team_page_response


@login_required
def overview(request: HttpRequest) -> HttpResponse:
    if not is_pool_admin(request.user) and htmx_target(request) != "overview-live":
        team = member_home_team(request.user)
        if team is not None:
            return team_page_response(request, team)
    now = timezone.now()
    context = {
        "pools": pool_overview(now=now),
        "now": now,
        "my_active": lease_list(user=request.user).filter(state__in=["pending", "granted", "bound"])[:8],
    }
    if htmx_target(request) == "overview-live":
        return render(request, "frontend/partials/overview_live.html", context)
    return render(request, "frontend/overview.html", context)
