"""Fleet: hosts × GPUs with state, telemetry and MIG slices, as cards, a compact table or a heatmap
of every GPU; one host's page; cordon/drain/uncordon for admins (bulk in `fleet_bulk`)."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.gzip import gzip_page

from allocation.services.admin import host_admin_action
from core.errors import DomainError
from frontend import fleet_heatmap, fleet_live
from frontend.access import admin_required, htmx_target, is_htmx, login_required
from frontend.fleet_page import fleet_page, fleet_spec, matching_hosts
from frontend.list_page import list_context
from frontend.selectors import fleet as fleet_rows
from frontend.selectors import pool_names
from inventory.models import Host

VERBS = {"cordon": "cordoned", "drain": "drained", "uncordon": "uncordoned"}
TABLE_PER_PAGE = 100  # 200 cost twice a card page (every GPU is still built for the row's strip)
LIVE = "frontend/partials/fleet_live.html"


def _list(request: HttpRequest, *, view: str, per_page: int, row: str) -> HttpResponse:
    """Cards or table: one page of hosts filtered, sorted and paginated in the database. The live
    part polls the same query with its version and gets only what changed (`fleet_live`); an
    HTMX request for the live part without a version gets it whole."""
    query = fleet_spec(pools=pool_names(), per_page=per_page).parse(request.GET)
    page = fleet_page(user=request.user, query=query)
    context = list_context(page, hosts=page.rows, legend=page.counts, pool=query.get("pool"), view=view,
                           tab_qs=query.query_string(page=1))
    target = htmx_target(request)
    if target == "fleet-poll":
        return fleet_live.live_diff(request, page, context, full=LIVE, row=row)
    state = fleet_live.live_state(page)
    fleet_live.remember(request.user, state)
    context["live_version"] = state["version"]
    if target == "fleet-live":
        return render(request, LIVE, context)
    return render(request, "frontend/fleet.html", context)


@login_required
def fleet(request: HttpRequest) -> HttpResponse:
    """Host cards, 50 a page."""
    return _list(request, view="cards", per_page=50, row="frontend/partials/host_card.html")


@login_required
def fleet_table(request: HttpRequest) -> HttpResponse:
    """One dense row per host, 100 a page."""
    return _list(request, view="table", per_page=TABLE_PER_PAGE, row="frontend/partials/host_row.html")


@login_required
def fleet_heatmap_page(request: HttpRequest) -> HttpResponse:
    """Every GPU the filters match as one cell of a canvas; the data is `fleet_heatmap_json`."""
    query = fleet_spec(pools=pool_names()).parse(request.GET)
    group = request.GET.get("group", "host")
    return render(request, "frontend/fleet_heatmap.html", {
        "query": query, "list_name": "fleet", "view": "heatmap", "pool": query.get("pool"),
        "group": group if group in fleet_heatmap.GROUPS else "host", "groups": fleet_heatmap.GROUPS,
        "data_qs": query.query_string(page=1), "tab_qs": query.query_string(page=1),
        "total": matching_hosts(query).count()})


@login_required
@gzip_page
def fleet_heatmap_json(request: HttpRequest) -> HttpResponse:
    """The heatmap's payload (`fleet_heatmap.heatmap`). With `since` (a version the page has), only
    the changed cells; the same version again answers 304 (`If-None-Match` works too)."""
    query = fleet_spec(pools=pool_names()).parse(request.GET)
    group = request.GET.get("group", "host")
    if group not in fleet_heatmap.GROUPS:
        return JsonResponse({"code": "invalid_group", "message": f"group must be one of "
                                                                 f"{', '.join(fleet_heatmap.GROUPS)}"}, status=400)
    body = fleet_heatmap.heatmap(user=request.user, query=query, group=group)
    since = request.GET.get("since", "") or request.headers.get("If-None-Match", "").strip('"')
    if since == body["version"]:
        response = HttpResponse(status=304)
    else:
        fleet_heatmap.remember(request.user, body)
        diff = fleet_heatmap.heatmap_diff(request.user, body, since) if since else None
        response = JsonResponse(diff if diff is not None else body, json_dumps_params={"separators": (",", ":")})
    response["ETag"] = f'"{body["version"]}"'
    response["Cache-Control"] = "private, no-cache"
    return response


@login_required
def host_page(request: HttpRequest, host_id: int) -> HttpResponse:
    """One host's card on a page of its own (where a heatmap cell leads, `#gpu-<index>` marking
    the GPU)."""
    host = get_object_or_404(Host, pk=host_id)
    rows = fleet_rows(user=request.user, host_ids=[host.pk])
    context: dict[str, Any] = {"row": rows[0] if rows else None, "host": host}
    return render(request, "frontend/host.html", context)


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
