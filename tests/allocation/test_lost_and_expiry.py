"""Leases on hosts that went away: lost after the grace, requeued when asked; the fair-share ledger."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from allocation.engine import run_pass
from allocation.ledger import rebuild_ledger, team_usage_views
from allocation.models import Lease, UsageLedger
from allocation.services.reaper import leases_reap
from inventory.models import Gpu, Host

pytestmark = pytest.mark.django_db


@pytest.fixture
def alice(demo_fleet, make_user, api):
    return api(make_user("alice", teams=("vision",)))


def _offline(host_name: str, since: timedelta) -> None:
    Host.objects.filter(name=host_name).update(reported_state="offline", state="offline",
                                              offline_since=timezone.now() - since)


def _host_of(lease_id: str) -> str:
    """The name of the host a granted lease runs on."""
    host = Lease.objects.get(pk=lease_id).host
    assert host is not None, "the lease is granted"
    return host.name


def test_a_lease_on_a_host_offline_past_the_grace_becomes_lost(alice, settings) -> None:
    lease = alice.post("/api/v1/leases/", {"pool": "training", "gpus": 2}, format="json").json()
    run_pass()
    host = _host_of(lease["id"])
    _offline(host, timedelta(seconds=10))
    assert leases_reap()["lost"] == 0  # still within the grace: the host may come back
    _offline(host, timedelta(seconds=settings.GPUPOOL["LOST_GRACE_S"] + 1))
    assert leases_reap()["lost"] == 1
    lost = Lease.objects.get(pk=lease["id"])
    assert lost.state == "lost" and "host offline" in lost.reason and host in lost.reason
    assert not lost.gpu_links.filter(active=True).exists()


def test_requeue_on_loss_puts_the_lease_back_and_the_next_pass_places_it_elsewhere(alice, settings) -> None:
    lease = alice.post("/api/v1/leases/", {"pool": "training", "gpus": 2, "requeue_on_loss": True},
                       format="json").json()
    run_pass()
    first_host = _host_of(lease["id"])
    _offline(first_host, timedelta(seconds=settings.GPUPOOL["LOST_GRACE_S"] + 1))
    Gpu.objects.filter(host__name=first_host).update(state="offline")
    counts = leases_reap()
    assert counts["lost"] == 1 and counts["requeued"] == 1
    requeued = Lease.objects.get(pk=lease["id"])
    assert (requeued.state, requeued.pending_code) == ("pending", "next_pass")
    run_pass()
    again = Lease.objects.get(pk=lease["id"])
    assert again.state == "granted" and _host_of(lease["id"]) != first_host and again.pending_code == ""
    actions = list(again.audit_events.order_by("at", "id").values_list("action", flat=True))
    assert actions[-3:] == ["lease.lost", "lease.pending", "lease.granted"]


def test_the_fair_share_ledger_counts_ended_leases_and_can_be_rebuilt_from_lease_rows(alice) -> None:
    lease = alice.post("/api/v1/leases/", {"pool": "training", "gpus": 4}, format="json").json()
    run_pass()
    Lease.objects.filter(pk=lease["id"]).update(granted_at=timezone.now() - timedelta(hours=1))
    alice.post(f"/api/v1/leases/{lease['id']}/release/")
    usage = team_usage_views(timezone.now())["vision"].decayed_usage
    assert 4 * 3600 * 0.99 < usage <= 4 * 3600  # one hour of 4 GPUs, barely decayed (7-day half-life)
    UsageLedger.objects.all().delete()
    assert rebuild_ledger(timezone.now()) == 1
    rebuilt = team_usage_views(timezone.now())["vision"].decayed_usage
    assert rebuilt == pytest.approx(usage, rel=1e-3)


def test_a_requeued_lease_may_be_granted_the_same_gpus_again_when_its_host_returns(alice, settings) -> None:
    lease = alice.post("/api/v1/leases/", {"pool": "training", "gpus": 2, "requeue_on_loss": True},
                       format="json").json()
    run_pass()
    first = Lease.objects.get(pk=lease["id"])
    first_gpus = set(first.gpu_links.values_list("gpu_id", flat=True))
    first_host = _host_of(lease["id"])
    _offline(first_host, timedelta(seconds=settings.GPUPOOL["LOST_GRACE_S"] + 1))
    leases_reap()
    # Every other GPU of the pool is taken meanwhile; the lost host comes back.
    Gpu.objects.filter(pool__name="training").exclude(pk__in=first_gpus).update(health="unhealthy")
    Host.objects.filter(name=first_host).update(state="ready", offline_since=None)
    run_pass()
    again = Lease.objects.get(pk=lease["id"])
    assert again.state == "granted"
    assert set(again.gpu_links.filter(active=True).values_list("gpu_id", flat=True)) == first_gpus
