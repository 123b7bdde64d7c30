"""Bulk cordon, drain or uncordon (pool admins): the hosts ticked, or every host the fleet's filters
match; previewed like a capacity move, then confirmed with the preview's fingerprint."""

from __future__ import annotations

from collections import Counter
from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from allocation.selectors.capacity_preview import OUTCOMES
from allocation.selectors.host_bulk_preview import TARGET, BulkPreview, hosts_bulk_preview
from allocation.services.host_bulk import hosts_bulk_action
from core.errors import Conflict, DomainError
from frontend.access import admin_required, is_htmx
from frontend.fleet_page import fleet_spec, matching_hosts
from frontend.selectors import pool_names
from inventory.models import Host

PREVIEW = "frontend/partials/fleet_bulk_preview.html"
MAX_HOSTS = 5000  # a selection is a form of ids: far above any fleet we know


def _host_ids(request: HttpRequest) -> list[int]:
    """The hosts asked for: every one the filters sent along match (scope "filter"), or the ids
    ticked; ids that are not numbers or not hosts are dropped."""
    if request.POST.get("scope") == "filter":
        query = fleet_spec(pools=pool_names()).parse(request.POST)
        return list(matching_hosts(query).order_by("name").values_list("pk", flat=True)[:MAX_HOSTS])
    ids = {int(v) for v in request.POST.getlist("hosts")[:MAX_HOSTS] if v.isdigit()}
    return list(Host.objects.filter(pk__in=ids).values_list("pk", flat=True))


def _outcomes(preview: BulkPreview) -> list[tuple[str, str, int]]:
    counts = Counter(i.outcome for i in preview.leases)
    return [(key, label, counts[key]) for key, label in OUTCOMES.items() if counts[key]]


def _answer(request: HttpRequest, status: int = 200, **context: Any) -> HttpResponse:
    if "preview" in context:
        context["counts"] = _outcomes(context["preview"])
    response = render(request, PREVIEW, context, status=status)
    # A refusal belongs in the preview pane, whatever the button aimed at.
    response["HX-Retarget"], response["HX-Reswap"] = "#bulk-preview", "innerHTML"
    return response


def _verb(request: HttpRequest) -> str:
    verb = request.POST.get("verb", "")
    return verb if verb in TARGET else ""


@admin_required
@require_POST
def bulk_preview_view(request: HttpRequest) -> HttpResponse:
    verb, host_ids = _verb(request), _host_ids(request)
    if not verb:
        return _answer(request, status=422, error="Pick an action: cordon, drain or uncordon.")
    if not host_ids:
        return _answer(request, status=422, error="No hosts picked: tick some, or choose all hosts matching "
                                                  "the filters.")
    return _answer(request, preview=hosts_bulk_preview(host_ids=host_ids, verb=verb))


@admin_required
@require_POST
def bulk_confirm_view(request: HttpRequest) -> HttpResponse:
    verb, host_ids = _verb(request), _host_ids(request)
    if not verb or not host_ids:
        return _answer(request, status=422, error="Nothing to confirm: preview the change first.")
    try:
        result = hosts_bulk_action(host_ids=host_ids, verb=verb, actor=request.user.get_username(),
                                   fingerprint=request.POST.get("fingerprint", "")[:64])
    except DomainError as exc:
        # Stale (or nothing left to change): what the change would do now, the reason on top.
        return _answer(request, status=409 if isinstance(exc, Conflict) else 422, error=exc.message,
                       preview=hosts_bulk_preview(host_ids=host_ids, verb=verb))
    shown = ", ".join(result.changed[:10]) + (f" … ({len(result.changed)} in all)" if len(result.changed) > 10 else "")
    messages.success(request, f"{len(result.changed)} host(s) {TARGET[verb] or 'uncordoned'}: {shown}.")
    back = request.POST.get("back", "")
    target = back if back.startswith("/fleet/") else "/fleet/"
    if is_htmx(request):
        response = HttpResponse(status=204)
        response["HX-Redirect"] = target
        return response
    return redirect(target)
