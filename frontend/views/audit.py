"""The audit log page: who did what and why, filtered and paged in the database."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone

from allocation.selectors import team_list
from frontend.access import htmx_target, login_required
from frontend.audit_page import audit_page, audit_spec
from frontend.list_page import list_context


@login_required
def audit(request: HttpRequest) -> HttpResponse:
    """Admins see every event; members the events of their teams' leases (as in the API)."""
    teams = list(team_list(user=request.user).order_by("name").values_list("name", flat=True))
    query = audit_spec(teams=teams).parse(request.GET)
    page = audit_page(user=request.user, query=query, now=timezone.now())
    context = list_context(page, events=page.rows)
    if htmx_target(request) == "audit-live":
        return render(request, "frontend/partials/audit_live.html", context)
    return render(request, "frontend/audit.html", context)
