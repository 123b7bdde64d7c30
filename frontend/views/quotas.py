"""Quotas: per team and pool, used vs guaranteed vs limit, fair-share standing; admin edits."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render

from allocation.models import Quota, Team
from allocation.services.admin import quota_set, team_set_weight
from core.errors import DomainError
from frontend.access import admin_required, is_htmx, login_required
from frontend.forms import QuotaForm, WeightForm
from frontend.selectors import team_quotas


def _page(request: HttpRequest, status: int = 200, **extra: object) -> HttpResponse:
    teams, ranked = team_quotas(user=request.user)
    return render(request, "frontend/quotas.html", {"teams": teams, "ranked": ranked, **extra}, status=status)


@login_required
def quotas(request: HttpRequest) -> HttpResponse:
    return _page(request)


def _quota_row(request: HttpRequest, quota_id: int, form: QuotaForm | None, status: int = 200,
               saved: bool = False) -> HttpResponse:
    teams, ranked = team_quotas(user=request.user)
    quota = next(q for t in teams for q in t.quotas if q.pk == quota_id)
    return render(request, "frontend/partials/quota_row.html",
                  {"q": quota, "form": form, "saved": saved, "ranked": ranked}, status=status)


@admin_required
def quota_edit(request: HttpRequest, quota_id: int) -> HttpResponse:
    """POST guaranteed/limit/lending limit for one quota. HTMX gets the re-rendered row (422 with the reason
    when refused); a plain form post is redirected back to the page with a message."""
    quota = get_object_or_404(Quota.objects.select_related("team", "pool"), pk=quota_id)
    if request.method != "POST":
        return redirect("frontend:quotas")
    form = QuotaForm(request.POST)
    error = ""
    if form.is_valid():
        try:
            quota_set(quota=quota, guaranteed=form.cleaned_data["guaranteed"], limit=form.cleaned_data["limit"],
                      lending_limit=form.cleaned_data["lending_limit"], actor=request.user.get_username())
        except DomainError as exc:
            error = exc.message
            form.add_error(None, error)
    else:
        error = " ".join(str(e) for e in form.non_field_errors()) or "Check the highlighted fields."
    label = f"{quota.team.name} in {quota.pool.name}"
    if is_htmx(request):
        if form.errors:
            return _quota_row(request, quota.pk, form, status=422)
        return _quota_row(request, quota.pk, None, saved=True)
    if form.errors:
        messages.error(request, f"Quota of {label} not saved: {error}")
        return _page(request, status=422)
    messages.success(request, f"Quota of {label} saved.")
    return redirect("frontend:quotas")


@admin_required
def team_weight(request: HttpRequest, team_name: str) -> HttpResponse:
    team = get_object_or_404(Team, name=team_name)
    if request.method != "POST":
        return redirect("frontend:quotas")
    form = WeightForm(request.POST)
    if form.is_valid():
        try:
            team_set_weight(team=team, weight=form.cleaned_data["weight"], actor=request.user.get_username())
        except DomainError as exc:
            form.add_error("weight", exc.message)
    if is_htmx(request):
        # A weight changes every team's rank: the whole list is re-rendered.
        teams, ranked = team_quotas(user=request.user)
        return render(request, "frontend/partials/quota_teams.html",
                      {"teams": teams, "ranked": ranked, "weight_team": team.name,
                       "weight_form": form if form.errors else None, "weight_saved": not form.errors},
                      status=422 if form.errors else 200)
    if form.errors:
        messages.error(request, f"Weight of {team.name} not saved: {' '.join(str(e) for e in form.errors['weight'])}")
    else:
        messages.success(request, f"Weight of {team.name} saved.")
    return redirect("frontend:quotas")
