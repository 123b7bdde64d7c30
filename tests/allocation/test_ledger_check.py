"""`manage.py check_ledger`, its periodic task and its gauge: every invariant holds on a ledger the
engine wrote, and each kind of drift made by hand is found, named and counted."""

from __future__ import annotations

import json
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.db.models import F
from django.test import Client

from allocation.engine import run_pass
from allocation.models import AuditEvent, GrantLedger, Lease
from allocation.selectors.invariants import CHECKS, ledger_check
from allocation.tasks import check_ledger
from inventory.models import Gpu

pytestmark = pytest.mark.django_db


@pytest.fixture
def granted(fleet: Any, leases: Any) -> list[Lease]:
    pool = fleet(hosts=1)
    made = leases(pool, 3, gpus=2)
    run_pass([pool.pk])
    rows = list(Lease.objects.filter(pk__in=[m.pk for m in made]))
    assert {r.state for r in rows} == {"granted"}
    return rows


def _check(*args: str) -> tuple[int, str]:
    out = StringIO()
    try:
        call_command("check_ledger", *args, stdout=out)
    except SystemExit as exc:
        return int(exc.code or 0), out.getvalue()
    return 0, out.getvalue()


def test_a_ledger_the_engine_wrote_passes_every_check(granted: list[Lease]) -> None:
    code, out = _check()
    assert code == 0
    assert out.startswith("ledger OK: 16 GPUs, 3 granted or bound leases")
    assert ledger_check().counts() == dict.fromkeys(CHECKS, 0)


def test_an_ended_lease_still_holding_gpus_is_drift(granted: list[Lease]) -> None:
    Lease.objects.filter(pk=granted[0].pk).update(state="released")
    code, out = _check()
    assert code == 1
    assert f"DRIFT ended_lease_holds_gpus: 1 × a lease that ended (its workload stopped) still linked " \
           f"to GPUs ({granted[0].pk})" in out


def test_a_lease_ending_with_its_workload_still_running_is_not_drift(granted: list[Lease]) -> None:
    from django.utils import timezone
    Lease.objects.filter(pk=granted[0].pk).update(state="preempted", ending_since=timezone.now())
    assert ledger_check().ok


def test_each_kind_of_drift_is_counted(granted: list[Lease]) -> None:
    Lease.objects.filter(pk=granted[0].pk).update(state="pending")
    Lease.objects.filter(pk=granted[1].pk).update(gpu_count=3)
    free = Gpu.objects.filter(leased=False).order_by("pk")
    Gpu.objects.filter(pk=free[0].pk).update(leased=True)  # marked leased, no lease: also its state
    Gpu.objects.filter(pk=free[1].pk).update(state="cordoned")
    # The running usage's sums, edited by hand (a bad restore): a lease's team runs one GPU more there.
    GrantLedger.objects.filter(team_id=granted[2].team_id).update(gpus=F("gpus") + 1)
    counts = ledger_check().counts()
    assert counts == {"gpu_in_two_leases": 0, "ended_lease_holds_gpus": 0, "pending_lease_holds_gpus": 1,
                      "holding_lease_gpu_count": 1, "running_usage_sums": 1, "gpu_leased_flag": 1, "gpu_state": 2}
    code, out = _check("-o", "json")
    assert code == 1
    body = json.loads(out)
    assert body["ok"] is False
    assert {f["check"] for f in body["findings"]} == {name for name, n in counts.items() if n}


def test_the_periodic_task_alerts_once_per_run_with_drift_and_the_gauge_counts_it(granted: list[Lease]) -> None:
    check_ledger()
    assert not AuditEvent.objects.filter(action="ledger.drift").exists()
    Gpu.objects.filter(pk=Gpu.objects.filter(leased=False).order_by("pk")[0].pk).update(state="cordoned")
    check_ledger()
    alert = AuditEvent.objects.get(action="ledger.drift")
    assert alert.data["findings"][0]["check"] == "gpu_state" and "1 × a GPU whose stored state" in alert.message
    text = Client().get("/metrics").content.decode()
    assert 'gpupool_ledger_drift{check="gpu_state"} 1.0' in text
    assert 'gpupool_ledger_drift{check="gpu_in_two_leases"} 0.0' in text
