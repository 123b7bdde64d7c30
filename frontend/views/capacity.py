"""Capacity moves (pool admins): pick hosts or GPUs and a target pool, preview, then confirm."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from allocation.capacity_preview import capacity_preview, lease_outcome_counts
from allocation.services.capacity import capacity_move
from core.errors import Conflict, DomainError
from frontend.access import admin_required, is_htmx
from frontend.forms import CapacityForm
from frontend.selectors import capacity_hosts
from inventory.models import Gpu, Host


def _form(data: Any = None) -> CapacityForm:
    return CapacityForm(data, host_ids=list(Host.objects.values_list("pk", flat=True)),
                        gpu_ids=list(Gpu.objects.filter(parent__isnull=True).values_list("pk", flat=True)))


def _page(request: HttpRequest, form: CapacityForm, status: int = 200, **extra: Any) -> HttpResponse:
    chosen_hosts = set(form.cleaned_data.get("hosts", [])) if form.is_bound and form.is_valid() else set()
    chosen_gpus = set(form.cleaned_data.get("gpus", [])) if form.is_bound and form.is_valid() else set()
    return render(request, "frontend/capacity.html", {
        "form": form, "hosts": capacity_hosts(), "chosen_hosts": chosen_hosts, "chosen_gpus": chosen_gpus,
        **extra}, status=status)


def _preview_response(request: HttpRequest, form: CapacityForm, status: int = 200, **extra: Any) -> HttpResponse:
    if is_htmx(request):
        return render(request, "frontend/partials/capacity_preview.html", {"form": form, **extra}, status=status)
    return _page(request, form, status=status, **extra)


@admin_required
def capacity(request: HttpRequest) -> HttpResponse:
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
            "form": _form(), "hosts": capacity_hosts(), "chosen_hosts": set(), "chosen_gpus": set(),
            "done": note, "done_preview": result.preview})
    messages.success(request, note)
    return redirect("frontend:capacity")
