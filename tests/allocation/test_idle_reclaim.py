"""Idle reclaim on real PostgreSQL: the warning, its clearing, the reclaim, never without telemetry,
foreign GPUs busy, the keep=true exemption (admins) and its 403, bounded queries."""

from __future__ import annotations

import sys
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from allocation.engine import run_pass
from allocation.models import AuditEvent, Lease, LeaseGpu
from allocation.services.idle import leases_idle_check
from allocation.tasks import idle_reclaim
from inventory.models import Gpu, GpuSample

pytestmark = pytest.mark.django_db

FLEET = """
pools: [{name: gpus, idle_reclaim: {below_util_pct: 5, for_s: 600, warn_s: 120}}, {name: plain}]
teams: [{name: a}]
priority_classes:
  - {name: default, value: 0}
  - {name: patient, value: 0, idle_reclaim: {below_util_pct: 5, for_s: 7200, warn_s: 120}}
sources:
  - {name: sim, kind: simulated, pool: gpus, hosts: 2, gpus_per_host: 4}
  - {name: sim-plain, kind: simulated, pool: plain, hosts: 1, gpus_per_host: 4}
"""
NOW = timezone.now().replace(microsecond=0)


@pytest.fixture(autouse=True)
def _now(monkeypatch: pytest.MonkeyPatch) -> None:
    """NOW is each test's own: set at import, it aged while other modules ran (a lease granted a
    minute after it made the samples "before" look stale, and the clear-the-warning test failed)."""
    monkeypatch.setattr(sys.modules[__name__], "NOW", timezone.now().replace(microsecond=0))


@pytest.fixture
def ann(apply_yaml, make_user, api) -> Any:
    apply_yaml(FLEET)
    GpuSample.objects.all().delete()  # the simulated fleet's own samples; each test writes its own
    return api(make_user("ann", teams=("a",)))


def _granted(client: Any, gpus: int = 2, pool: str = "gpus", **body: Any) -> str:
    lease = client.post("/api/v1/leases/", {"pool": pool, "gpus": gpus, **body}, format="json").json()
    run_pass()
    Lease.objects.filter(pk=lease["id"]).update(granted_at=NOW - timedelta(hours=2))
    assert Lease.objects.get(pk=lease["id"]).state == "granted"
    return str(lease["id"])


def _gpus(lease_id: str) -> list[int]:
    return list(LeaseGpu.objects.filter(lease_id=lease_id, active=True).values_list("gpu_id", flat=True))


def _samples(lease_id: str, util: float, *, start: datetime, end: datetime, only: int | None = None) -> None:
    """A sample every minute from `start` to `end` on the lease's GPUs (or only on GPU `only`)."""
    rows = []
    for gpu_id in ([only] if only is not None else _gpus(lease_id)):
        at = start
        while at <= end:
            rows.append(GpuSample(gpu_id=gpu_id, at=at, utilization_pct=util))
            at += timedelta(seconds=60)
    GpuSample.objects.bulk_create(rows)


def _actions(lease_id: str) -> list[str]:
    return list(AuditEvent.objects.filter(lease_id=lease_id).order_by("at", "id").values_list("action", flat=True))


def test_an_idle_lease_is_warned_once_with_its_reason_and_an_audit_event(ann) -> None:
    lease_id = _granted(ann)
    _samples(lease_id, 1.0, start=NOW - timedelta(minutes=15), end=NOW)
    assert leases_idle_check(now=NOW) == {"warned": 1, "cleared": 0, "reclaimed": 0}
    lease = Lease.objects.get(pk=lease_id)
    assert lease.warning.startswith("idle: all 2 GPUs below 5% utilisation since")
    assert lease.reason == lease.warning and lease.warned_at == NOW
    assert "reclaimed at" in lease.warning and lease.state == "granted"
    # Run again (another worker, the next beat): nothing new.
    assert leases_idle_check(now=NOW + timedelta(seconds=30)) == {"warned": 0, "cleared": 0, "reclaimed": 0}
    assert _actions(lease_id).count("lease.idle_warning") == 1
    body = ann.get(f"/api/v1/leases/{lease_id}/").json()
    assert body["warning"] == lease.warning and body["idle_exempt"] is False
    assert ann.get("/api/v1/leases/").json()["results"][0]["warning"] == lease.warning


def test_a_lease_idle_for_less_than_for_s_is_not_warned(ann) -> None:
    lease_id = _granted(ann)
    _samples(lease_id, 90.0, start=NOW - timedelta(minutes=15), end=NOW - timedelta(minutes=9))
    _samples(lease_id, 1.0, start=NOW - timedelta(minutes=8), end=NOW)
    assert leases_idle_check(now=NOW)["warned"] == 0
    assert Lease.objects.get(pk=lease_id).warning == ""


def test_utilisation_rising_clears_the_warning(ann) -> None:
    lease_id = _granted(ann)
    _samples(lease_id, 1.0, start=NOW - timedelta(minutes=15), end=NOW)
    leases_idle_check(now=NOW)
    _samples(lease_id, 60.0, start=NOW + timedelta(seconds=60), end=NOW + timedelta(seconds=60))
    assert leases_idle_check(now=NOW + timedelta(seconds=61))["cleared"] == 1
    lease = Lease.objects.get(pk=lease_id)
    assert (lease.warning, lease.warned_at, lease.state) == ("", None, "granted")
    assert lease.reason.startswith("idle warning cleared")
    assert _actions(lease_id)[-1] == "lease.idle_warning_cleared"


def test_a_warned_lease_still_idle_after_warn_s_is_preempted_with_cause_idle(ann) -> None:
    lease_id = _granted(ann)
    _samples(lease_id, 0.0, start=NOW - timedelta(minutes=15), end=NOW + timedelta(seconds=180))
    leases_idle_check(now=NOW)
    assert leases_idle_check(now=NOW + timedelta(seconds=119))["reclaimed"] == 0  # the warning stands
    assert leases_idle_check(now=NOW + timedelta(seconds=180))["reclaimed"] == 1
    lease = Lease.objects.get(pk=lease_id)
    assert lease.state == "preempted" and lease.reason.startswith("reclaimed for idleness: all 2 GPUs below 5%")
    assert lease.warning == "" and lease.ended_at is not None
    assert not LeaseGpu.objects.filter(lease_id=lease_id, active=True).exists()  # nothing bound: freed at once
    preempt = AuditEvent.objects.get(lease_id=lease_id, action="lease.preempt")
    assert preempt.data["cause"] == "idle" and preempt.actor == "system:idle"
    assert AuditEvent.objects.get(lease_id=lease_id, action="lease.preempted").data == {
        "from": "granted", "to": "preempted"}
    assert leases_idle_check(now=NOW + timedelta(seconds=240)) == {"warned": 0, "cleared": 0, "reclaimed": 0}


def test_leases_without_telemetry_are_never_reclaimed(ann) -> None:
    lease_id = _granted(ann)
    assert leases_idle_check(now=NOW) == {"warned": 0, "cleared": 0, "reclaimed": 0}
    # Warned once, then the samples stopped (a gap): the warning goes, the lease stays.
    _samples(lease_id, 0.0, start=NOW - timedelta(minutes=15), end=NOW)
    leases_idle_check(now=NOW)
    assert leases_idle_check(now=NOW + timedelta(minutes=30)) == {"warned": 0, "cleared": 1, "reclaimed": 0}
    assert Lease.objects.get(pk=lease_id).state == "granted"


def test_one_gpu_without_samples_keeps_the_lease(ann) -> None:
    lease_id = _granted(ann)
    _samples(lease_id, 0.0, start=NOW - timedelta(minutes=15), end=NOW, only=_gpus(lease_id)[0])
    assert leases_idle_check(now=NOW)["warned"] == 0


def test_a_gpu_used_by_a_foreign_process_counts_as_busy(ann) -> None:
    lease_id = _granted(ann)
    _samples(lease_id, 0.0, start=NOW - timedelta(minutes=15), end=NOW)
    Gpu.objects.filter(pk=_gpus(lease_id)[1]).update(foreign=True)
    assert leases_idle_check(now=NOW)["warned"] == 0
    Gpu.objects.filter(pk=_gpus(lease_id)[1]).update(foreign=False)
    assert leases_idle_check(now=NOW)["warned"] == 1


def test_a_class_rule_wins_over_the_pools_and_applies_in_a_pool_without_one(ann) -> None:
    patient = _granted(ann, priority_class="patient")
    plain = _granted(ann, pool="plain", priority_class="patient")
    unruled = _granted(ann, pool="plain", gpus=1)
    for lease_id in (patient, plain, unruled):
        _samples(lease_id, 0.0, start=NOW - timedelta(minutes=15), end=NOW)
    assert leases_idle_check(now=NOW)["warned"] == 0  # idle 15 minutes of the class's 2 hours
    for lease_id in (patient, plain):
        _samples(lease_id, 0.0, start=NOW - timedelta(hours=2), end=NOW - timedelta(minutes=16))
    assert leases_idle_check(now=NOW)["warned"] == 2
    assert Lease.objects.get(pk=unruled).warning == ""


def test_an_admin_renewing_with_keep_exempts_the_lease(ann, api, make_user) -> None:
    lease_id = _granted(ann)
    _samples(lease_id, 0.0, start=NOW - timedelta(minutes=15), end=NOW + timedelta(minutes=5))
    leases_idle_check(now=NOW)
    root = api(make_user("root", admin=True))
    body = root.post(f"/api/v1/leases/{lease_id}/renew/?keep=true", {}, format="json").json()
    assert body["idle_exempt"] is True and body["warning"] == ""
    assert "lease.idle_exempt" in _actions(lease_id)
    assert leases_idle_check(now=NOW + timedelta(minutes=5)) == {"warned": 0, "cleared": 0, "reclaimed": 0}
    assert Lease.objects.get(pk=lease_id).state == "granted"


def test_keep_from_a_non_admin_is_a_403_and_changes_nothing(ann) -> None:
    lease_id = _granted(ann)
    before = Lease.objects.get(pk=lease_id).expires_at
    response = ann.post(f"/api/v1/leases/{lease_id}/renew/?keep=true", {}, format="json")
    assert response.status_code == 403 and response.json()["code"] == "keep_requires_admin"
    lease = Lease.objects.get(pk=lease_id)
    assert lease.idle_exempt is False and lease.expires_at == before
    assert ann.post(f"/api/v1/leases/{lease_id}/renew/?keep=false", {}, format="json").status_code == 200


def test_a_bad_keep_value_is_a_400_naming_the_field(ann) -> None:
    lease_id = _granted(ann)
    response = ann.post(f"/api/v1/leases/{lease_id}/renew/?keep=maybe", {}, format="json")
    assert response.status_code == 400
    body = response.json()
    assert body["code"] == "invalid" and "keep" in body["details"], body


def test_the_check_costs_the_same_queries_for_many_leases(ann) -> None:
    def queries(n: int) -> int:
        ids = [_granted(ann, gpus=1) for _ in range(n)]
        for lease_id in ids:
            _samples(lease_id, 0.0, start=NOW - timedelta(minutes=15), end=NOW)
        with CaptureQueriesContext(connection) as ctx:
            assert leases_idle_check(now=NOW)["warned"] == n
        return len(ctx.captured_queries)

    assert queries(1) == queries(4)


def test_the_beat_task_runs_the_check(ann) -> None:
    lease_id = _granted(ann)
    _samples(lease_id, 0.0, start=timezone.now() - timedelta(minutes=15), end=timezone.now())
    idle_reclaim.apply()
    assert Lease.objects.get(pk=lease_id).warning.startswith("idle:")
