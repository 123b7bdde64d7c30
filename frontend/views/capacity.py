"""Capacity moves (pool admins): pick hosts or GPUs and a target pool, preview, then confirm.

The picker lists hosts a page at a time, filtered like the fleet (pool, GPU state, model, name):
2,000 hosts with 16,000 GPU boxes took 1.6 s to draw. What is picked on other pages travels as
hidden inputs, so paging or filtering (HTMX, the picked boxes included) keeps the selection."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from allocation.selectors.capacity_preview import capacity_preview, lease_outcome_counts
from allocation.services.capacity import capacity_move
from core.errors import Conflict, DomainError
from frontend.access import admin_required, htmx_target, is_htmx
from frontend.fleet_page import fleet_spec, matching_hosts, sorted_hosts
from frontend.forms import CapacityForm
from frontend.list_page import list_context, paginate
from frontend.selectors import capacity_hosts, pool_names
from inventory.models import Gpu, Host

# What paging or filtering the picker sends along: the boxes ticked and the picks carried.
PICKS = "#capacity-form input[name=hosts], #capacity-form input[name=gpus]"


def _form(data: Any = None) -> CapacityForm:
    if data is None:  # nothing to validate: the ids are only read for a submitted form
        return CapacityForm(host_ids=[], gpu_ids=[])
    return CapacityForm(data, host_ids=list(Host.objects.values_list("pk", flat=True)),
                        gpu_ids=list(Gpu.objects.filter(parent__isnull=True).values_list("pk", flat=True)))


def _ids(values: list[str]) -> set[int]:
    """Picked ids read back from a paging request; what is not a number is not a pick."""
    return {int(v) for v in values if v.isdigit()}


def _picker(params: Any, chosen_hosts: set[int], chosen_gpus: set[int]) -> dict[str, Any]:
    """One page of the picker, with the picks that lie on other pages to carry along."""
    query = fleet_spec(pools=pool_names(), name="capacity").parse(params)
    page = paginate(sorted_hosts(matching_hosts(query), query), query,
                    lambda ids: capacity_hosts(list(ids.values_list("pk", flat=True))))
    shown_hosts = {row.host.pk for row in page.rows}
    shown_gpus = {tile.gpu.pk for row in page.rows for tile in row.gpus}
    return list_context(page, hosts=page.rows, chosen_hosts=chosen_hosts, chosen_gpus=chosen_gpus, picks=PICKS,
                        carried_hosts=sorted(chosen_hosts - shown_hosts),
                        carried_gpus=sorted(chosen_gpus - shown_gpus))


def _page(request: HttpRequest, form: CapacityForm, status: int = 200, **extra: Any) -> HttpResponse:
    valid = form.is_bound and form.is_valid()
    chosen_hosts = set(form.cleaned_data.get("hosts", [])) if valid else set()
    chosen_gpus = set(form.cleaned_data.get("gpus", [])) if valid else set()
    return render(request, "frontend/capacity.html", {
        "form": form, **_picker(request.GET, chosen_hosts, chosen_gpus), **extra}, status=status)


def _preview_response(request: HttpRequest, form: CapacityForm, status: int = 200, **extra: Any) -> HttpResponse:
    if is_htmx(request):
        return render(request, "frontend/partials/capacity_preview.html", {"form": form, **extra}, status=status)
    return _page(request, form, status=status, **extra)


@admin_required
def capacity(request: HttpRequest) -> HttpResponse:
    if htmx_target(request) == "cap-hosts":  # paging or filtering the picker: keep the picks
        picker = _picker(request.GET, _ids(request.GET.getlist("hosts")), _ids(request.GET.getlist("gpus")))
        return render(request, "frontend/partials/capacity_hosts.html", picker)
    return _page(request, _form())


@admin_required
@require_POST
def capacity_preview_view(request: HttpRequest) -> HttpResponse:
    form = _form(request.POST)
    if not form.is_valid():
        return _preview_response(request, form, status=422)
    data = form.cleaned_data
    preview = capacity_preview(pool=data["pool"], gpu_ids=data["gpus"], host_ids=data["hosts"], mode=data["mode"])
    return _preview_response(request, form, preview=preview, counts=lease_outcome_counts(preview))


@admin_required
@require_POST
def capacity_confirm_view(request: HttpRequest) -> HttpResponse:
    form = _form(request.POST)
    if not form.is_valid():
        return _preview_response(request, form, status=422)
    data = form.cleaned_data
    try:
        result = capacity_move(pool=data["pool"], gpu_ids=data["gpus"], host_ids=data["hosts"],
                               mode=data["mode"], fingerprint=data["fingerprint"],
                               actor=request.user.get_username())
    except DomainError as exc:
        # Stale or blocked: show what the move would do now, with the reason on top.
        preview = capacity_preview(pool=data["pool"], gpu_ids=data["gpus"], host_ids=data["hosts"],
                                   mode=data["mode"])
        response = _preview_response(request, form, status=409 if isinstance(exc, Conflict) else 422,
                                     preview=preview, counts=lease_outcome_counts(preview), error=exc.message)
        # The confirm button targets the whole picker; a refusal belongs in the preview pane.
        response["HX-Retarget"], response["HX-Reswap"] = "#preview", "innerHTML"
        return response
    fenced = f" Hosts {'drained' if data['mode'] == 'drain' else 'cordoned'} first: " \
             f"{', '.join(result.fenced_hosts)}." if result.fenced_hosts else ""
    note = f"Moved {result.moved} GPU(s) to pool {data['pool'].name}.{fenced}"
    if is_htmx(request):
        # The whole picker is re-rendered: hosts now show their new pools.
        return render(request, "frontend/partials/capacity_body.html", {
            "form": _form(), **_picker(request.GET, set(), set()), "done": note,
            "done_preview": result.preview})
    messages.success(request, note)
    return redirect("frontend:capacity")
