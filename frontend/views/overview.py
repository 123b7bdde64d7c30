"""The overview page: per pool capacity, allocation, queue, GPU states and utilisation."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone

from allocation.selectors import lease_list
from frontend.access import htmx_target, login_required
from frontend.selectors import pool_overview


@login_required
def overview(request: HttpRequest) -> HttpResponse:
    now = timezone.now()
    context = {
        "pools": pool_overview(now=now),
        "now": now,
        "my_active": lease_list(user=request.user).filter(state__in=["pending", "granted", "bound"])[:8],
    }
    if htmx_target(request) == "overview-live":
        return render(request, "frontend/partials/overview_live.html", context)
    return render(request, "frontend/overview.html", context)
