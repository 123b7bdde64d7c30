"""Allocated but idle on the dashboard: a leased GPU the idle check flagged carries an "idle" badge
on its fleet tile, its host card counts them, the lease page says how many and since when, and the
team page counts them per pool; nothing is flagged once the lease ends."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from allocation.models import Lease, LeaseGpu
from allocation.services.idle_gpus import gpus_idle_check
from inventory.models import GpuSample

pytestmark = pytest.mark.django_db


@pytest.fixture
def idle_vision(seeded: Any) -> Any:
    """vision's 8 training GPUs granted an hour ago; 3 of them at 1% for the last 40 minutes."""
    lease = seeded.leases["vision"]
    now = timezone.now()
    Lease.objects.filter(pk=lease.pk).update(granted_at=now - timedelta(hours=1))
    links = LeaseGpu.objects.filter(lease=lease, active=True).order_by("gpu__index")
    gpus = list(links.values_list("gpu_id", flat=True))
    GpuSample.objects.filter(gpu_id__in=gpus, at__gte=now - timedelta(minutes=41)).delete()
    GpuSample.objects.bulk_create([GpuSample(gpu_id=g, at=now - timedelta(minutes=m),
                                             utilization_pct=1.0 if i < 3 else 80.0)
                                   for i, g in enumerate(gpus) for m in range(41)])
    assert gpus_idle_check().flagged == 3
    return seeded


def test_the_fleet_marks_idle_gpus_and_counts_them_per_host(idle_vision: Any, client_for: Any) -> None:
    html = client_for(idle_vision.users["alice"]).get("/fleet/?pool=training").content.decode()
    assert html.count("data-idle ") == 3
    assert re.search(r'data-idle-count[^>]*>3 idle</span>', html)


def test_the_lease_page_says_how_many_gpus_sit_idle_and_since_when(idle_vision: Any, client_for: Any) -> None:
    lease = idle_vision.leases["vision"]
    html = client_for(idle_vision.users["alice"]).get(f"/leases/{lease.pk}/").content.decode()
    assert re.search(r'id="lease-idle"[^>]*>3 GPUs idle</span>', html)
    assert len(re.findall(r">idle since \d\d:\d\d</span>", html)) == 3


def test_the_team_page_counts_idle_gpus_per_pool(idle_vision: Any, client_for: Any) -> None:
    html = client_for(idle_vision.users["alice"]).get("/teams/vision/").content.decode()
    assert re.search(r'data-idle="training"[^>]*>3 idle</span>', html)
    research = client_for(idle_vision.users["dave"]).get("/teams/research/").content.decode()
    assert "data-idle=" not in research


def test_an_ended_lease_shows_no_idle_gpu(idle_vision: Any, client_for: Any) -> None:
    from allocation.services.leases import lease_release

    lease_release(lease=idle_vision.leases["vision"], actor="alice", reason="done")
    html = client_for(idle_vision.users["root"]).get("/fleet/?pool=training").content.decode()
    assert "data-idle" not in html
