"""Row-local questions answered once, on the model: `Lease.is_holding`, `has_workload`,
`is_renewable`, `is_expired`, `end_time`, `Host.is_offline`; and the queryset forms
(`WORKLOAD_MAY_RUN`, `expired_at`) select exactly the rows whose method says yes."""

from __future__ import annotations

import itertools
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from allocation.choices import END_STATES, HOLDING_STATES, LeaseState
from allocation.models import WORKLOAD_MAY_RUN, Lease, expired_at
from inventory.choices import HostState
from inventory.models import Host

STATUSES: list[dict[str, Any]] = [{}, {"handle": {"pid": 1}}, {"handle": None}, {"bind": {"in_flight": True}},
                                  {"state": "stopped"}]


def test_holding_and_renewable_by_state() -> None:
    for state in LeaseState.values:
        lease = Lease(state=state)
        assert lease.is_holding == (state in HOLDING_STATES)
        assert lease.is_renewable == (state in (*HOLDING_STATES, LeaseState.PENDING))
        assert not (lease.is_holding and state in END_STATES)


def test_a_workload_may_run_with_a_handle_a_started_bind_or_while_bound() -> None:
    assert Lease(state=LeaseState.BOUND).has_workload
    assert Lease(state=LeaseState.PREEMPTED, binding_status={"handle": {"pid": 7}}).has_workload
    assert Lease(state=LeaseState.RELEASED, binding_status={"bind": {"in_flight": False}}).has_workload
    assert not Lease(state=LeaseState.GRANTED).has_workload
    assert not Lease(state=LeaseState.RELEASED, binding_status={"state": "stopped"}).has_workload


def test_expiry_and_end_time() -> None:
    now = timezone.now()
    assert Lease(state=LeaseState.GRANTED, expires_at=now).is_expired(now)
    assert not Lease(state=LeaseState.GRANTED, expires_at=now + timedelta(seconds=1)).is_expired(now)
    assert not Lease(state=LeaseState.GRANTED).is_expired(now)
    assert not Lease(state=LeaseState.RELEASED, expires_at=now).is_expired(now)
    granted = now + timedelta(seconds=2)  # a clock read from before the grant
    assert Lease(granted_at=granted).end_time(now) == granted
    assert Lease(granted_at=now - timedelta(hours=1)).end_time(now) == now
    assert Lease().end_time(now) == now


def test_host_is_offline_by_its_derived_state() -> None:
    for state in HostState.values:
        assert Host(state=state).is_offline == (state == HostState.OFFLINE)


@pytest.mark.django_db
def test_the_queryset_forms_select_what_the_methods_say(fleet: Any, leases: Any) -> None:
    pool = fleet(hosts=1)
    now = timezone.now()
    combos = list(itertools.product(LeaseState.values, range(len(STATUSES)), [None, -60, 60]))
    made = leases(pool, len(combos))
    for lease, (state, status, expires) in zip(made, combos, strict=True):
        lease.state, lease.binding_status = state, STATUSES[status]
        lease.expires_at = None if expires is None else now + timedelta(seconds=expires)
    Lease.objects.bulk_update(made, ["state", "binding_status", "expires_at"])
    rows = list(Lease.objects.filter(pool=pool))
    assert set(Lease.objects.filter(WORKLOAD_MAY_RUN).values_list("pk", flat=True)) == {
        r.pk for r in rows if r.has_workload}
    assert set(Lease.objects.exclude(WORKLOAD_MAY_RUN).values_list("pk", flat=True)) == {
        r.pk for r in rows if not r.has_workload}
    assert set(Lease.objects.filter(expired_at(now)).values_list("pk", flat=True)) == {
        r.pk for r in rows if r.is_expired(now)}
