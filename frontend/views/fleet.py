"""Fleet: hosts × GPUs with state, telemetry and MIG slices; cordon/drain/uncordon for admins."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.shortcuts import get_object_or_404, redirect, render

from allocation.services.admin import host_admin_action
from core.errors import DomainError
from frontend.access import admin_required, htmx_target, is_htmx, login_required
from frontend.fleet_page import fleet_page, fleet_spec
from frontend.list_page import list_context
from frontend.selectors import fleet as fleet_rows
from frontend.selectors import pool_names
from inventory.models import Host

VERBS = {"cordon": "cordoned", "drain": "drained", "uncordon": "uncordoned"}


@login_required
def fleet(request: HttpRequest) -> HttpResponse:
    """Hosts filtered, sorted and paginated in the database; the live part polls the same query."""
    query = fleet_spec(pools=pool_names()).parse(request.GET)
    page = fleet_page(user=request.user, query=query)
    context = list_context(page, hosts=page.rows, legend=page.counts, pool=query.get("pool"))
    if htmx_target(request) == "fleet-live":
        return render(request, "frontend/partials/fleet_live.html", context)
    return render(request, "frontend/fleet.html", context)


@admin_required
def host_action(request: HttpRequest, host_id: int, verb: str) -> HttpResponse:
    """POST only (CSRF-checked): cordon, drain or uncordon one host, audited by the service."""
    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    host = get_object_or_404(Host, pk=host_id)
    try:
        host = host_admin_action(host=host, verb=verb, actor=request.user.get_username())
        note, ok = f"Host {host.name} {VERBS[verb]}.", True
    except DomainError as exc:
        note, ok = f"Host {host.name}: {exc.message}", False
    if is_htmx(request):
        rows = fleet_rows(user=request.user, host_ids=[host.pk], pool=request.POST.get("pool", ""))
        return render(request, "frontend/partials/host_card.html",
                      {"row": rows[0] if rows else None, "note": note, "note_ok": ok,
                       "pool": request.POST.get("pool", "")}, status=200 if ok else 422)
    (messages.success if ok else messages.error)(request, note)
    return redirect("frontend:fleet")
