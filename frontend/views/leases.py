"""Queue and leases: the pending queue, a filterable lease list, and one lease with its audit
trail, binding status and the owner's release/renew buttons."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme

from allocation.choices import ACTIVE_STATES
from allocation.models import AuditEvent, Lease, PriorityClass
from allocation.selectors import lease_list, team_list
from allocation.selectors.idle import idle_gpus
from allocation.services.leases import lease_release, lease_renew
from allocation.services.reservations import reservation_cancel
from core.errors import DomainError
from frontend.access import htmx_target, login_required
from frontend.forms import ReleaseForm, RenewForm
from frontend.lease_lists import lease_spec, leases_page, queue_page, queue_spec
from frontend.list_page import list_context
from frontend.selectors import pool_names
from frontend.timeline import reservation_timeline


def _back(request: HttpRequest, default: HttpResponse) -> HttpResponse:
    """Where a button's POST returns: its form's `next` (the team page's buttons come back to it)
    when that is a path on this site, else `default`."""
    target = request.POST.get("next", "")
    if target and url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()},
                                                  require_https=request.is_secure()):
        return redirect(target)
    return default


def _team_names(request: HttpRequest) -> list[str]:
    return list(team_list(user=request.user).order_by("name").values_list("name", flat=True))


@login_required
def queue(request: HttpRequest) -> HttpResponse:
    """Pending leases, filtered and paged in the database; the live part polls the same query."""
    priorities = list(PriorityClass.objects.values_list("name", flat=True))
    spec = queue_spec(pools=pool_names(), teams=_team_names(request), priorities=priorities)
    page = queue_page(user=request.user, query=spec.parse(request.GET))
    context = list_context(page, leases=page.rows, now=timezone.now())
    if htmx_target(request) == "queue-live":
        return render(request, "frontend/partials/queue_live.html", context)
    context["timeline"] = reservation_timeline(user=request.user, now=timezone.now())
    return render(request, "frontend/queue.html", context)


@login_required
def reservation_cancel_view(request: HttpRequest, reservation_id: int) -> HttpResponse:
    """Cancel from the queue page's timeline (POST, CSRF); the service decides who may."""
    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    try:
        reservation = reservation_cancel(reservation_id=reservation_id, user=request.user)
        messages.success(request, f"Reservation {reservation.pk} is cancelled.")
    except DomainError as exc:
        messages.error(request, exc.message)
    return _back(request, redirect("frontend:queue"))


@login_required
def leases(request: HttpRequest) -> HttpResponse:
    """Leases the user may see, filtered and paged in the database; the live part polls it."""
    spec = lease_spec(pools=pool_names(), teams=_team_names(request))
    page = leases_page(user=request.user, query=spec.parse(request.GET))
    context = list_context(page, leases=page.rows)
    if htmx_target(request) == "leases-live":
        return render(request, "frontend/partials/leases_live.html", context)
    return render(request, "frontend/leases.html", context)


def _visible_lease(request: HttpRequest, lease_id: str) -> Lease:
    """The lease if the user may see it; another team's lease is a 404, as in the API."""
    return get_object_or_404(lease_list(user=request.user), pk=lease_id)


@login_required
def lease_detail(request: HttpRequest, lease_id: str) -> HttpResponse:
    lease = _visible_lease(request, lease_id)
    links = sorted(lease.gpu_links.all(), key=lambda lk: (not lk.active, lk.gpu.host_id or 0, lk.gpu.index))
    idle = idle_gpus(gpu_ids=[lk.gpu_id for lk in links if lk.active])
    return render(request, "frontend/lease_detail.html", {
        "lease": lease,
        "links": [(lk, idle.get(lk.gpu_id) if lk.active else None) for lk in links],
        "idle_gpus": len(idle),
        "events": AuditEvent.objects.filter(lease=lease).order_by("at", "id")[:500],
        "can_act": lease.state in ACTIVE_STATES,
        "renewable": lease.is_renewable,
        "renew_form": RenewForm(), "release_form": ReleaseForm(),
    })


def _act(request: HttpRequest, lease_id: str, verb: str) -> HttpResponse:
    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    lease = _visible_lease(request, lease_id)  # members act only on their teams' leases
    actor = request.user.get_username()
    try:
        if verb == "release":
            release = ReleaseForm(request.POST)
            reason = release.cleaned_data["reason"] if release.is_valid() else ""
            lease = lease_release(lease=lease, actor=actor, reason=reason)
            messages.success(request, f"Lease {str(lease.pk)[:8]} is {lease.get_state_display().lower()}.")
        else:
            renew = RenewForm(request.POST)
            if not renew.is_valid():
                errors = (str(e) for errs in renew.errors.values() for e in errs)
                messages.error(request, "Not renewed: " + " ".join(errors))
                return _back(request, redirect("frontend:lease-detail", lease_id=lease.pk))
            lease = lease_renew(lease=lease, actor=actor, ttl_seconds=renew.cleaned_data["ttl_seconds"])
            until = f"{lease.expires_at:%Y-%m-%d %H:%M:%S} UTC" if lease.expires_at else "its grant"
            messages.success(request, f"Lease {str(lease.pk)[:8]} renewed: it now runs until {until}.")
    except DomainError as exc:
        messages.error(request, exc.message)
    return _back(request, redirect("frontend:lease-detail", lease_id=lease.pk))


@login_required
def lease_release_view(request: HttpRequest, lease_id: str) -> HttpResponse:
    return _act(request, lease_id, "release")


@login_required
def lease_renew_view(request: HttpRequest, lease_id: str) -> HttpResponse:
    return _act(request, lease_id, "renew")
